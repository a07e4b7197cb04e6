"""Speedups with an uncertainty, and when a speedup is only noise.

A speedup is only as good as the comparison behind it. Cells timed one after another on a busy machine
drift apart (identical configurations measured 0.64x-1.60x of each other under load), so the harness times
each variant **interleaved** with a freshly loaded, unaccelerated reference pipeline in the same process:
calls alternate in ABBA order (reference, variant, variant, reference, ...), so slow drift and background
load hit both alike. Each adjacent pair gives one ratio ``reference / variant``; the estimate is the median
ratio, and its interval is the distribution-free order-statistic interval of the median (the sign test's),
which needs no assumption about the shape of the noise and is not dragged by a single load spike.

A speedup is a claim (``faster`` or ``slower``) only when its whole interval lies outside the **noise band**:
the interval the noise-floor cell measured for two identical configurations on the same model and target,
widened to at least ``1 ± min_effect``. An interval that includes 1.0 is ``noise`` (shown as ``≈1.0x``); one
that excludes 1.0 but reaches into the band is ``inconclusive`` (shown ``0.29x?``); a speedup without
a noise floor, with too few pairs for the requested confidence, or from sequential timing is
``unverified``. Numbers only: no I/O, no policy beyond this rule.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

INTERLEAVED = "interleaved"
SEQUENTIAL = "sequential"

FASTER = "faster"
SLOWER = "slower"
NOISE = "noise"
# The interval excludes 1.0 but reaches into the noise band: the machine cannot tell it from noise.
INCONCLUSIVE = "inconclusive"
UNVERIFIED = "unverified"
VERDICTS = (FASTER, SLOWER, NOISE, INCONCLUSIVE, UNVERIFIED)


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (reference time / variant time: > 1 is faster) with its interval.

    ``confidence`` is the interval's actual coverage (order-statistic intervals come in discrete steps), ``n``
    the number of ratios (pairs) or, for sequential timing, the smaller sample.
    """

    ratio: float
    low: float
    high: float
    confidence: float
    n: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    outcomes: int = 2**n
    return sum(math.comb(n, i) for i in range(k + 1)) / outcomes


