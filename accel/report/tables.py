"""Markdown feature tables generated from measured results, in vLLM-Omni's docs conventions.

- ``support_matrix``: models (bold) x features grouped by family. ``✅ 1.8x · 0.97`` (speedup and SSIM of
  the best passing single-feature cell), ``⚠`` engaged but out of parity, ``❔`` in parity with an adherence
  loss too few images could decide (footnote), ``❌`` with a numbered footnote
  (failed, not engaged, or unsupported, with the reason; "declared, not measured" when an engine's feature
  mapping decided it without running the engine), ``🔧`` not supported by omni-accel yet (a harness gap,
  ``refused_by: harness``: never the model's ❌), ``➖`` not measured on that model.
- ``compatibility_matrix``: lower-triangular, feature x feature, from measured combinations and the
  conflict rules: ``✅`` a combination passed, ``⚠`` it ran but out of parity, ``❌`` failed or excluded
  by a rule (footnote), blank when not measured.
- ``performance_table``: per model, every cell: latency, speedup, peak memory, memory reduction,
  SSIM, PSNR, status.
- ``adherence-<model>`` (models with a ground truth only): per cell, prompt adherence per attribute kind
  and overall with its interval, and its loss against the baseline (``accel.report.adherence``).

Cells are centred (``:-:``), a legend and units follow each table, so a serving project can paste them.
"""

from __future__ import annotations

from typing import Any

from accel.gate import ENVIRONMENT, EXPECTED, PASS, SKIP, GateData, gate_records
from accel.gate.judge import RunMeasure, claims_voided, with_publishable_claims
from accel.measure.speedup import format_speedup
from accel.raised_in import failure_owner_words
from accel.report.format import fmt, table_lines
from accel.report.published import PublishedClaim, disagreement, disagreements_table, published_marker
from accel.results import (
    declared_tag,
    feature_options,
    is_noise_floor,
    parity_of,
    peak_memory_bytes,
    refused_by,
    warm_median,
)


