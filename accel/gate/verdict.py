"""The gate's vocabulary: outcomes, why a cell was skipped, one ``Check``, a cell's ``CellVerdict`` and a
results file's ``GateReport``, and which records are the references (baseline, noise floor) every variant
is measured against. Shared by the judgements (``accel.gate.judge``) and the rendering (``accel.gate.render``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.report.format import fmt
from accel.results import is_noise_floor

PASS, FAIL, SKIP = "pass", "fail", "skip"
# Why a cell was skipped: it could not run here, the model (or the library, on it) does not support it, it failed
# as claimed, or omni-accel does not support (or observe) it yet: a harness gap, never read as the model's.
ENVIRONMENT, UNSUPPORTED, EXPECTED, HARNESS = "environment", "unsupported", "expected", "harness"


@dataclass
class Check:
    """One comparison of a measured value with a required one.

    ``inconclusive``: why the measurement cannot decide (its interval straddles the limit), with what to do;
    such a check fails unless the thresholds accept inconclusive results (``adherence.inconclusive: warn``),
    and either way the tables mark its cell inconclusive, never supported.
    """

    name: str
    ok: bool
    measured: Any
    required: str
    inconclusive: str | None = None

    def line(self) -> str:
        """``name: measured X, required Y`` (and ``: inconclusive, why`` for an undecided check)."""
        text = f"{self.name}: measured {fmt(self.measured, 4, significant=True)}, required {self.required}"
        return text + (f": inconclusive, {self.inconclusive}" if self.inconclusive else "")


@dataclass
class CellVerdict:
    """The gate's verdict on one cell.

    ``skip_kind`` says why a skipped cell is skipped (``environment``, ``unsupported``, ``harness``: it did not
    run, for want of this device, of the model or its library, of omni-accel; ``expected``: it failed the way the
    model's claims say). ``refused_by``: who refused a cell that did not run (``accel.results.refused_by``).
    ``feature_states`` holds each feature's own state: ``engaged``, ``no effect`` (engaged, but nothing it could
    do on this device, or a setting the pipeline already had), ``not engaged``, ``excused`` (did not engage or
    broke parity, as claimed unsupported) or ``not run``.
    """

    model: str
    variant: str
    outcome: str
    in_parity: bool | None = None  # None when the cell produced no output to compare
    checks: list[Check] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    skip_kind: str | None = None
    refused_by: str | None = None
    feature_states: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.variant}"

    def message(self) -> str:
        """Every failed check and reason on its own line, with measured and required values."""
        lines = [*self.reasons, *(c.line() for c in self.checks if not c.ok)]
        return "\n".join(lines) or "ok"

    @property
    def no_effect(self) -> list[str]:
        """Features that engaged but could not have their intended effect on this device."""
        return [name for name, state in self.feature_states.items() if state == "no effect"]


@dataclass
class GateReport:
    """Every verdict of a results file, notices about the gate's own inputs, and what to print."""

    verdicts: list[CellVerdict]
    notices: list[str] = field(default_factory=list)
    # (cell key, speedup_ci) of every measured variant: how each speedup may be published.
    speed_claims: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Why the results measured nothing (``judge.nothing_measured``): the run fails with this line.
    nothing_measured: str | None = None

    @property
    def failed(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.outcome == FAIL]

    @property
    def skipped(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.outcome == SKIP]

    @property
    def findings(self) -> list[str]:
        return [f for v in self.verdicts for f in v.findings]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed or self.nothing_measured else 0

    @property
    def qualified(self) -> list[CellVerdict]:
        """The variants that passed (never the baseline or its noise-floor re-run): what the run qualified."""
        return [v for v in self.verdicts if v.outcome == PASS and v.variant not in REFERENCE_VARIANTS]

    def nothing_qualified(self) -> str | None:
        """A plain line when no variant passed (only references passed, or nothing ran), else None."""
        if self.qualified:
            return None
        variants = [v for v in self.verdicts if v.variant not in REFERENCE_VARIANTS]
        if not variants:
            return "nothing was qualified: the results hold no variant, only the baseline"
        return f"nothing was qualified: none of the {len(variants)} variant cell(s) passed"

    def strict_problem(self) -> str | None:
        """Why ``gate --strict`` fails a run the plain gate passes: a variant was skipped, or nothing was
        qualified; None when neither."""
        skipped = [v.key for v in self.skipped if v.variant not in REFERENCE_VARIANTS]
        if skipped:
            shown = ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else "")
            return f"--strict: {len(skipped)} variant cell(s) skipped ({shown})"
        nothing = self.nothing_qualified()
        return f"--strict: {nothing}" if nothing else None


BASELINE = "baseline"
REFERENCE_VARIANTS = (BASELINE, "noise-floor")  # reserved names (accel.profile.Variant)


def is_reference(record: dict[str, Any]) -> bool:
    """The baseline or its noise-floor re-run: the cells every variant of the model is measured against."""
    return record["variant"] == BASELINE or is_noise_floor(record)