def _interval_rank(n: int, confidence: float) -> tuple[int, float]:
    """Rank k of the narrowest interval ``[x(k), x(n-k+1)]`` of n values covering the median with at least
    ``confidence``, and its actual coverage (k = 1, the widest, when n is too small to reach it)."""
    best_k, coverage = 1, 1 - 2 * _binomial_cdf(0, n)
    for k in range(2, n // 2 + 1):
        covered = 1 - 2 * _binomial_cdf(k - 1, n)
        if covered < confidence:
            break
        best_k, coverage = k, covered
    return best_k, max(coverage, 0.0)


def interval_coverage(n: int, confidence: float = 0.95) -> float:
    """The actual coverage of the median interval ``median_interval`` gives for n values (discrete steps)."""
    return _interval_rank(n, confidence)[1]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The narrowest order-statistic interval ``[x(k), x(n-k+1)]`` covering the median with at least
    ``confidence`` (distribution-free), and its coverage; the widest one (min, max) when n is too small."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    n = len(ordered)
    best_k, coverage = _interval_rank(n, confidence)
    return ordered[best_k - 1], ordered[n - best_k], coverage


def paired_speedup(reference_s: list[float], variant_s: list[float], confidence: float = 0.95) -> SpeedupEstimate:
    """Speedup from interleaved pairs: the median of ``reference / variant`` and its interval."""
    if len(reference_s) != len(variant_s) or not reference_s:
        raise ValueError("paired timings need the same, non-zero number of reference and variant samples")
    ratios = [r / v for r, v in zip(reference_s, variant_s, strict=True)]
    low, high, coverage = median_interval(ratios, confidence)
    return SpeedupEstimate(statistics.median(ratios), low, high, coverage, len(ratios), INTERLEAVED)


def sequential_speedup(baseline_s: list[float], variant_s: list[float], confidence: float = 0.95) -> SpeedupEstimate:
    """Speedup from two cells timed one after the other: the ratio of medians, with the conservative interval
    from each median's own interval. Drift between the two cells is not controlled: never verified."""
    b_low, b_high, b_cov = median_interval(baseline_s, confidence)
    v_low, v_high, v_cov = median_interval(variant_s, confidence)
    ratio = statistics.median(baseline_s) / statistics.median(variant_s)
    return SpeedupEstimate(
        ratio, b_low / v_high, b_high / v_low, b_cov * v_cov, min(len(baseline_s), len(variant_s)), SEQUENTIAL
    )


def noise_band(noise_floor: SpeedupEstimate | None, min_effect: float) -> tuple[float, float]:
    """Ratios that identical configurations can show: the noise floor's interval, at least ``1 ± min_effect``."""
    low, high = 1 / (1 + min_effect), 1 + min_effect
    if noise_floor is not None:
        low, high = min(low, noise_floor.low), max(high, noise_floor.high)
    return low, high


@dataclass(frozen=True)
class SpeedupClaim:
    """What a speedup may be published as: ``faster``/``slower`` (a claim), ``noise`` or ``unverified``."""

    verdict: str
    reason: str
    band: tuple[float, float] | None


def classify(
    estimate: SpeedupEstimate,
    band: tuple[float, float] | None,
    confidence: float,
    unverified_because: str | None = None,
) -> SpeedupClaim:
    """The claim a speedup supports. ``band`` is None when no noise floor was measured for its model."""
    if unverified_because:
        return SpeedupClaim(UNVERIFIED, unverified_because, band)
    if estimate.method != INTERLEAVED:
        reason = "timed sequentially, not interleaved with a reference: drift not controlled"
        return SpeedupClaim(UNVERIFIED, reason, band)
    if band is None:
        reason = "no noise floor measured for this model and target (measure.noise_floor)"
        return SpeedupClaim(UNVERIFIED, reason, band)
    if estimate.confidence + 1e-9 < confidence:
        achieved = f"{estimate.n} pairs give {estimate.confidence:.0%} confidence"
        reason = f"{achieved} (< {confidence:.0%}): raise measure.pairs"
        return SpeedupClaim(UNVERIFIED, reason, band)
    low, high = band
    interval = f"[{estimate.low:.2f}, {estimate.high:.2f}]"
    noise = f"noise band [{low:.2f}, {high:.2f}]"
    if estimate.low > high:
        return SpeedupClaim(FASTER, f"interval {interval} above the {noise}", band)
    if estimate.high < low:
        return SpeedupClaim(SLOWER, f"interval {interval} below the {noise}", band)
    if estimate.low <= 1.0 <= estimate.high:
        return SpeedupClaim(NOISE, f"interval {interval} includes 1.0 ({noise})", band)
    side = "faster" if estimate.low > 1.0 else "slower"
    return SpeedupClaim(
        INCONCLUSIVE, f"interval {interval} excludes 1.0 ({side}) but reaches into the {noise}: not a claim", band
    )


def format_speedup(claim: dict[str, Any] | None, digits: int = 2) -> str:
    """How a speedup is shown everywhere: ``1.82x [1.61–2.03]`` for a claim, ``≈1.0x`` for noise (its interval
    includes 1.0), ``1.82x?`` for an unverified or inconclusive one, an en dash when there is none."""
    if not claim or claim.get("ratio") is None:
        return "–"
    ratio = claim["ratio"]
    verdict = claim.get("verdict")
    if verdict == NOISE:
        return "≈1.0x"
    if verdict in (UNVERIFIED, INCONCLUSIVE):
        return f"{ratio:.{digits}f}x?"
    return f"{ratio:.{digits}f}x [{claim['low']:.{digits}f}–{claim['high']:.{digits}f}]"
