"""Speedups with an uncertainty, decided rather than cut off, and when a speedup is only noise.

A speedup is only as good as the comparison behind it. Cells timed one after another on a busy machine
drift apart (identical configurations measured 0.64x-1.60x of each other under load), so the harness times
each variant **interleaved** with a freshly loaded, unaccelerated reference pipeline in the same process:
calls alternate in ABBA order (reference, variant, variant, reference, ...), so slow drift and background
load hit both alike. Each adjacent pair gives one ratio ``reference / variant``; the estimate is the median
ratio, and its interval is the distribution-free order-statistic interval of the median (the sign test's),
which needs no assumption about the shape of the noise and is not dragged by a single load spike.

**The noise threshold** is a stated practical band, ``1/(1+t) .. 1+t`` with ``t = measure.min_effect``
(default 5%): a smaller effect is never published. The verdict compares the interval with that band:
``faster`` (the interval lies above it), ``slower`` (below it), ``equivalent`` (inside it: shown ``≈1.0x``),
otherwise undecided. **Sampling is sequential** (as Chromium's Pinpoint runs more attempts while a
comparison is undecided): the cell draws ``measure.pairs`` pairs, looks, and keeps drawing (about 1.5x more
each look) until the verdict is decided, ``measure.max_pairs`` is reached or, when set, ``measure.pair_budget_s``
is spent. Looking several times would let noise decide early, so each look's interval has the confidence
``1 - (1 - confidence) / looks`` (Bonferroni over the planned looks): whichever look stops, the interval
covers with at least ``measure.confidence``. Undecided at the end: ``noise`` (the interval includes 1.0,
``≈1.0x?``) or ``inconclusive`` (it excludes 1.0 but reaches into the band, ``1.33x?``).

The noise-floor cell (the baseline against a second copy of itself) must land inside the band: if it does
not, the machine was too noisy for that threshold, and the band is never widened to fit. Beside an equivalent
floor, too, a faster/slower claim must clear the band divided by every bias the floor's interval allows (an
equivalent floor may still hold a bias of a few percent). Then no equivalence of
that model is published (``≈1.0x?``), and a faster/slower claim is published only when it holds whatever bias
between the two arms the floor leaves possible: when the floor's interval includes 1.0 (undecided, no bias
seen), the variant's interval divided by the floor's (the error rate split between the two, so together they
still cover with ``measure.confidence``) must still clear the band (``clears_floor_bias``); a floor that excludes
1.0 (a bias seen) unverifies every claim. Numbers only: no I/O, no policy beyond this rule.
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
# The interval lies inside the noise band: no difference larger than the threshold.
EQUIVALENT = "equivalent"
# Undecided, and the interval includes 1.0.
NOISE = "noise"
# The interval excludes 1.0 but reaches into the noise band: the machine cannot tell it from noise.
INCONCLUSIVE = "inconclusive"
UNVERIFIED = "unverified"
VERDICTS = (FASTER, SLOWER, EQUIVALENT, NOISE, INCONCLUSIVE, UNVERIFIED)
# Verdicts that end the sampling of pairs: the comparison's question is answered.
DECIDED = (FASTER, SLOWER, EQUIVALENT)


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (reference time / variant time: > 1 is faster) with its interval.

    ``confidence`` is the interval's actual coverage (order-statistic intervals come in discrete steps), ``n``
    the number of ratios (pairs) or, for sequential timing, the smaller sample. ``confidence`` of a
    sequentially sampled estimate is its look's; the overall coverage is ``1 - looks * (1 - confidence)``.
    """

    ratio: float
    low: float
    high: float
    confidence: float
    n: int
    method: str
    # Sequential sampling: why it stopped, and how many looks were planned (the interval's confidence was
    # divided among them, so the look that stopped covers with the requested confidence overall).
    stopped: str = ""
    looks: int = 1

    @property
    def overall_confidence(self) -> float:
        """The coverage of the interval over all planned looks (Bonferroni): the look's own with one look."""
        return 1 - self.looks * (1 - self.confidence)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    outcomes: int = 2**n
    return sum(math.comb(n, i) for i in range(k + 1)) / outcomes