class Footnotes:
    """Numbered footnotes, each text once."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"<sup>{self.texts.index(text) + 1}</sup>"

    def render(self) -> str:
        return "\n".join(f"{i}. {text}" for i, text in enumerate(self.texts, start=1))


def _families() -> dict[str, list[str]]:
    from accel.features import FEATURES

    families: dict[str, list[str]] = {}
    for feature in FEATURES.values():
        families.setdefault(feature.family, []).append(feature.name)
    return families


def _measured(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["variant"] != "baseline" and not is_noise_floor(r)]


def _verdicts(records: list[dict[str, Any]], data: GateData) -> dict[tuple[str, str], Any]:
    return {(v.model, v.variant): v for v in gate_records(records, data).verdicts}


def _failed_reference(verdict: Any) -> str | None:
    """What became of the baseline a verdict's cell was measured against, when it did not run (the gate's
    failed "baseline" check): such a cell has no parity or speedup to show, only that it ran."""
    return next((str(c.measured) for c in verdict.checks if c.name == "baseline" and not c.ok), None)


# A refusal that is omni-accel's own (it does not support or cannot observe the feature there yet): its own mark,
# so that a reader never takes a harness gap for the model's ❌.
HARNESS_MARK = "🔧"
# A cell within parity whose adherence loss the measurement cannot decide (its interval straddles the limit):
# neither supported nor failed, until more prompts are run.
INCONCLUSIVE_MARK = "❔"
# How a footnote names who refused a cell that did not run (``accel.results.refused_by``).
REFUSED_BY_WORDS = {
    "library": "refused by the library",
    "model": "the model lacks what it needs",
    "harness": "not supported by omni-accel yet (a harness gap, not the model's)",
}


def _cell(record: dict[str, Any], verdict: Any) -> tuple[str, str | None]:
    """(mark, footnote) of one cell."""
    parity = parity_of(record)
    variant = record["variant"]
    if verdict.outcome == SKIP and verdict.skip_kind == ENVIRONMENT:
        return "➖", f"{variant}: not measured, {record.get('error')}"
    reference = _failed_reference(verdict)
    if reference and record["status"] == "ok":
        return "➖", f"{variant}: not measured against a baseline: the baseline {reference}"
    undecided = [c for c in verdict.checks if c.inconclusive]
    decided_fail = [c for c in verdict.checks if not c.ok and not c.inconclusive]
    if record["status"] == "ok" and undecided and verdict.in_parity and not decided_fail and not verdict.reasons:
        return INCONCLUSIVE_MARK, f"{variant}: in parity, but " + "; ".join(c.line() for c in undecided)
    if record["status"] == "ok" and verdict.outcome == PASS and verdict.in_parity:
        if verdict.no_effect:
            return "⚪", f"{variant}: " + "; ".join(verdict.notes)
        supported = f"✅ {format_speedup(record.get('speedup_ci'))} · {fmt(parity.get('ssim'), 2)}"
        # Supported, with what the reader should know (a compile's graph breaks).
        return supported, (f"{variant}: supported, " + "; ".join(verdict.notes)) if verdict.notes else None
    engaged = all(state in ("engaged", "no effect", "excused") for state in verdict.feature_states.values())
    if record["status"] == "ok" and engaged and verdict.in_parity is False:
        claimed = " (claimed unsupported)" if verdict.skip_kind == EXPECTED else ""
        measured = f"SSIM {fmt(parity.get('ssim'), 3)}, PSNR {fmt(parity.get('psnr'), 1)} dB"
        if any(c.name.startswith("output stability") and not c.ok for c in verdict.checks):
            measured += ", outputs differ between timed passes"
        # What the library does that changes the output (a feature's parity_note: VAE tiling's tile geometry).
        why = [
            e["parity_note"]
            for e in (record.get("evidence") or {}).values()
            if isinstance(e, dict) and e.get("parity_note")
        ]
        return "⚠", f"{variant}: engaged but {measured}{claimed}" + (f"; {'; '.join(why)}" if why else "")
    if record["status"] == "ok":
        return "❌", f"{variant}: " + "; ".join(verdict.message().splitlines())
    owner = refused_by(record)
    if owner == "device":  # refused after loading for want of this device: not measured here, as ➖ says
        return "➖", f"{variant}: not measured, {record.get('error')}"
    if owner in REFUSED_BY_WORDS:
        return HARNESS_MARK if owner == "harness" else "❌", (
            f"{variant}: {REFUSED_BY_WORDS[owner]}: {record.get('error')}{declared_tag(record)}"
        )
    failed = failure_owner_words(record.get("raised_in")) if record["status"] == "failed" else ""
    return "❌", f"{variant}: {failed}{record.get('error')}{declared_tag(record)}"


def support_matrix(records: list[dict[str, Any]], data: GateData, published: list[PublishedClaim] | None = None) -> str:
    """Models x features (single-feature cells), grouped by family, with footnotes.

    A feature measured in several settings on a model (compile regional and full, several quantization
    methods) shows every setting, one line each with its variant name: a refusal is never hidden behind
    another setting's success. A cell whose verdict contradicts a published claim (``published``, default
    feature_matrix/published_claims.yaml) carries the disagreement marker and a footnote."""
    verdicts = _verdicts(records, data)
    published = _published(published)
    notes = Footnotes()
    families = _families()
    single = [r for r in _measured(records) if len(feature_options(r)) == 1]
    used = {name for r in single for name in r["features"]}
    columns = [(family, name) for family, names in families.items() for name in names if name in used]
    if not columns:
        return "_No single-feature cells measured._\n"
    header = ("model", *(f"{family}<br>`{name}`" for family, name in columns))
    rows = []
    for model in dict.fromkeys(r["model"] for r in records):
        cells = []
        for _, name in columns:
            candidates = [r for r in single if r["model"] == model and name in r["features"]]
            if not candidates:
                cells.append("➖")
                continue
            marks = []
            for record in candidates:
                mark, note = _cell(record, verdicts[(model, record["variant"])])
                cell = mark + (notes.ref(note) if note else "")
                found = disagreement(record, classify(record, verdicts[(model, record["variant"])])[0], published)
                marks.append(published_marker(cell, found, notes))
            if len(candidates) == 1:
                cells.append(marks[0])
            else:
                cells.append("<br>".join(f"{r['variant']}: {m}" for r, m in zip(candidates, marks, strict=True)))
        rows.append((f"**{model}**", *cells))
    legend = (
        "Legend: ✅ supported (speedup vs the unaccelerated baseline · SSIM vs its output; a footnote when its "
        "evidence qualifies it: a compile's graph breaks) · ⚪ engaged, but no "
        "effect on this device (footnote) · ⚠ engaged but out of parity · "
        f"{INCONCLUSIVE_MARK} in parity, but the adherence loss's interval straddles its limit: too few images to "
        "decide (footnote) · ❌ not supported (footnote: refused by "
        "the library, its message quoted, or the model lacks what it needs), failed or not engaged · "
        f"{HARNESS_MARK} not supported by omni-accel yet: a harness gap, not the model's (footnote) · ➖ not "
        "measured (footnote: why it could not run here). A feature measured in several "
        "settings shows each, by variant name. Speedup: median "
        "reference / variant ratio of calls interleaved with an unaccelerated reference, with its interval "
        "(`≈1.0x`: equivalent, its interval inside the noise threshold; `≈1.0x?`: undecided, its interval "
        "includes 1.0; `?`: unverified; `–`: timed sequentially, cell against cell, so not shown); SSIM as "
        "defined in the report."
    )
    lines = table_lines(header, ("left", *("center",) * len(columns)), rows)
    return "\n".join(lines) + f"\n\n{legend}\n\n{notes.render()}\n"


def compatibility_matrix(records: list[dict[str, Any]], data: GateData) -> str:
    """Lower-triangular feature x feature matrix from measured combinations and the conflict rules."""
    from accel.features import FEATURES
    from accel.features.rules import find_conflict

    verdicts = _verdicts(records, data)
    notes = Footnotes()
    measured = _measured(records)
    names = [n for n in FEATURES if any(n in feature_options(r) for r in measured)]
    pairs: dict[frozenset[str], str] = {}
    for record in measured:
        features = sorted(feature_options(record))
        for i, a in enumerate(features):
            for b in features[i + 1 :]:
                verdict = verdicts[(record["model"], record["variant"])]
                if verdict.skip_kind == ENVIRONMENT or (record["status"] == "ok" and _failed_reference(verdict)):
                    continue  # not measured here, or against no baseline: says nothing about the pair
                if verdict.outcome == PASS and record["status"] == "ok":
                    mark = "✅"
                elif record["status"] == "ok":
                    mark = "⚠"
                else:
                    mark = "❌" + notes.ref(f"{record['variant']}: {record.get('error')}{declared_tag(record)}")
                key = frozenset((a, b))
                if key not in pairs or mark == "✅":
                    pairs[key] = mark
    header = ("", *(f"`{n}`" for n in names))
    rows = []
    for i, a in enumerate(names):
        cells = []
        for j, b in enumerate(names):
            if j > i:
                cells.append("")
            elif j == i:
                cells.append("—")
            else:
                found = find_conflict({a: FEATURES[a].config_cls(), b: FEATURES[b].config_cls()})
                if found is not None:
                    cells.append("❌" + notes.ref(f"{a} + {b}: {found[0].reason}"))
                else:
                    cells.append(pairs.get(frozenset((a, b)), ""))
        rows.append((f"`{a}`", *cells))
    legend = (
        "Legend: ✅ measured together and passed · ⚠ ran together, out of parity · ❌ failed, or excluded by a "
        "rule in feature_matrix/rules.yaml (footnote) · blank: not measured together (with default options)."
    )
    lines = table_lines(header, ("left", *("center",) * len(names)), rows)
    return "\n".join(lines) + f"\n\n{legend}\n\n{notes.render()}\n"


def _status(verdict: Any, record: dict[str, Any]) -> str:
    """The gate's verdict in words; a cell that did not run or failed as claimed says why."""
    if verdict is None:
        status: str = record["status"]
        return status
    if verdict.outcome == SKIP:
        reason = verdict.message().splitlines()[0]
        if verdict.skip_kind == EXPECTED and verdict.in_parity is False and record["status"] == "ok":
            reason = "out of parity (as claimed)"
        return f"skipped: {reason}".replace("|", "/")
    if verdict.outcome == PASS and verdict.no_effect:
        on_cpu = any("no effect on cpu" in note for note in verdict.notes)
        return f"pass (engaged, no effect on {record.get('device')})" if on_cpu else "pass (engaged, no effect)"
    outcome: str = verdict.outcome
    return outcome


