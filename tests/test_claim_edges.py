"""The edges of the floor-bias rule and of the gate's re-judgement of a recorded claim: how many pairs each
interval needs, what a record must still hold for its claim to be published, and the exact band edges. Each test
here was written for a mutmut survivor (reports/mutation/mutmut.md) and fails with it."""

from __future__ import annotations

from typing import Any

import pytest

from accel.gate.judge import RunMeasure, nothing_measured, publishable_claim
from accel.measure.speedup import (
    EQUIVALENT,
    FASTER,
    NOISE,
    UNVERIFIED,
    SpeedupClaim,
    against_noise_floor,
    classify,
    clears_floor_bias,
    floor_bias_of,
    floor_first_look,
    format_speedup,
    noise_band,
    paired_ratios,
    paired_speedup,
    variant_first_look,
)

BAND = noise_band(0.05)
TWO_X = [2.0 + 0.01 * i for i in range(40)]
STEADY_FLOOR = [0.99 + 0.02 * i / 39 for i in range(40)]  # 0.99 .. 1.01: equivalent, no bias to speak of


def _too_few(result: tuple[bool, str]) -> bool:
    return not result[0] and result[1].startswith("too few pairs")


def test_one_look_each_needs_six_variant_pairs_and_eight_floor_pairs():
    """At 95% with one look each (the defaults), the variant's interval needs 1 - 0.8 * 5% = 96% (6 pairs) and
    the floor's 1 - 0.2 * 5% = 99% (8 pairs); a second look raises each by one pair."""
    six, eight_floor = TWO_X[:6], STEADY_FLOOR[:8]
    assert clears_floor_bias(six, eight_floor, BAND, 0.95)[0]
    assert _too_few(clears_floor_bias(TWO_X[:5], eight_floor, BAND, 0.95))
    assert _too_few(clears_floor_bias(six, STEADY_FLOOR[:7], BAND, 0.95))
    assert _too_few(clears_floor_bias(six, eight_floor, BAND, 0.95, looks=2))
    assert _too_few(clears_floor_bias(six, eight_floor, BAND, 0.95, floor_looks=2))


def test_three_looks_need_eight_variant_pairs():
    """Three looks: 1 - 0.04 / 3 needs 8 pairs (2/2**7 = 1.6% > 1.33%); an error share read as 1.25x, 1.2x or
    1.8x would let 7 through."""
    assert _too_few(clears_floor_bias(TWO_X[:7], STEADY_FLOOR, BAND, 0.95, looks=3, floor_looks=5))
    assert clears_floor_bias(TWO_X[:8], STEADY_FLOOR, BAND, 0.95, looks=3, floor_looks=5)[0]


def test_five_floor_looks_need_ten_floor_pairs():
    """The floor's share is divided among its looks: five need 1 - 0.01 / 5 = 99.8% (10 pairs), not 95%."""
    assert _too_few(clears_floor_bias(TWO_X, STEADY_FLOOR[:9], BAND, 0.95, looks=1, floor_looks=5))
    assert clears_floor_bias(TWO_X, STEADY_FLOOR[:10], BAND, 0.95, looks=1, floor_looks=5)[0]


def test_the_variants_interval_is_taken_at_its_own_share_of_the_confidence():
    """40 pairs and five looks: the interval at 99.2% is wider than the one at 95%, whose coverage would not
    reach the share; a speedup clearly past the band clears with it."""
    clears, how = clears_floor_bias(TWO_X, STEADY_FLOOR, BAND, 0.95, looks=5, floor_looks=5)
    assert clears, how


def test_a_sample_whose_widest_interval_covers_exactly_the_share_suffices():
    """Six pairs cover 1 - 2/64 = 96.875%; at the confidence whose variant share asks exactly that, they are
    enough (the comparison allows rounding, never a shortfall)."""
    confidence = 1 - (2 / 64) / 0.8  # the variant's need: 1 - (1 - confidence) * 0.8 = 1 - 2/64
    floor = STEADY_FLOOR  # the floor's need (99.2%) is met by 40 pairs
    assert clears_floor_bias(TWO_X[:6], floor, BAND, confidence)[0]
    floor_confidence = 1 - (2 / 256) / 0.2  # the floor's need: 1 - 2/256, exactly eight pairs' widest interval
    assert clears_floor_bias(TWO_X, STEADY_FLOOR[:8], BAND, floor_confidence)[0]


