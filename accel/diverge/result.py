"""The typed result of a divergence search: each stage's and step's comparison, and the first place the two
runs part (``Divergence``: component, step, block, submodule)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from accel.diverge.compare import Metrics


@dataclass(frozen=True)
class Row:
    """One compared quantity: ``stage`` (``text``, ``latents``, ``timesteps``, ``denoiser``, ``prediction``,
    ``step_latents``, ``decode``, ``image``), its step (None outside the loop), what it is, its metrics, and
    whether it is held to exact equality."""

    stage: str
    step: int | None
    what: str
    metrics: Metrics
    exact: bool
    within: bool


@dataclass(frozen=True)
class Divergence:
    """The first place two runs part. ``component``: who owns it (``text_encoder``/``text_encoder_2``,
    ``latents``, ``scheduler``, ``denoiser``, ``cfg``, ``vae``, ...); ``step``: the denoising step it shows at
    (0 for the inputs of the loop, None after it); ``block`` and ``submodule``: for the denoiser, the first
    block and its first submodule beyond tolerance with identical inputs; ``operation``: the deepest module
    inside the block that first diverged; ``evidence``: how the owner was established; ``op``: the first ATen
    operation beyond tolerance inside the submodule (or the block), by operator-level tracing."""

    component: str
    step: int | None
    stage: str
    what: str
    metrics: Metrics
    block: str | None = None
    submodule: str | None = None
    operation: str | None = None
    evidence: str = ""
    op: str | None = None

    def line(self) -> str:
        """The place in one line, as the command prints it."""
        where = [f"component {self.component}", f"step {self.step}" if self.step is not None else "after the loop"]
        where += [f"block {self.block}"] if self.block else []
        where += [f"submodule {self.submodule}"] if self.submodule else []
        where += [f"op {self.op}"] if self.op else []
        m = self.metrics
        return (
            f"diverged at {', '.join(where)} ({self.what}: max-abs {m.max_abs:.3g}, rel-L2 {m.rel_l2:.3g}, "
            f"cosine {m.cosine:.6f})"
        )


@dataclass
class DivergeResult:
    """Both sides compared: every row in order, the first step beyond tolerance, the first divergence (None:
    within tolerance everywhere), the tolerance used and what the two sides were."""

    side_a: str
    side_b: str
    dtype: str
    tolerance: float
    rows: list[Row] = field(default_factory=list)
    first: Divergence | None = None
    first_step: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 within tolerance, 1 diverged."""
        return 0 if self.first is None else 1

    def summary(self) -> str:
        """One line: no divergence, or the place."""
        if self.first is None:
            return (
                f"no divergence: {self.side_b} matches {self.side_a} within {self.dtype} tolerance "
                f"(rel-L2 <= {self.tolerance:g}) at every stage and step"
            )
        return self.first.line()

    def to_dict(self) -> dict[str, Any]:
        """JSON for machines: the first divergence's ``component``, ``step``, ``block``, ``submodule`` at the
        top level (null when none), then everything else."""
        first = asdict(self.first) if self.first else None
        if first is not None:
            first["metrics"] = self.first.metrics.to_dict() if self.first else None
        return {
            "diverged": self.first is not None,
            "component": self.first.component if self.first else None,
            "step": self.first.step if self.first else None,
            "block": self.first.block if self.first else None,
            "submodule": self.first.submodule if self.first else None,
            "summary": self.summary(),
            "side_a": self.side_a,
            "side_b": self.side_b,
            "dtype": self.dtype,
            "tolerance": {"rel_l2": self.tolerance, "inputs": "exact"},
            "first_step": self.first_step,
            "first": first,
            "rows": [
                {
                    "stage": r.stage,
                    "step": r.step,
                    "what": r.what,
                    "exact": r.exact,
                    "within": r.within,
                    **r.metrics.to_dict(),
                }
                for r in self.rows
            ],
            "notes": self.notes,
        }
