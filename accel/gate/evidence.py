"""The judgements a record carries before it is written (``judge_measured_cell``, called by the sweep once per
cell): a feature engaged only on its own evidence (``evidence_problem``, ``not_engaged_error``), an engine
cell only on its log or an output that differs (``judge_engine_engagement``), and a step below its roofline
floor marks the timing invalid (``judge_timing_validity``)."""

from __future__ import annotations

from typing import Any

from accel.gate.verdict import is_reference
from accel.report.format import fmt
from accel.results import feature_options, lossy_features, parity_of


def evidence_problem(entry: Any) -> str | None:
    """Why one feature's evidence entry does not show engagement, or None when it does.

    Only ``engaged: true`` (a JSON boolean) is engagement: a missing entry, ``false``, or a value of another
    type (``"no"``, ``1``: a hand-edited or foreign record) is not."""
    if entry is None:
        return "no evidence recorded"
    if not isinstance(entry, dict):
        return f"malformed evidence: expected an object, got {entry!r}"
    engaged = entry.get("engaged")
    if not isinstance(engaged, bool):
        return f"malformed evidence: engaged should be true or false, got {engaged!r}"
    if not engaged:
        return str(entry.get("summary") or "not engaged")
    return None


def not_engaged_error(evidence: dict[str, Any], features: list[str] | None = None) -> str | None:
    """A measured cell's error when a feature's own verdict says it did not engage (``summary`` of each), or
    left no evidence at all (each of ``features`` needs an entry), or None: the cell records it as failed
    (its run does not show the feature)."""
    names = list(dict.fromkeys([*(features or []), *evidence]))
    problems = [(name, evidence_problem(evidence.get(name))) for name in names]
    return "; ".join(f"{name}: {problem}" for name, problem in problems if problem) or None


def judge_engine_engagement(record: dict[str, Any]) -> None:
    """An engine cell's features engage only on evidence: the engine's own log line, or, for a lossy
    feature, an output that differs from the engine's baseline (an effect its default path cannot produce).
    A lossy feature whose output is identical did not engage whatever the engine logged. Without evidence
    for every feature the cell fails with the reason; acceptance alone is never engagement.

    The sweep records the facts (the engine's log lines as evidence, ``parity.bit_identical`` against the
    engine's baseline) and calls this before it writes the record, so the record, the report and the gate
    agree on the cell's status."""
    if not record.get("engine") or record["status"] != "ok":
        return
    evidence = record.setdefault("evidence", {})
    parity = parity_of(record)
    missing = []
    lossy_ones = lossy_features(record)
    for name in feature_options(record):
        entry = evidence.setdefault(name, {"engaged": False, "summary": "accepted by vLLM-Omni"})
        lossy = name in lossy_ones
        if lossy and parity.get("bit_identical") is False:
            entry["engaged"] = True
            entry["summary"] = "; ".join(
                [*([entry["summary"]] if entry.get("engine_log") else []), "output differs from the engine's baseline"]
            )
        elif lossy and parity.get("bit_identical"):
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; but the output is identical to the engine's baseline"
        elif lossy:
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; no baseline output to show an effect"
        if not entry["engaged"]:
            missing.append(f"{name}: {entry['summary']}")
    if missing:
        record["status"] = "failed"
        record["error"] = "no evidence of engagement: " + "; ".join(missing)


def judge_timing_validity(record: dict[str, Any]) -> None:
    """A cell whose fastest step beat its floor (FLOPs / peak, ``roofline.below_floor``) was timed by a clock
    that cannot be trusted: ``invalid_measurement`` says so, and the gate fails its timing check. A feature
    that skips or changes the work (``Feature.roofline_exempt``) may beat the full-step floor:
    ``roofline.floor_check`` then says the floor does not apply, and why, and its MFU moves to
    ``roofline.effective_mfu`` (``mfu`` null)."""
    from accel.features import FEATURES

    roof = record.get("roofline") or {}
    exempt = [FEATURES[n].roofline_exempt for n in feature_options(record) if n in FEATURES]
    exempt = [reason for reason in exempt if reason]
    if roof and exempt:
        roof["floor_check"] = f"not applicable: {exempt[0]}"
        # Nor does MFU: the step did not run the FLOPs it counts (a cached step's "MFU" exceeds 100%). Kept, named
        # for what it is, as effective_mfu (the full step's FLOPs over this step's time).
        if roof.get("mfu") is not None:
            roof["effective_mfu"] = roof["mfu"]
            roof["mfu"] = None
        return
    if roof.get("below_floor"):
        record["invalid_measurement"] = (
            f"a step took {fmt(roof['fastest_step_s'] * 1e3, 3)} ms, below the {fmt(roof['floor_step_s'] * 1e3, 3)} "
            "ms floor (FLOPs / peak): the timer cannot be trusted"
        )


def judge_measured_cell(record: dict[str, Any]) -> None:
    """Every judgement a record carries, made here and only here; the sweep calls it once per cell, after
    attaching the facts (evidence, parity, roofline) and before writing the record, so the record, the report
    and the gate agree. An in-process cell whose feature's own ``verify()`` found no engagement fails
    (``not_engaged_error``); an engine cell engages only on evidence (``judge_engine_engagement``); a step
    below its floor marks the timing invalid (``judge_timing_validity``)."""
    if record.get("status") == "ok" and not record.get("engine") and not is_reference(record):
        not_engaged = not_engaged_error(record.get("evidence") or {}, list(feature_options(record)))
        if not_engaged:
            record.update(status="failed", error=not_engaged)
    judge_engine_engagement(record)
    judge_timing_validity(record)