def test_a_small_slowdown_beside_a_wide_floor_is_not_claimed():
    """0.90-0.93x divided by a floor reaching 0.8 could be 1.16x: it does not clear the band."""
    floor = [0.8 + 0.4 * i / 39 for i in range(40)]
    clears, how = clears_floor_bias([0.90 + 0.001 * i for i in range(30)], floor, BAND, 0.95, 1, 1)
    assert not clears and "does not clear" in how, how


def test_an_interval_that_ends_on_the_band_edge_does_not_clear_it():
    """Past the band means strictly past it: an interval starting at 1.05 (or ending at 1/1.05) beside a floor
    of exactly 1.0 touches the band."""
    band_low, band_high = BAND
    flat = [1.0] * 20
    assert not clears_floor_bias([band_high] * 10, flat, BAND, 0.95)[0]
    assert not clears_floor_bias([band_low] * 10, flat, BAND, 0.95)[0]
    assert clears_floor_bias([band_high * 1.001] * 10, flat, BAND, 0.95)[0]


def test_paired_ratios_are_reference_over_variant_pair_by_pair():
    assert paired_ratios({"reference_s": [3.0, 1.0], "variant_s": [1.5, 4.0]}) == [2.0, 0.25]
    with pytest.raises(ValueError):
        paired_ratios({"reference_s": [3.0, 1.0], "variant_s": [1.5]})


def _paired(ratios: list[float], looks: int | None = None, estimate: bool = True) -> dict[str, Any]:
    paired: dict[str, Any] = {"reference_s": list(ratios), "variant_s": [1.0] * len(ratios)}
    if estimate:
        paired["estimate"] = {"n": len(ratios)} if looks is None else {"n": len(ratios), "looks": looks}
    return paired


def test_floor_bias_of_reads_each_records_looks_and_never_assumes_them():
    """Six variant pairs and eight floor pairs clear with one look each; the variant's three looks or the
    floor's five ask for more pairs than either has. A record without its planned looks (no estimate, or none
    in it) cannot be checked: one look, the fewest pairs, is never assumed (helper-4: removing the estimate
    published a 7-pair claim planned over three looks)."""
    six, eight = TWO_X[:6], STEADY_FLOOR[:8]
    assert floor_bias_of(_paired(six, looks=1), _paired(eight, looks=1), BAND, 0.95)[0]
    assert _too_few(floor_bias_of(_paired(six, looks=3), _paired(eight, looks=1), BAND, 0.95))
    assert _too_few(floor_bias_of(_paired(six, looks=1), _paired(eight, looks=5), BAND, 0.95))
    assert floor_bias_of(_paired(TWO_X[:8], looks=3), _paired(STEADY_FLOOR[:10], looks=5), BAND, 0.95)[0]
    for without in (_paired(six), _paired(six, estimate=False), {**_paired(six), "estimate": None}):
        assert floor_bias_of(without, _paired(eight, looks=1), BAND, 0.95) is None
        assert floor_bias_of(_paired(eight, looks=1), without, BAND, 0.95) is None


def test_floor_bias_of_is_none_when_either_side_lacks_its_pairs():
    assert floor_bias_of(None, _paired(STEADY_FLOOR, looks=1), BAND, 0.95) is None
    assert floor_bias_of(_paired(TWO_X, looks=1), None, BAND, 0.95) is None
    assert floor_bias_of({"estimate": {"looks": 1}}, _paired(STEADY_FLOOR, looks=1), BAND, 0.95) is None
    assert floor_bias_of(_paired(TWO_X, looks=1), {"estimate": {"looks": 1}}, BAND, 0.95) is None


def test_first_looks_are_the_fewest_pairs_that_reach_their_share():
    """The smallest first look whose pairs reach the split: pairs 8 of at most 60 give the floor 11 (10 cannot,
    at 99.83% per look) and the variant 9; a first look already enough is kept; a budget too small for any is
    the budget."""
    assert floor_first_look(8, 60, 0.95) == 11 and floor_first_look(10, 60, 0.95) == 11
    assert variant_first_look(8, 60, 0.95) == 9 and variant_first_look(8, 40, 0.95) == 8
    assert floor_first_look(20, 60, 0.95) == 20
    assert floor_first_look(8, 8, 0.95) == 8 and variant_first_look(12, 9, 0.95) == 9