def performance_table(records: list[dict[str, Any]], model: str, data: GateData) -> str:
    """Every cell of one model: latency, speedup, memory, parity and gate status."""
    verdicts = _verdicts(records, data)
    header = (
        "config",
        "latency (ms)",
        "speedup",
        "peak memory (MiB)",
        "memory reduction",
        "SSIM",
        "PSNR (dB)",
        "status",
    )
    rows = []
    for r in records:
        if r["model"] != model or is_noise_floor(r):
            continue
        warm = warm_median(r)
        parity = parity_of(r)
        memory = peak_memory_bytes(r)
        verdict = verdicts.get((model, r["variant"]))
        status = "baseline" if r["variant"] == "baseline" else _status(verdict, r) + declared_tag(r)
        speedup = "1.00x" if r["variant"] == "baseline" and warm else format_speedup(r.get("speedup_ci"))
        rows.append(
            (
                r["variant"], fmt(warm * 1e3 if warm else None, 1), speedup, fmt(memory / 2**20 if memory else None, 0),
                fmt(r.get("memory_reduction"), 2) + ("x" if r.get("memory_reduction") else ""),
                fmt(parity.get("ssim"), 4), fmt(parity.get("psnr"), 2), status,
            )
        )  # fmt: skip
    # Records from before cell_memory_bytes (issue 40) hold the raw peak; the legend says which the table shows.
    own = any(r.get("cell_memory_bytes") is not None for r in records if r["model"] == model)
    measure = (
        "the cell's own, its peak minus what the process held at its start (device allocated on a GPU, else host "
        "RSS; a parallel cell's summed over its ranks), in "
        if own
        else "device allocated on a GPU, else host RSS, in "
    )
    legend = (
        "Units: warm median latency per call in ms; speedup: interleaved with an unaccelerated reference, with "
        "its interval (`≈1.0x`: equivalent within the noise band; `≈1.0x?`: undecided, its interval includes 1.0; "
        "`?`: unverified; `–`: timed sequentially, cell against cell, so not shown); peak memory: "
        + measure
        + "MiB; memory reduction = baseline peak / variant peak (the same measure); status: the gate's verdict "
        "(skipped: the cell did not run, or failed as its claim says, with the reason)."
    )
    lines = table_lines(header, ("left", *("center",) * 7), rows)
    return "\n".join(lines) + f"\n\n{legend}\n"


