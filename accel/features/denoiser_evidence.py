"""Each feature's evidence denoiser by denoiser: what a verdict shows of every denoiser it reached.

A pipeline with two denoisers (Wan 2.2's high-noise ``transformer`` and low-noise ``transformer_2``) is only
accelerated when both are: a cache that skips work on one expert, a compile that runs one through compiled code,
is "partial" in its verdict, not engaged. The verdicts keep, per timed run, a count per denoiser under a key the
feature names (``Feature.denoiser_evidence``): block work skipped (the caches), calls through compiled code,
linear layers quantized, collectives in the attention, attention calls, onloads. ``by_denoiser`` reads it as
the least any timed run showed, so a denoiser that showed nothing on one run reads 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel.features.base import DENOISER_COMPONENTS


@dataclass(frozen=True)
class DenoiserEvidence:
    """What a feature's evidence counts (``what``) and, per denoiser, the least a timed run showed (``least``)."""

    what: str
    least: dict[str, float]

    def missing(self, expected: tuple[str, ...]) -> list[str]:
        """The ``expected`` denoisers the evidence shows nothing of (absent or 0 on some run)."""
        return [name for name in expected if not self.least.get(name)]


def _amount(value: Any) -> float:
    """A run's count for one denoiser: a number, or the sum of a mapping of numbers (collectives by name)."""
    if isinstance(value, Mapping):
        return float(sum(_amount(v) for v in value.values()))
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _ordered(names: set[str]) -> list[str]:
    known = [name for name in DENOISER_COMPONENTS if name in names]
    return known + sorted(names - set(known))


def by_denoiser(feature: str, evidence: Mapping[str, Any]) -> DenoiserEvidence | None:
    """The per-denoiser evidence of ``feature``'s verdict (the record's ``evidence[feature]``), or None when the
    feature names no such key or the verdict has none (it did not run, or it reaches the whole pipeline)."""
    from accel.features import FEATURES

    spec = getattr(FEATURES.get(feature), "denoiser_evidence", None)
    runs = evidence.get(spec[0]) if spec else None
    if not spec or not isinstance(runs, list) or not runs:
        return None
    per_run = [run if isinstance(run, Mapping) else {} for run in runs]
    names = {str(name) for run in per_run for name in run}
    if not names:
        return None
    least = {name: min(_amount(run.get(name, 0)) for run in per_run) for name in _ordered(names)}
    return DenoiserEvidence(spec[1], least)


def record_by_denoiser(record: Mapping[str, Any]) -> dict[str, DenoiserEvidence]:
    """Per feature of a record's ``evidence``, its per-denoiser evidence (features without any left out)."""
    found: dict[str, DenoiserEvidence] = {}
    for feature, evidence in (record.get("evidence") or {}).items():
        if isinstance(evidence, Mapping):
            read = by_denoiser(feature, evidence)
            if read is not None:
                found[feature] = read
    return found