def test_a_claim_unverified_by_an_equivalent_floors_bias_keeps_its_band():
    floor = SpeedupClaim(EQUIVALENT, "interval [0.96, 1.04] inside the band", BAND)
    claim = SpeedupClaim(FASTER, "interval [1.06, 1.10] above the band", BAND)
    judged = against_noise_floor(claim, floor, (False, "it does not clear"))
    assert judged.verdict == UNVERIFIED and judged.band == BAND


def test_a_sequential_ratio_is_never_shown_as_a_speedup():
    claim = {"ratio": 2.0, "low": 1.5, "high": 2.5, "verdict": UNVERIFIED, "method": "sequential"}
    assert format_speedup(claim) == "–"
    assert format_speedup({**claim, "method": "interleaved"}) == "2.00x?"


def test_nothing_measured_only_when_no_record_ran_and_it_names_the_first():
    ok = {"model": "m", "variant": "baseline", "status": "ok"}
    failed = {"model": "m", "variant": "baseline", "status": "failed", "error": "segfault"}
    unsupported = {"model": "m", "variant": "cache", "status": "unsupported", "error": "needs CUDA"}
    assert nothing_measured([ok]) is None and nothing_measured([ok, failed]) is None
    why = nothing_measured([failed, unsupported])
    assert why == (
        "nothing was measured: none of the 2 record(s) ran, the baselines included; the first, m/baseline, is "
        "failed: segfault"
    )


# The gate's re-judgement of a recorded claim (publishable_claim).


def _record(variant: str, ratios: list[float], looks: int = 1, confidence: float | None = None) -> dict[str, Any]:
    estimate = paired_speedup(ratios, [1.0] * len(ratios), 1 - (1 - (confidence or 0.95)) / looks)
    estimate = type(estimate)(**{**estimate.to_dict(), "looks": looks})
    claim = classify(estimate, BAND, confidence or 0.95)
    speedup_ci = {**estimate.to_dict(), "verdict": claim.verdict, "reason": claim.reason, "band": list(BAND)}
    if confidence is not None:
        speedup_ci["requested_confidence"] = confidence
    paired = {**_paired(ratios), "estimate": estimate.to_dict()}
    return {
        "model": "m", "variant": variant, "status": "ok", "warm": {"median": 1.0}, "paired": paired,
        "speedup_ci": speedup_ci,
    }  # fmt: skip


def test_a_floor_record_that_did_not_run_verifies_nothing():
    floor = {**_record("noise-floor", STEADY_FLOOR), "status": "failed"}
    assert floor["speedup_ci"]["verdict"] == EQUIVALENT
    judged = publishable_claim(_record("cache", TWO_X), floor)
    assert judged["verdict"] == UNVERIFIED and judged["reason"].startswith("no noise-floor record that ran")


def test_a_claim_whose_record_lost_its_band_or_pairs_is_unverified_beside_any_floor():
    """The sweep always had the band, both records' pairs and their planned looks for a claim; a record without
    them (hand-edited, or written by a tool that drops them) cannot be re-derived, so the gate does not publish
    it: a speedup is unverified, an equivalence noise."""
    floor, cache = _record("noise-floor", STEADY_FLOOR), _record("cache", TWO_X)
    assert floor["speedup_ci"]["verdict"] == EQUIVALENT and publishable_claim(cache, floor)["verdict"] == FASTER
    lacks = "the record lacks its interleaved pairs, their planned looks or its noise band"
    no_band = {**cache, "speedup_ci": {k: v for k, v in cache["speedup_ci"].items() if k != "band"}}
    no_looks = {**cache, "paired": {**cache["paired"], "estimate": {"n": 40}}}
    for record in ({**cache, "paired": None}, no_looks):
        judged = publishable_claim(record, floor)
        assert judged["verdict"] == UNVERIFIED, judged
        assert judged["reason"] == f"{cache['speedup_ci']['reason']}, but {lacks}: the gate publishes what they show"
    judged = publishable_claim(no_band, floor)
    assert judged["verdict"] == UNVERIFIED
    assert "but its band None is not a noise band 1/(1+t)..1+t with 0 < t < 1" in judged["reason"], judged
    judged = publishable_claim(cache, {**floor, "paired": None})
    assert judged["verdict"] == UNVERIFIED
    assert judged["reason"] == (
        f"{cache['speedup_ci']['reason']}, but the noise floor recorded equivalent and {lacks}: no claim is verified"
    )
    same = _record("same", STEADY_FLOOR)
    assert same["speedup_ci"]["verdict"] == EQUIVALENT and publishable_claim(same, floor) == same["speedup_ci"]
    assert publishable_claim({**same, "paired": None}, floor)["verdict"] == NOISE


