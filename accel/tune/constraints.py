"""Whether a tuned cell holds the constraints, with the evidence for each, and what it is besides: inert
(a cache that skipped nothing) or harmful (its whole speed interval below 1: the hooks cost more than they save).

By default the constraints are the gate's (``accel.gate``): the cell's verdict must be a pass, which holds its
parity to the lossy limits of its features' families, its loss of prompt adherence to the adherence limit where
the model has a ground truth, and a lossless feature to its lossless limits (the gate's lossless verdict). A
profile's ``tune.constraints`` replace the parity and adherence limits; the cell must still have run and every
feature engaged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.gate import PASS, CellVerdict
from accel.tune.spec import Constraints

CACHE_FAMILY = "cache"
ENGAGED = ("engaged",)


@dataclass
class Judgement:
    """One cell against the constraints: passed or not, each constraint's evidence line, and its labels."""

    passed: bool
    evidence: list[str] = field(default_factory=list)
    inert: bool = False
    harmful: bool = False
    inert_reason: str = ""  # what made it inert, in the cache's own evidence (``inert_reason``)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "evidence": self.evidence,
            "inert": self.inert,
            "harmful": self.harmful,
            "inert_reason": self.inert_reason,
        }


def _speed_interval(record: dict[str, Any]) -> tuple[float, float] | None:
    claim = record.get("speedup_ci") or {}
    low, high = claim.get("low"), claim.get("high")
    return (float(low), float(high)) if low is not None and high is not None else None


def is_harmful(record: dict[str, Any]) -> bool:
    """Whether the cell is slower than its baseline with its whole speed interval: hooks costing more than
    they save."""
    interval = _speed_interval(record)
    return interval is not None and interval[1] < 1.0


def is_inert(record: dict[str, Any], verdict: CellVerdict) -> bool:
    """Whether a cache feature of the cell did not act: the gate found it not engaged or engaged with no
    effect (the work it counted was all computed)."""
    return bool(inert_reason(record, verdict))


def inert_reason(record: dict[str, Any], verdict: CellVerdict) -> str:
    """Why the cell is inert, in words ("" when it is not): each cache feature the gate found not engaged or of no
    effect, with its evidence's summary. On a two-expert model a threshold can skip half of one expert's work and
    none of the other's: not engaged on both, so inert, which "skipped nothing" would misstate. A cell that did not
    run says so: its cache never acted."""
    from accel.features import FEATURES

    evidence = record.get("evidence")
    evidence = evidence if isinstance(evidence, dict) else {}
    reasons = []
    for name, state in verdict.feature_states.items():
        feature = FEATURES.get(name)
        if feature is None or feature.family != CACHE_FAMILY or state not in ("not engaged", "no effect"):
            continue
        entry = evidence.get(name)
        summary = entry.get("summary") if isinstance(entry, dict) else None
        reasons.append(f"{name} {state}" + (f" ({summary})" if summary else ""))
    if reasons and record.get("status") != "ok":
        error = str(record.get("error") or "").strip().splitlines()
        return f"the cell did not run ({record.get('status')}{': ' + error[0] if error else ''}): its cache never acted"
    return "; ".join(reasons)


def _check(name: str, ok: bool, measured: Any, required: str) -> tuple[bool, str]:
    shown = f"{measured:.4g}" if isinstance(measured, float) else str(measured)
    return ok, f"{'ok' if ok else 'FAILED'}: {name} {shown}, required {required}"


def custom_checks(record: dict[str, Any], constraints: Constraints) -> list[tuple[bool, str]]:
    """Each of the profile's constraints on the record: (held, evidence line). A value the record lacks
    fails its constraint (nothing is assumed)."""
    parity = record.get("parity") or {}
    checks = []
    if constraints.ssim_low is not None:
        interval = parity.get("ssim_ci")
        low = interval[0] if interval else None
        checks.append(
            _check("SSIM 95% interval low", low is not None and low >= constraints.ssim_low,
                   low if low is not None else "unavailable (no per-sample outputs)", f">= {constraints.ssim_low}")
        )  # fmt: skip
    if constraints.psnr is not None:
        psnr = parity.get("psnr")
        checks.append(_check("PSNR dB", psnr is not None and psnr >= constraints.psnr, psnr, f">= {constraints.psnr}"))
    if constraints.per_prompt_ssim is not None:
        worst = parity.get("ssim_min")
        ok = worst is not None and worst >= constraints.per_prompt_ssim
        checks.append(_check("SSIM of the worst sample", ok, worst, f">= {constraints.per_prompt_ssim}"))
    if constraints.attributes_lost is not None:
        checks.append(_attributes_lost_check(record, constraints.attributes_lost))
    return checks


def _attributes_lost_check(record: dict[str, Any], limit: float) -> tuple[bool, str]:
    """The loss of prompt attributes held to ``limit`` as SSIM is, by its interval's worst end: the top of the
    95% Wilson interval over the images (``loss_interval``, as the gate judges it), so that a loss measured
    as 0 on a few images is not taken for none. A record without per-image scores (before schema 3) is held
    by its net change, and the line says so."""
    from accel.measure.adherence import loss_images, loss_interval

    lost = record.get("adherence_loss")
    if lost is None:
        return _check("attributes lost", False, "unavailable (the model has no ground truth)", f"<= {limit}")
    images = loss_images(record)
    if images is None:
        return _check("attributes lost (net change: no per-image scores)", lost <= limit, lost, f"<= {limit}")
    low, high = loss_interval(float(lost), images)
    shown = f"{lost:.4g} [{low:.3g}, {high:.3g}] over {images} images"
    return _check("attributes lost, 95% interval high", high <= limit + 1e-9, shown, f"<= {limit}")


def judge(record: dict[str, Any], verdict: CellVerdict, constraints: Constraints) -> Judgement:
    """The cell against ``constraints`` given the gate's ``verdict`` on it."""
    reason, harmful = inert_reason(record, verdict), is_harmful(record)
    inert = bool(reason)
    if not constraints.custom:
        lines = [f"{'ok' if c.ok else 'FAILED'}: {c.line()}" for c in verdict.checks]
        lines += [f"FAILED: {reason}" for reason in verdict.reasons]
        passed = verdict.outcome == PASS
        return Judgement(passed, lines or [f"gate: {verdict.outcome}"], inert, harmful, reason)
    ran = record.get("status") == "ok" and record.get("warm") is not None
    states = verdict.feature_states
    engaged = ran and all(state in (*ENGAGED, "no effect") for state in states.values())
    lines = [f"{'ok' if engaged else 'FAILED'}: ran and every feature engaged ({states or record.get('status')})"]
    checks = custom_checks(record, constraints)
    lines += [line for _, line in checks]
    return Judgement(engaged and all(ok for ok, _ in checks), lines, inert, harmful, reason)