# What a single-feature cell says about its feature on its model, in the order the tables list them.
SUPPORTED, NO_EFFECT, OUT_OF_PARITY, INCONCLUSIVE = (
    "supported",
    "engaged, no effect here",
    "engaged, out of parity",
    "in parity, adherence inconclusive",
)
REFUSED_MODEL, REFUSED_LIBRARY, REFUSED_DEVICE, HARNESS_GAP, FAILED = (
    "refused by the model",
    "refused by the library",
    "refused by this device",
    "not supported by omni-accel yet",
    "failed",
)
VERDICTS = (
    SUPPORTED,
    NO_EFFECT,
    OUT_OF_PARITY,
    INCONCLUSIVE,
    REFUSED_MODEL,
    REFUSED_LIBRARY,
    REFUSED_DEVICE,
    HARNESS_GAP,
    FAILED,
)


def classify(record: dict[str, Any], verdict: Any) -> tuple[str, str | None]:
    """(verdict, reason) of one single-feature cell, from the same marks as the support matrix: ✅ supported,
    ⚪ engaged with no effect on this device, ⚠ out of parity, ➖ refused by this device, 🔧 not supported by
    omni-accel yet; a ❌ is refused by the model or by the library when the cell did not run for their reason
    (``refused_by``), else failed (or not engaged)."""
    mark, note = _cell(record, verdict)
    reason = note.split(": ", 1)[1] if note else None
    if mark.startswith("✅"):
        return SUPPORTED, reason
    if mark == "⚪":
        return NO_EFFECT, reason
    if mark == "⚠":
        return OUT_OF_PARITY, reason
    if mark == INCONCLUSIVE_MARK:
        return INCONCLUSIVE, reason
    if mark == "➖" and _failed_reference(verdict):
        return FAILED, reason  # the gate fails it: nothing was compared (the footnote says which baseline)
    if mark == "➖":
        return REFUSED_DEVICE, str(record.get("error"))
    owner = refused_by(record)
    by_owner = {"model": REFUSED_MODEL, "library": REFUSED_LIBRARY, "harness": HARNESS_GAP}
    if owner in by_owner:
        return by_owner[owner], str(record.get("error"))
    return FAILED, reason