def test_a_claim_is_published_only_as_its_own_pairs_give_it():
    """helper-4 edited records by hand and the gate published them: a verdict turned round, an interval made
    up, an interval inside the band called faster. Each is now recomputed from the record's pairs."""
    floor, cache = _record("noise-floor", STEADY_FLOOR), _record("cache", TWO_X)
    claim = cache["speedup_ci"]
    edits = {
        "slower": {**claim, "verdict": "slower"},
        "made up": {**claim, "ratio": 10.0, "low": 9.0, "high": 11.0},
        "inside the band": {**claim, "low": 0.99, "high": 1.01},
    }
    for edit, edited in edits.items():
        judged = publishable_claim({**cache, "speedup_ci": edited}, floor)
        assert judged["verdict"] == UNVERIFIED, (edit, judged)
        assert "the gate publishes what they show" in judged["reason"], (edit, judged["reason"])
    flipped = publishable_claim({**cache, "speedup_ci": edits["slower"]}, floor)
    assert "its pairs give faster (interval [" in flipped["reason"], flipped["reason"]
    made_up = publishable_claim({**cache, "speedup_ci": edits["made up"]}, floor)
    assert "its recorded ratio and interval (10.0, 9.0, 11.0) are not what its 40 pairs give" in made_up["reason"]


def test_a_noise_floor_is_used_only_as_its_own_pairs_give_it_and_only_if_it_ran():
    """A floor whose pairs show a 10% bias but whose verdict was edited to equivalent verifies nothing; nor does
    a floor record that failed or was never timed (the gate fails it as a reference: it verified claims)."""
    cache = _record("cache", TWO_X)
    biased = _record("noise-floor", [1.10 + 0.001 * i for i in range(40)])
    relabelled = {**biased, "speedup_ci": {**biased["speedup_ci"], "verdict": EQUIVALENT}}
    judged = publishable_claim(cache, relabelled)
    assert judged["verdict"] == UNVERIFIED
    assert "the noise floor recorded equivalent and its pairs give faster" in judged["reason"], judged["reason"]
    floor = _record("noise-floor", STEADY_FLOOR)
    for not_run in ({**floor, "warm": None}, {**floor, "status": "failed"}, {**floor, "warm": {}}):
        assert publishable_claim(cache, not_run)["reason"].startswith("no noise-floor record that ran")


def test_a_sample_exactly_at_its_coverage_edge_clears():
    """At these confidences the six variant pairs' (or the eight floor pairs') widest interval covers exactly
    what the split asks, to the last bit of coverage + 1e-12 (helper-4 found them): the comparison allows
    rounding and never asks a hair more."""
    assert clears_floor_bias(TWO_X[:6], STEADY_FLOOR, BAND, 0.96093750000125)[0]
    assert clears_floor_bias(TWO_X, STEADY_FLOOR[:8], BAND, 0.9609375000049997)[0]


def test_the_records_requested_confidence_sets_the_split():
    """Five pairs cannot reach the variant's share at 95% (96%: 6 pairs) but can at 80% (84%: 4 pairs): the
    gate judges at the confidence the run asked for, which the record and its noise floor keep alike."""
    floor = _record("noise-floor", STEADY_FLOOR)
    floor_at_80 = _record("noise-floor", STEADY_FLOOR, confidence=0.8)

    def five_pairs(confidence: float | None) -> dict[str, Any]:
        record = _record("cache", TWO_X[:5], confidence=confidence)
        record["speedup_ci"]["verdict"] = FASTER  # as a run at that confidence decided it
        return record

    at_default = publishable_claim(five_pairs(None), floor)
    assert at_default["verdict"] == UNVERIFIED
    assert "5 pairs over 1 planned look(s) cannot reach 95% confidence" in at_default["reason"], at_default
    assert publishable_claim(five_pairs(0.8), floor_at_80)["verdict"] == FASTER
    asked_80 = RunMeasure(BAND, 0.8)
    assert publishable_claim(five_pairs(0.8), floor_at_80, run=asked_80)["verdict"] == FASTER


