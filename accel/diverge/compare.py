"""Comparing two captured tensors: max-abs, relative-L2 and cosine, and the per-dtype tolerances a divergence is
judged by.

A pair of tensors is *within tolerance* when their relative L2 distance ``||a - b|| / ||a||`` is at most the
tolerance of the compared dtype (``TOLERANCES``; ``--tolerance`` overrides it). Stages where both sides should
run the same code on the same inputs (prompt embeddings, initial latents, timesteps) are held to exact
equality instead (``exact=True``), unless the two sides compute in different dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Relative L2 a step may differ by and still count as the same run: float32 leaves room for a reordered sum
# (about 1e-7 per operation, a few hundred operations deep); bfloat16 (8 mantissa bits, 3.9e-3 per rounding)
# for a kernel that rounds differently.
TOLERANCES: dict[str, float] = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}


def tolerance_for(dtype: str, override: float | None = None) -> float:
    """The relative-L2 tolerance for ``dtype`` (a ``ModelSpec.dtype``), or ``override`` when given."""
    if override is not None:
        return override
    return TOLERANCES.get(dtype, TOLERANCES["float32"])


@dataclass(frozen=True)
class Metrics:
    """How far side B's tensor is from side A's: max-abs, relative L2 (to A's norm) and cosine similarity;
    ``comparable`` is False when the shapes differ (nothing else is then meaningful)."""

    max_abs: float
    rel_l2: float
    cosine: float
    exact: bool
    comparable: bool = True

    def within(self, tolerance: float, exact: bool = False) -> bool:
        """Whether B is A, to ``tolerance`` (relative L2) or, with ``exact``, bit for bit."""
        if not self.comparable:
            return False
        return self.exact if exact else self.rel_l2 <= tolerance

    def to_dict(self) -> dict[str, Any]:
        """The metrics as plain JSON values."""
        return {
            "max_abs": self.max_abs,
            "rel_l2": self.rel_l2,
            "cosine": self.cosine,
            "exact": self.exact,
            "comparable": self.comparable,
        }


INCOMPARABLE = Metrics(float("inf"), float("inf"), float("nan"), exact=False, comparable=False)


def metrics(a: torch.Tensor, b: torch.Tensor) -> Metrics:
    """Metrics of ``b`` against the reference ``a`` (computed in float64 on the CPU; a complex tensor as its
    real and imaginary parts)."""
    a, b = (torch.view_as_real(t) if t.is_complex() else t for t in (a, b))
    if a.shape != b.shape:
        return INCOMPARABLE
    x = a.detach().to("cpu", torch.float64).flatten()
    y = b.detach().to("cpu", torch.float64).flatten()
    exact = bool(torch.equal(a.detach().cpu(), b.detach().cpu()))
    if x.numel() == 0:
        return Metrics(0.0, 0.0, 1.0, exact=True)
    diff = (x - y).norm().item()
    norm_x, norm_y = x.norm().item(), y.norm().item()
    rel = diff / norm_x if norm_x > 0 else (0.0 if diff == 0 else float("inf"))
    cosine = float(torch.dot(x, y).item() / (norm_x * norm_y)) if norm_x > 0 and norm_y > 0 else float(exact)
    return Metrics(float((x - y).abs().max().item()), rel, cosine, exact=exact)


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors of a module output in order: a tensor, or those of a tuple, list, dict or ``ModelOutput``
    (a block's ``(encoder_hidden, hidden)`` gives two, compared element by element)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):  # ModelOutput is an OrderedDict
        return [t for item in value.values() for t in tensors_of(item)]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_of(item)]
    return []


def metrics_of(a: Any, b: Any) -> list[Metrics]:
    """Per-element metrics of two module outputs; one ``INCOMPARABLE`` when their structures differ."""
    left, right = tensors_of(a), tensors_of(b)
    if len(left) != len(right) or not left:
        return [INCOMPARABLE]
    return [metrics(x, y) for x, y in zip(left, right, strict=True)]


def worst(items: list[Metrics]) -> Metrics:
    """The element of ``items`` farthest apart (a tuple output diverges where any element does)."""
    return max(items, key=lambda m: (not m.comparable, m.rel_l2, not m.exact))