def feature_tables(records: list[dict[str, Any]], data: GateData) -> dict[str, str]:
    """One table per feature (``feature-<name>``), as vLLM-Omni's per-feature docs pages list models: every
    model the feature was measured on, the models it works on first, each with its verdict and reason."""
    verdicts = _verdicts(records, data)
    single = [r for r in _measured(records) if len(feature_options(r)) == 1]
    tables = {}
    for family, names in _families().items():
        for name in names:
            cells = [r for r in single if name in r["features"]]
            if not cells:
                continue
            rows = []
            for record in cells:
                verdict_of, reason = classify(record, verdicts[(record["model"], record["variant"])])
                ssim = (
                    parity_of(record).get("ssim")
                    if verdict_of in (SUPPORTED, NO_EFFECT, OUT_OF_PARITY, INCONCLUSIVE)
                    else None
                )
                rows.append((VERDICTS.index(verdict_of), record, verdict_of, reason, ssim))
            rows.sort(key=lambda row: row[0])
            working = sorted({row[1]["model"] for row in rows if row[2] in (SUPPORTED, NO_EFFECT)})
            models = {row[1]["model"] for row in rows}
            lines = table_lines(
                ("model", "variant", "verdict", "SSIM", "reason"),
                ("left", "left", "center", "center", "left"),
                [
                    (f"**{r['model']}**", r["variant"], v, fmt(ssim, 3), (reason or "").replace("|", "/"))
                    for _, r, v, reason, ssim in rows
                ],
            )
            head = f"`{name}` ({family}) works on {len(working)} of {len(models)} models"
            head += f": {', '.join(working)}." if working else "."
            tables[f"feature-{name}"] = head + "\n\n" + "\n".join(lines) + "\n"
    return tables


def family_counts(records: list[dict[str, Any]], data: GateData) -> str:
    """Per model: how many single-feature cells ended in each verdict (supported ... failed)."""
    verdicts = _verdicts(records, data)
    single = [r for r in _measured(records) if len(feature_options(r)) == 1]
    rows = []
    for model in dict.fromkeys(r["model"] for r in records):
        counts = dict.fromkeys(VERDICTS, 0)
        for record in (r for r in single if r["model"] == model):
            counts[classify(record, verdicts[(model, record["variant"])])[0]] += 1
        rows.append((f"**{model}**", *(str(counts[v]) for v in VERDICTS), str(sum(counts.values()))))
    lines = table_lines(("model", *VERDICTS, "cells"), ("left", *("center",) * (len(VERDICTS) + 1)), rows)
    legend = (
        "Counts of single-feature cells per model, from the same records and verdicts as the support matrix: "
        "supported (engaged, within parity), engaged with no effect on this device, engaged but out of parity, "
        "refused by the model (a structure it lacks, named), refused by the library (its message quoted, e.g. "
        "diffusers' `compile_repeated_blocks` without `_repeated_blocks`), refused by this device (package or "
        "accelerator missing), not supported by omni-accel yet (a harness gap, not the model's), failed (an "
        "error, or no engagement evidence)."
    )
    return "\n".join(lines) + f"\n\n{legend}\n"


def _published(published: list[PublishedClaim] | None) -> list[PublishedClaim]:
    from accel.report.published import load_published_claims

    return load_published_claims() if published is None else published


def published_disagreements(
    records: list[dict[str, Any]], data: GateData, published: list[PublishedClaim] | None = None
) -> str:
    """Every single-feature cell whose verdict contradicts a published claim, with its source and cause."""
    verdicts, published = _verdicts(records, data), _published(published)
    single = [r for r in _measured(records) if len(feature_options(r)) == 1]
    found = [disagreement(r, classify(r, verdicts[(r["model"], r["variant"])])[0], published) for r in single]
    return disagreements_table([d for d in found if d is not None])


def render_tables(
    records: list[dict[str, Any]],
    data: GateData,
    run: RunMeasure | None = None,
    published: list[PublishedClaim] | None = None,
) -> dict[str, str]:
    """Every table by its injection name: support-matrix, compatibility, family-counts, published-disagreements,
    feature-<name>, performance-<model>. Each claim is shown as the gate publishes it (``with_publishable_claims``,
    against the gate's verdicts and ``run``: what the run's profile asked): a speedup the record holds but its noise
    floor does not verify, or one whose feature did not engage, is shown unverified here too. ``published``: the
    published claims to cross-check (default: feature_matrix/published_claims.yaml)."""
    records = with_publishable_claims(records, claims_voided(gate_records(records, data, run=run).verdicts), run)
    published = _published(published)
    tables = {
        "support-matrix": support_matrix(records, data, published),
        "compatibility": compatibility_matrix(records, data),
        "family-counts": family_counts(records, data),
        "published-disagreements": published_disagreements(records, data, published),
        **feature_tables(records, data),
    }
    for model in dict.fromkeys(r["model"] for r in records):
        tables[f"performance-{model}"] = performance_table(records, model, data)
    from accel.report.adherence import adherence_table, has_adherence

    for model in dict.fromkeys(r["model"] for r in records):
        mine = [r for r in records if r["model"] == model]
        if has_adherence(mine):
            tables[f"adherence-{model}"] = adherence_table(mine)
    return tables