def test_a_claim_judged_with_a_band_or_confidence_its_run_did_not_ask_is_not_published():
    """The review widened a record's band to [0.5, 2.0] (a 1.0x claim became 'equivalent'), lowered its
    confidence to 0.51 with a recomputed interval, and both were published: a claim must be judged with its noise
    floor's band and confidence, a noise band of measure.min_effect's range, and the run's profile's when known."""
    floor, cache = _record("noise-floor", STEADY_FLOOR), _record("cache", TWO_X)
    same = _record("same", STEADY_FLOOR)
    asked = RunMeasure(BAND, 0.95)
    assert publishable_claim(cache, floor, run=asked)["verdict"] == FASTER
    assert publishable_claim(same, floor, run=asked)["verdict"] == EQUIVALENT

    def edited(record: dict[str, Any], **claim: Any) -> dict[str, Any]:
        return {**record, "speedup_ci": {**record["speedup_ci"], **claim}}

    wide = noise_band(0.9)
    cases = {
        "not a noise band": (edited(same, band=[0.5, 2.0]), floor, None, "its band [0.5, 2.0] is not a noise band"),
        "band not the floor's": (edited(same, band=list(wide)), floor, None, "is not its noise floor's"),
        "band not the run's": (
            edited(same, band=list(wide)),
            edited(floor, band=list(wide)),
            asked,
            "is not the run's (0.952381..1.05",
        ),
        "confidence out of range": (
            edited(cache, requested_confidence=0.4),
            floor,
            None,
            "its confidence 0.4 is outside measure.confidence",
        ),
        "confidence not the floor's": (
            edited(cache, requested_confidence=0.6),
            floor,
            None,
            "its confidence 0.6 is not its noise floor's (0.95)",
        ),
        "confidence not the run's": (
            _record("cache", TWO_X, confidence=0.51),
            _record("noise-floor", STEADY_FLOOR, confidence=0.51),
            asked,
            "its confidence 0.51 is not the run's (0.95",
        ),
    }
    for case, (record, its_floor, run, why) in cases.items():
        judged = publishable_claim(record, its_floor, run=run)
        assert judged["verdict"] in (UNVERIFIED, NOISE), (case, judged)
        assert why in judged["reason"] and judged["reason"].endswith("no claim is verified"), (case, judged["reason"])
    # the same records, judged as their run asked, publish as recorded
    lowered = _record("cache", TWO_X, confidence=0.51)
    lowered_floor = _record("noise-floor", STEADY_FLOOR, confidence=0.51)
    assert publishable_claim(lowered, lowered_floor, run=RunMeasure(BAND, 0.51)) == lowered["speedup_ci"]


def test_only_a_measured_variant_that_ran_and_engaged_publishes_a_claim():
    """The review copied a faster claim onto the baseline, and onto cells that failed (status failed, or no
    engagement evidence: a gate failure): each was published. Only a variant that ran and engaged claims."""
    floor, cache = _record("noise-floor", STEADY_FLOOR), _record("cache", TWO_X)
    assert publishable_claim(cache, floor)["verdict"] == FASTER
    baseline = {**cache, "variant": "baseline"}
    crashed = {**cache, "status": "failed"}
    judged = publishable_claim(baseline, floor)
    assert judged["verdict"] == UNVERIFIED and "a reference cell" in judged["reason"], judged
    judged = publishable_claim(crashed, floor)
    assert judged["verdict"] == UNVERIFIED and "the cell did not run (failed)" in judged["reason"], judged
    untimed = {**cache, "warm": None}  # "ok" without a warm timing: a record that was never timed
    judged = publishable_claim(untimed, floor)
    assert judged["verdict"] == UNVERIFIED, judged
    assert "the cell did not run (ok, but no timed outputs)" in judged["reason"], judged
    judged = publishable_claim(cache, floor, voided="engagement of cache: measured failed, required engaged")
    assert judged["verdict"] == UNVERIFIED
    assert judged["reason"] == (
        "the gate failed the cell's timing (engagement of cache: measured failed, required engaged): its claim is "
        "not published"
    )