def _interval_rank(n: int, confidence: float) -> tuple[int, float]:
    """Rank k of the narrowest interval ``[x(k), x(n-k+1)]`` of n values covering the median with at least
    ``confidence``, and its actual coverage (k = 1, the widest, when n is too small to reach it). The binomial
    tail grows one term per rank (exact integers, as ``_binomial_cdf``): summing it afresh for every rank took
    8.8 s at 2000 pairs in a review on our VM, and measure.max_pairs allows 10000."""
    outcomes = 2**n
    term = 1  # comb(n, 0)
    tail = term  # sum of comb(n, i) for i < k
    best_k, coverage = 1, 1 - 2 * (tail / outcomes)
    for k in range(2, n // 2 + 1):
        term = term * (n - k + 2) // (k - 1)  # comb(n, k - 1)
        tail += term
        covered = 1 - 2 * (tail / outcomes)
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


def noise_band(min_effect: float) -> tuple[float, float]:
    """The practical noise threshold as a band of ratios: ``1/(1+min_effect) .. 1+min_effect``."""
    return 1 / (1 + min_effect), 1 + min_effect


def look_schedule(first: int, most: int) -> list[int]:
    """The numbers of pairs at which a sequential comparison looks: ``first``, then about 1.5x more each time,
    ending at ``most``."""
    looks = [max(1, min(first, most))]
    while looks[-1] < most:
        looks.append(min(most, max(looks[-1] + 1, math.ceil(looks[-1] * 1.5))))
    return looks


def look_confidence(confidence: float, looks: int) -> float:
    """Each look's interval confidence so that the look that stops covers with at least ``confidence``."""
    return 1 - (1 - confidence) / max(1, looks)


def fewest_pairs(confidence: float) -> int:
    """The fewest ratios whose widest interval (min to max, coverage ``1 - 2 / 2**n``) reaches ``confidence``."""
    return max(1, math.ceil(math.log2(2 / (1 - confidence)) - 1e-12))


def planned_looks(first: int, most: int, confidence: float) -> tuple[list[int], float]:
    """The looks a sequential comparison takes and each look's confidence: ``look_schedule(first, most)``
    without the looks too early for any interval to reach the per-look confidence (they could never decide;
    dropping them only raises the confidence the others need less). With ``most`` too small for even one
    decisive look, the schedule is ``[most]`` (its verdict is then unverified for too few pairs)."""
    schedule = look_schedule(first, most)
    per_look = look_confidence(confidence, len(schedule))
    useful = [n for n in schedule if n >= fewest_pairs(per_look)]
    if not useful:
        return [most], look_confidence(confidence, 1)
    return useful, look_confidence(confidence, len(useful))


@dataclass(frozen=True)
class SpeedupClaim:
    """What a speedup may be published as: ``faster``/``slower``/``equivalent`` (a claim), ``noise``,
    ``inconclusive`` or ``unverified``."""

    verdict: str
    reason: str
    band: tuple[float, float] | None


def judge_interval(low: float, high: float, band: tuple[float, float]) -> tuple[str, str]:
    """The verdict an interval supports against the noise band, and why (one rule for the cell's stopping and
    the published verdict)."""
    band_low, band_high = band
    interval = f"[{low:.2f}, {high:.2f}]"
    where = f"the ±{band_high - 1:.0%} noise band [{band_low:.2f}, {band_high:.2f}]"
    if low > band_high:
        return FASTER, f"interval {interval} above {where}"
    if high < band_low:
        return SLOWER, f"interval {interval} below {where}"
    if band_low <= low and high <= band_high:
        return EQUIVALENT, f"interval {interval} inside {where}"
    if low <= 1.0 <= high:
        return NOISE, f"interval {interval} includes 1.0 and reaches past {where}: undecided"
    side = "faster" if low > 1.0 else "slower"
    return INCONCLUSIVE, f"interval {interval} excludes 1.0 ({side}) but reaches into {where}: not a claim"


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
    if estimate.overall_confidence + 1e-9 < confidence:
        achieved = f"{estimate.n} pairs give {estimate.overall_confidence:.0%} confidence"
        reason = f"{achieved} (< {confidence:.0%}): raise measure.pairs"
        return SpeedupClaim(UNVERIFIED, reason, band)
    verdict, reason = judge_interval(estimate.low, estimate.high, band)
    if verdict not in DECIDED and estimate.stopped:
        reason = f"{reason} ({estimate.stopped})"
    return SpeedupClaim(verdict, reason, band)


# The share of the error rate a claim beyond the noise floor's bias gives the floor's interval (the rest stays
# with the variant's, which then covers at nearly the confidence its sampling stopped at): the floor has drawn
# many pairs and can afford the wider interval; a variant decided at the first look (8 pairs) cannot.
FLOOR_ERROR_SHARE = 0.2


def split_first_look(first: int, most: int, confidence: float, share: float) -> int:
    """The first look, at ``first`` or later, of a sampling whose interval must reach the confidence the
    floor-bias check gives it (``share`` of the error rate, over its planned looks): the smallest first look
    whose pairs can reach it, or ``most`` when none before it can."""
    while first < most:
        if _start_reaches(first, most, confidence, share):
            return first
        first += 1
    return most


def _start_reaches(first: int, most: int, confidence: float, share: float) -> bool:
    """Whether the first planned look from ``first`` has the pairs ``share`` of the error rate asks per look."""
    schedule, _ = planned_looks(first, most, confidence)
    return schedule[0] >= fewest_pairs(1 - (1 - confidence) * share / len(schedule))


def floor_first_look(first: int, most: int, confidence: float) -> int:
    """The first look of a noise floor's sampling: late enough that its interval can reach the confidence the
    floor-bias check gives it (``FLOOR_ERROR_SHARE`` of the error, over its planned looks). A floor decided at
    8 pairs could never bound a bias at that confidence, and every claim beside it would be unverified."""
    return split_first_look(first, most, confidence, FLOOR_ERROR_SHARE)


def variant_first_look(first: int, most: int, confidence: float) -> int:
    """The first look of a variant's sampling beside a noise floor: late enough that a claim decided there can
    be held beyond the floor's bias (the rest of the error rate, over its planned looks). ``pairs: 8`` with
    ``max_pairs: 60`` plans 6 looks and would decide at 8 pairs, one too few for that split: it starts at 9."""
    return split_first_look(first, most, confidence, 1 - FLOOR_ERROR_SHARE)


def reaches_share(first: int, most: int, confidence: float, share: float) -> bool:
    """Whether a sampling from ``first`` to ``most`` pairs can reach the confidence ``share`` of the error rate
    asks over its planned looks (``split_first_look``'s aim): False when ``most`` is too small for any start."""
    return _start_reaches(split_first_look(first, most, confidence, share), most, confidence, share)


def sampling_notice(first: int, most: int, confidence: float) -> str | None:
    """Why the claims beside a noise floor can never be published with ``measure.pairs`` = ``first`` and
    ``measure.max_pairs`` = ``most`` (too few pairs for the floor-bias split, whatever the timings), with the
    smallest max_pairs that would do; None when they can."""

    def both_reach(most: int) -> bool:
        return all(
            reaches_share(first, most, confidence, share) for share in (FLOOR_ERROR_SHARE, 1 - FLOOR_ERROR_SHARE)
        )

    if both_reach(most):
        return None
    enough = next((m for m in range(most + 1, 10 * most + 100) if both_reach(m)), None)
    fix = f"raise measure.max_pairs to at least {enough}" if enough else "raise measure.max_pairs"
    return (
        f"measure.max_pairs = {most} is too few pairs to hold a claim beyond the noise floor's bias at "
        f"{confidence:.0%} confidence: every faster/slower claim beside the noise floor will be unverified ({fix})"
    )


def clears_floor_bias(
    ratios: list[float],
    floor_ratios: list[float],
    band: tuple[float, float],
    confidence: float,
    looks: int = 1,
    floor_looks: int = 1,
) -> tuple[bool, str]:
    """Whether a speedup's interval still clears the noise band after dividing it by every arm-to-arm bias the
    noise floor's interval allows, and the sentence that says so.

    The error rate ``1 - confidence`` is split between the two intervals, ``FLOOR_ERROR_SHARE`` to the floor's
    and the rest to the variant's (each divided among its planned looks, as the sampling did), so both cover
    together with at least ``confidence`` (Bonferroni): if the variant's true ratio lies in ``[low, high]`` and
    the bias in ``[f_low, f_high]``, the ratio without the bias lies in ``[low / f_high, high / f_low]``. Too
    few pairs for either interval to reach its confidence: False.
    """
    error = 1 - confidence
    need = 1 - error * (1 - FLOOR_ERROR_SHARE) / max(1, looks)
    need_floor = 1 - error * FLOOR_ERROR_SHARE / max(1, floor_looks)
    low, high, coverage = median_interval(ratios, need)
    f_low, f_high, f_coverage = median_interval(floor_ratios, need_floor)
    if coverage + 1e-12 < need or f_coverage + 1e-12 < need_floor:
        return False, (
            f"too few pairs ({len(ratios)}, the floor's {len(floor_ratios)}) to hold it beyond every bias the "
            "noise floor allows"
        )
    lowest, highest = low / f_high, high / f_low
    band_low, band_high = band
    clears = lowest > band_high or highest < band_low
    where = "clears" if clears else "does not clear"
    return clears, (
        f"divided by every bias the noise floor allows ([{f_low:.2f}, {f_high:.2f}]), the interval "
        f"[{lowest:.2f}, {highest:.2f}] {where} the noise band (together at {confidence:.0%} confidence)"
    )


def paired_ratios(paired: dict[str, Any]) -> list[float]:
    """The per-pair ratios reference / variant of a record's interleaved comparison (``paired``)."""
    return [r / v for r, v in zip(paired["reference_s"], paired["variant_s"], strict=True)]


def planned_looks_of(paired: dict[str, Any] | None) -> int | None:
    """The looks a record's interleaved sampling planned (``paired.estimate.looks``), or None when the record
    lacks its pairs or does not say: never assumed (one look would ask the fewest pairs of its claim)."""
    if not paired or "reference_s" not in paired:
        return None
    looks = (paired.get("estimate") or {}).get("looks")
    return looks if isinstance(looks, int) and not isinstance(looks, bool) and looks >= 1 else None


def floor_bias_of(
    paired: dict[str, Any] | None,
    floor_paired: dict[str, Any] | None,
    band: tuple[float, float],
    confidence: float,
) -> tuple[bool, str] | None:
    """``clears_floor_bias`` for a record's interleaved pairs against its noise-floor record's (each a record's
    ``paired``: timings and the estimate with its planned looks), or None when either lacks its pairs or its
    looks. The sweep (``attach_speedup``) and the gate (``publishable_claim``) judge with it alike."""
    looks, floor_looks = planned_looks_of(paired), planned_looks_of(floor_paired)
    if paired is None or floor_paired is None or looks is None or floor_looks is None:
        return None
    return clears_floor_bias(paired_ratios(paired), paired_ratios(floor_paired), band, confidence, looks, floor_looks)


def verdict_from_pairs(claim: dict[str, Any], paired: dict[str, Any] | None, confidence: float) -> tuple[str, str]:
    """The verdict a record's own interleaved pairs give (``paired``), with why, checked against what it records
    (``claim``: its ``speedup_ci``): the interval recomputed at its planned looks' confidence
    (``1 - (1 - confidence) / looks``, as the sampling drew it) and judged against its recorded band. When the
    record cannot be re-derived (no pairs, looks or band), its recorded interval differs from the recomputed
    one, or the pairs cannot reach ``confidence``, the verdict is ``unverified``. The gate publishes a claim only
    when this verdict is the recorded one: an edited interval, verdict or floor is not a claim."""
    looks = planned_looks_of(paired)
    band = claim.get("band")
    if paired is None or looks is None or not band:
        return UNVERIFIED, "the record lacks its interleaved pairs, their planned looks or its noise band"
    again = paired_speedup(paired["reference_s"], paired["variant_s"], look_confidence(confidence, looks))
    recomputed = (again.ratio, again.low, again.high)
    recorded = tuple(claim.get(key) for key in ("ratio", "low", "high"))
    same = (
        isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
        for a, b in zip(recomputed, recorded, strict=True)
    )
    if not all(same):
        return UNVERIFIED, (
            f"its recorded ratio and interval {recorded} are not what its {again.n} pairs give "
            f"({again.ratio:.4g} [{again.low:.4g}, {again.high:.4g}] over {looks} planned look(s))"
        )
    if 1 - looks * (1 - again.confidence) + 1e-9 < confidence:
        return UNVERIFIED, f"{again.n} pairs over {looks} planned look(s) cannot reach {confidence:.0%} confidence"
    return judge_interval(again.low, again.high, (float(band[0]), float(band[1])))


def against_noise_floor(
    claim: SpeedupClaim, floor: SpeedupClaim | None, floor_bias: tuple[bool, str] | None = None
) -> SpeedupClaim:
    """A claim as it may be published given its model's noise floor. A faster/slower claim must hold beyond
    every bias between the arms the floor's interval allows (``floor_bias``, from ``clears_floor_bias``; None
    when the pairs to check it are missing): beside an equivalent floor one that does not is unverified (a bias
    of up to the band could explain it). When identical configurations did not land inside the band, the
    machine was too noisy for the threshold (the band is never widened to fit): an equivalence is only
    ``noise``, and a faster/slower claim stands only when the floor's interval includes 1.0 and ``floor_bias``
    says it clears; otherwise it is unverified."""
    if floor is None or claim.verdict not in DECIDED:
        return claim
    if floor.verdict == EQUIVALENT:
        # An equivalent floor may still hold a bias up to the band (even one that excludes 1.0): a small claim
        # it could explain is not published (the review simulated 17.8% false claims at a 4% shared bias).
        if claim.verdict in (FASTER, SLOWER) and floor_bias is not None and not floor_bias[0]:
            why = f"{claim.reason}, but {floor_bias[1]}: the noise floor's own bias could explain it"
            return SpeedupClaim(UNVERIFIED, why, claim.band)
        return claim
    why = f"the noise floor (identical configurations) was {floor.verdict}: {floor.reason}; the machine was too "
    why += "noisy for this threshold (run on an idle machine or raise measure.min_effect)"
    if claim.verdict == EQUIVALENT:
        return SpeedupClaim(NOISE, f"{claim.reason}, but {why}", claim.band)
    if floor.verdict == NOISE and floor_bias is not None:
        clears, how = floor_bias
        if clears:
            return SpeedupClaim(claim.verdict, f"{claim.reason}; the noise floor was undecided, but {how}", claim.band)
        why += f"; {how}"
    return SpeedupClaim(UNVERIFIED, why, claim.band)


class SequentialPairs:
    """Draws interleaved pairs until the comparison is decided or the budget is spent.

    ``draw(index)`` runs pair ``index`` (ABBA order is the caller's) and returns ``(reference_s, variant_s)``.
    The sampler looks at the pairs at ``planned_looks(first, most, confidence)``, each look's interval with
    that look confidence; it stops at the first decided look, after ``most`` pairs, or, with a ``budget_s``, at the
    first look after that many seconds of drawing. ``estimate()`` gives the final estimate with the stop reason.
    """

    def __init__(
        self, band: tuple[float, float], confidence: float, first: int, most: int, budget_s: float | None = None
    ):
        self.band = band
        self.schedule, self.per_look = planned_looks(first, most, confidence)
        self.budget_s = budget_s
        self.reference_s: list[float] = []
        self.variant_s: list[float] = []
        self.stopped = ""

    def run(self, draw: Any, clock: Any = None) -> SpeedupEstimate:
        """Draw until decided; ``clock`` (default ``time.perf_counter``) measures the budget."""
        import time

        from accel.measure.timing import as_rank0_has_it

        now = clock or time.perf_counter
        started = now()
        for look, n in enumerate(self.schedule, 1):
            while len(self.reference_s) < n:
                reference, variant = draw(len(self.reference_s))
                self.reference_s.append(reference)
                self.variant_s.append(variant)
            estimate = paired_speedup(self.reference_s, self.variant_s, self.per_look)
            verdict, _ = judge_interval(estimate.low, estimate.high, self.band)
            stops = (
                f"decided ({verdict}) at look {look} of {len(self.schedule)}, {n} pairs" if verdict in DECIDED
                else f"undecided after measure.max_pairs = {n} pairs" if look == len(self.schedule)
                else f"undecided when measure.pair_budget_s ({self.budget_s:g} s) was spent, {n} pairs"
                if self.budget_s is not None and now() - started >= self.budget_s
                else ""
            )  # fmt: skip
            # The ranks of a parallel cell stop together, when rank 0 does (their calls meet in collectives).
            if as_rank0_has_it(int(bool(stops))):
                self.stopped = stops or f"stopped with rank 0 at look {look} of {len(self.schedule)}, {n} pairs"
                break
        return self.estimate()

    def estimate(self) -> SpeedupEstimate:
        """The estimate from the pairs drawn so far, at the per-look confidence, with the stop reason."""
        base = paired_speedup(self.reference_s, self.variant_s, self.per_look)
        looks = len(self.schedule)
        return SpeedupEstimate(base.ratio, base.low, base.high, base.confidence, base.n, base.method, self.stopped,
                               looks)  # fmt: skip


def format_speedup(claim: dict[str, Any] | None, digits: int = 2) -> str:
    """How a speedup is shown everywhere: ``1.82x [1.61–2.03]`` for a claim, ``≈1.0x`` for an equivalent one
    (its interval inside the noise band), ``≈1.0x?`` for noise (undecided, its interval includes 1.0 but reaches
    past the band), ``1.82x?`` for an unverified or inconclusive one, an en dash when there is none or when it
    is sequential: the ratio of two cells timed one after the other is never a claim, and on a shared machine
    one contended baseline call made a 72x "speedup" of it (the coverage run); the warm medians stay beside it."""
    if not claim or claim.get("ratio") is None or claim.get("method") == SEQUENTIAL:
        return "–"
    ratio = claim["ratio"]
    verdict = claim.get("verdict")
    if verdict == EQUIVALENT:
        return "≈1.0x"
    if verdict == NOISE:
        return "≈1.0x?"
    if verdict in (UNVERIFIED, INCONCLUSIVE):
        return f"{ratio:.{digits}f}x?"
    return f"{ratio:.{digits}f}x [{claim['low']:.{digits}f}–{claim['high']:.{digits}f}]"
