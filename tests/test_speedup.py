"""Speedup intervals and claims: order-statistic intervals, the noise band, and what may be published."""

from __future__ import annotations

import pytest

from accel.measure.speedup import (
    FASTER,
    INCONCLUSIVE,
    NOISE,
    SLOWER,
    UNVERIFIED,
    SpeedupEstimate,
    classify,
    format_speedup,
    interval_coverage,
    median_interval,
    noise_band,
    paired_speedup,
    sequential_speedup,
)


def test_median_interval_is_the_sign_test_interval():
    values = [float(v) for v in range(1, 11)]  # n = 10: [x(2), x(9)] covers 1 - 2 * 11/1024
    low, high, coverage = median_interval(values, 0.95)
    assert (low, high) == (2.0, 9.0)
    assert coverage == pytest.approx(1 - 2 * 11 / 1024)
    low, high, coverage = median_interval([5.0, 1.0, 3.0, 2.0, 4.0], 0.95)  # n = 5 cannot reach 95%
    assert (low, high) == (1.0, 5.0) and coverage == pytest.approx(1 - 2 / 32)
    assert median_interval([1.0], 0.95)[2] == 0.0


def test_the_report_legend_states_the_intervals_actual_coverage():
    from accel.profile import Profile
    from accel.report.markdown import _speedup_method

    assert interval_coverage(10, 0.95) == pytest.approx(1 - 2 * 11 / 1024)
    profile = Profile.model_validate({"name": "p", "models": [{"name": "m", "source": "tiny-flux"}],
                                      "workload": {"prompts": ["a fox"]},
                                      "variants": [{"name": "v", "features": {"vae_use_slicing": True}}],
                                      "measure": {"pairs": 10}})  # fmt: skip
    legend = _speedup_method(profile)
    # Ten pairs give the [x(2), x(9)] interval: 97.9% coverage, not the 95% asked for.
    assert "at least 95% coverage: 97.9% with 10 pairs" in legend, legend
    few = profile.model_copy(update={"measure": profile.measure.model_copy(update={"pairs": 5})})
    assert "min to max: 93.8% coverage with 5 pairs, short of 95%" in _speedup_method(few)


def test_paired_speedup_is_the_median_ratio():
    estimate = paired_speedup([2.0, 2.0, 2.0, 2.2, 2.0, 2.0], [1.0, 1.0, 1.1, 1.0, 1.0, 1.0])
    assert estimate.ratio == pytest.approx(2.0) and estimate.n == 6 and estimate.method == "interleaved"
    assert estimate.low == pytest.approx(2.0 / 1.1) and estimate.high == pytest.approx(2.2)
    with pytest.raises(ValueError, match="same, non-zero number"):
        paired_speedup([1.0], [1.0, 1.0])


def test_one_load_spike_does_not_move_the_median():
    reference = [1.0] * 10
    variant = [1.0] * 9 + [9.0]  # one call hit by a spike
    estimate = paired_speedup(reference, variant)
    assert estimate.ratio == pytest.approx(1.0) and estimate.high == pytest.approx(1.0)


def _estimate(ratio: float, low: float, high: float, n: int = 10, method: str = "interleaved") -> SpeedupEstimate:
    coverage = median_interval(list(range(n)), 0.95)[2]
    return SpeedupEstimate(ratio, low, high, coverage, n, method)


def test_claims_need_the_whole_interval_outside_the_noise_band():
    band = noise_band(_estimate(1.0, 0.9, 1.12), min_effect=0.05)
    assert band == (pytest.approx(0.9), pytest.approx(1.12))
    assert classify(_estimate(1.5, 1.3, 1.7), band, 0.95).verdict == FASTER
    assert classify(_estimate(0.6, 0.5, 0.7), band, 0.95).verdict == SLOWER
    # excludes 1.0 but reaches into the band: not a claim, and not shown as ≈1.0x either
    assert classify(_estimate(1.3, 1.1, 1.5), band, 0.95).verdict == INCONCLUSIVE
    assert classify(_estimate(0.3, 0.26, 0.61), (0.28, 6.3), 0.95).verdict == INCONCLUSIVE
    assert classify(_estimate(1.0, 0.97, 1.03), band, 0.95).verdict == NOISE
    assert classify(_estimate(1.6, 0.8, 2.4), band, 0.95).verdict == NOISE  # includes 1.0


def test_the_band_is_never_narrower_than_min_effect():
    low, high = noise_band(_estimate(1.0, 1.0, 1.0), min_effect=0.05)
    assert low == pytest.approx(1 / 1.05) and high == pytest.approx(1.05)
    assert classify(_estimate(1.04, 1.03, 1.045), (low, high), 0.95).verdict == INCONCLUSIVE  # never a claim


def test_unverified_without_noise_floor_pairs_or_interleaving():
    good = _estimate(2.0, 1.8, 2.2)
    no_floor = classify(good, None, 0.95)
    assert no_floor.verdict == UNVERIFIED and "noise floor" in no_floor.reason
    few = classify(_estimate(2.0, 1.8, 2.2, n=4), (0.9, 1.1), 0.95)
    assert few.verdict == UNVERIFIED and "raise measure.pairs" in few.reason
    sequential = classify(_estimate(2.0, 1.8, 2.2, method="sequential"), (0.9, 1.1), 0.95)
    assert sequential.verdict == UNVERIFIED and "sequentially" in sequential.reason
    leaked = classify(good, (0.9, 1.1), 0.95, "the reference's output differs")
    assert leaked.verdict == UNVERIFIED and leaked.reason == "the reference's output differs"


def test_sequential_speedup_interval_brackets_the_ratio():
    estimate = sequential_speedup([2.0, 2.1, 1.9, 2.0, 2.2, 2.0], [1.0, 1.1, 0.9, 1.0, 1.0, 1.0])
    assert estimate.method == "sequential" and estimate.low <= estimate.ratio <= estimate.high
    assert estimate.ratio == pytest.approx(2.0)


def test_format_speedup_everywhere_the_same():
    claim = {"ratio": 1.823, "low": 1.61, "high": 2.034, "verdict": FASTER}
    assert format_speedup(claim) == "1.82x [1.61–2.03]"
    assert format_speedup({**claim, "verdict": NOISE}) == "≈1.0x"
    assert format_speedup({**claim, "verdict": UNVERIFIED}) == "1.82x?"
    assert format_speedup({**claim, "verdict": INCONCLUSIVE}) == "1.82x?"
    assert format_speedup(None) == "–"