def test_an_unverified_claim_quotes_the_floors_reason():
    """Beside a floor that saw a bias the reason quotes the floor's own; a floor without one leaves it empty
    (never a placeholder)."""
    biased_floor = _record("noise-floor", [1.10 + 0.001 * i for i in range(40)])
    assert biased_floor["speedup_ci"]["verdict"] == FASTER
    cache = _record("cache", TWO_X)
    too_noisy = "the machine was too noisy for this threshold (run on an idle machine or raise measure.min_effect)"
    judged = publishable_claim(cache, biased_floor)
    assert judged["verdict"] == UNVERIFIED
    assert judged["reason"] == (
        f"the noise floor (identical configurations) was faster: {biased_floor['speedup_ci']['reason']}; {too_noisy}"
    )
    silent_floor = {**biased_floor, "speedup_ci": {**biased_floor["speedup_ci"], "reason": ""}}
    assert publishable_claim(cache, silent_floor)["reason"] == (
        f"the noise floor (identical configurations) was faster: ; {too_noisy}"
    )


def test_a_claim_the_floors_bias_could_explain_keeps_its_own_reason_first():
    """1.06-1.07x (8 pairs) beside an equivalent floor reaching 1.013 may be 1.046x: unverified, its own reason first; a
    claim recorded without a reason starts at the comma (never a placeholder)."""
    floor = _record("noise-floor", [0.97 + 0.06 * i / 39 for i in range(40)])
    assert floor["speedup_ci"]["verdict"] == EQUIVALENT
    small = _record("small", [1.06 + 0.001 * i for i in range(8)])
    assert small["speedup_ci"]["verdict"] == FASTER
    judged = publishable_claim(small, floor)
    assert judged["verdict"] == UNVERIFIED
    assert judged["reason"].startswith(f"{small['speedup_ci']['reason']}, but divided by every bias"), judged
    silent = {**small, "speedup_ci": {**small["speedup_ci"], "reason": ""}}
    assert publishable_claim(silent, floor)["reason"].startswith(", but divided by every bias")


def test_a_slower_claim_the_floors_bias_could_explain_is_unverified_too():
    """The mirror image below the band: 0.94-0.945x beside an equivalent floor allowing a bias of 0.99-1.01 may
    be 0.96x, inside the band: unverified. Judged against the band's low edge, not its high one."""
    from accel.measure.speedup import SLOWER

    floor = _record("noise-floor", [0.97 + 0.06 * i / 39 for i in range(40)])
    small = _record("small", [0.940 + 0.000125 * i for i in range(40)])
    assert small["speedup_ci"]["verdict"] == SLOWER
    judged = publishable_claim(small, floor)
    assert judged["verdict"] == UNVERIFIED and "does not clear the noise band" in judged["reason"], judged
    clear = _record("clear", [0.80 + 0.0003 * i for i in range(40)])
    assert publishable_claim(clear, floor)["verdict"] == SLOWER


def test_with_publishable_claims_rejudges_only_the_variants_claims():
    """The noise floor's own interval is a measurement, not a claim: a floor that saw a bias keeps its verdict
    (its variants' claims are what it unverifies); a record without a claim is passed through untouched."""
    from accel.gate.judge import with_publishable_claims

    biased_floor = _record("noise-floor", [1.10 + 0.001 * i for i in range(40)])
    biased_floor["role"] = "noise_floor"
    baseline = {"model": "m", "variant": "baseline", "status": "ok"}
    cache = _record("cache", TWO_X)
    judged = with_publishable_claims([baseline, biased_floor, cache])
    assert judged[0] == baseline and judged[1] == biased_floor
    assert judged[1]["speedup_ci"]["verdict"] == FASTER and judged[2]["speedup_ci"]["verdict"] == UNVERIFIED
    assert cache["speedup_ci"]["verdict"] == FASTER  # the records read are not changed in place


def test_too_few_pairs_for_any_claim_beside_the_floor_are_named_at_plan_time(write_profile, monkeypatch, capsys):
    """pairs 6 / max_pairs 6 (the tests' small profile): six floor pairs cannot reach the floor's 99% share, so
    every faster/slower claim beside it would come out unverified whatever the timings. plan and the report's
    legend say so with the smallest max_pairs that would do; a single look lists no further looks."""
    from conftest import invoke, small_profile

    from accel.measure.speedup import sampling_notice
    from accel.profile import parse_profile
    from accel.report.markdown import _speedup_method

    assert sampling_notice(8, 40, 0.95) is None and sampling_notice(10, 60, 0.95) is None
    notice = sampling_notice(6, 6, 0.95)
    assert notice == (
        "measure.max_pairs = 6 is too few pairs to hold a claim beyond the noise floor's bias at 95% confidence: "
        "every faster/slower claim beside the noise floor will be unverified (raise measure.max_pairs to at least 8)"
    )
    profile = small_profile()
    path = write_profile(profile)
    code, _, err = invoke(monkeypatch, capsys, "plan", str(path))
    assert code == 0 and f"note: {path}: {notice}" in err, err
    legend = _speedup_method(parse_profile(profile))
    assert "6 pairs first (the noise floor 6 first) (at most 6 pairs" in legend and legend.endswith(f"Note: {notice}.")
    profile["measure"]["noise_floor"] = False
    code, _, err = invoke(monkeypatch, capsys, "plan", str(write_profile(profile)))
    assert code == 0 and "note:" not in err


def test_a_claim_over_several_looks_needs_the_whole_runs_coverage_not_one_looks():
    """Six pairs reach 96.9% coverage at one look, but a comparison planned over three looks spends the 5%
    across them (each look 1 - 0.05/3): six pairs give the run only 90.6%, below the 95% it asked, so the
    gate does not publish their claim however far above the band it lies."""
    from accel.measure.speedup import verdict_from_pairs

    once, thrice = _record("cache", TWO_X[:6], looks=1), _record("cache", TWO_X[:6], looks=3)
    assert verdict_from_pairs(once["speedup_ci"], once["paired"], 0.95)[0] == FASTER
    thrice["speedup_ci"]["verdict"] = FASTER  # as an edited record would say
    verdict, why = verdict_from_pairs(thrice["speedup_ci"], thrice["paired"], 0.95)
    assert verdict == UNVERIFIED and why == "6 pairs over 3 planned look(s) cannot reach 95% confidence", why


@pytest.mark.parametrize("confidence", [0.5, 1.0, 1.5, True])
def test_a_confidence_outside_the_open_range_half_to_one_is_not_a_claims_setting(confidence):
    from accel.gate.judge import claim_settings_problem

    claim = {"band": list(BAND), "requested_confidence": confidence}
    problem = claim_settings_problem(claim, dict(claim), None)
    assert problem == f"its confidence {confidence} is outside measure.confidence's range (0.5, 1)"
    inside = {"band": list(BAND), "requested_confidence": 0.51}
    assert claim_settings_problem(inside, dict(inside), None) is None


def test_planned_looks_are_a_whole_number_of_one_or_more_or_unknown():
    from accel.measure.speedup import planned_looks_of

    for looks in (0, -1, True, 1.5, "3", None):
        assert planned_looks_of({"reference_s": [1.0], "estimate": {"looks": looks}}) is None, looks
    assert planned_looks_of({"reference_s": [1.0], "estimate": {"looks": 3}}) == 3
    assert planned_looks_of({"estimate": {"looks": 3}}) is None  # no pairs: nothing planned them


@pytest.mark.parametrize("band", [["x", 1.05], [True, 1.05], [1.0, 1.0], [0.5, 1.05], [1 / 1.05, 1.05, 1.1], None])
def test_a_band_that_is_not_a_noise_band_is_not_a_claims_setting(band):
    from accel.gate.judge import claim_settings_problem

    claim = {"band": band, "requested_confidence": 0.95}
    problem = claim_settings_problem(claim, dict(claim), None)
    assert problem == f"its band {band} is not a noise band 1/(1+t)..1+t with 0 < t < 1 (measure.min_effect)"
