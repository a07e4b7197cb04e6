"""Speed claims that drift and load cannot fake: interleaved timing end to end on tiny-flux.

A simulated load burst slows only the calls of the baseline cell (as a busy machine did in the audit, where
identical configurations measured up to 5.28x apart). Timed cell against cell, an identical variant then looks
several times faster; interleaved with its own reference it must come out as noise, while a variant that is
really slower (a sleep added to every call it makes) must still be claimed slower.
"""

from __future__ import annotations

import time

import pytest
from conftest import small_profile

from accel.gate import load_gate_data
from accel.profile import parse_profile
from accel.report.tables import performance_table
from accel.sweep.runner import run_sweep
from accel.targets.adapter import AdapterTarget

# How each verdict an identical variant may get is shown: "| ≈1.0x |" equivalent, "| ≈1.0x? |" noise, "x? |"
# inconclusive or unverified (the cell's own ratio before the question mark).
SHOWN = {"equivalent": "| ≈1.0x |", "noise": "| ≈1.0x? |", "inconclusive": "x? |", "unverified": "x? |"}
# The noise floor's two ways of taking a faster/slower claim back (``against_noise_floor``): its own bias could
# explain the claim, or identical configurations did not land inside the band.
FLOOR_TOOK_IT_BACK = ("the noise floor's own bias could explain it", "the noise floor (identical configurations) was")
BURST_CALLS = 3  # the baseline cell's calls: cold, one timed pass, one stage pass
SLOWDOWN = 5.0  # a slowed call takes this many times as long (relative, so it holds on a busy machine too)


@pytest.fixture(scope="module")
def drifting_run(tmp_path_factory):
    original = AdapterTarget.generate
    calls = {"n": 0}

    def generate(self, request):
        calls["n"] += 1
        started = time.perf_counter()
        outputs = original(self, request)
        took = time.perf_counter() - started
        if calls["n"] <= BURST_CALLS:
            time.sleep((SLOWDOWN - 1) * took)  # background load while the baseline cell is timed
        if getattr(self.pipeline.vae, "use_slicing", False):
            time.sleep((SLOWDOWN - 1) * took)  # a feature that really costs time
        return outputs

    patch = pytest.MonkeyPatch()
    patch.setattr(AdapterTarget, "generate", generate)
    variants = [
        {"name": "same", "features": {"attention_backend": "native"}},
        {"name": "slow", "features": {"vae_use_slicing": {}}},
    ]
    raw = small_profile(["tiny-flux"], variants, num_images_per_prompt=2)
    # Sequential sampling as a user gets it: 6 pairs first, more while undecided (the noise floor must come out
    # equivalent within ±5% for the slower claim to stand).
    raw["measure"].update(pairs=6, max_pairs=40, pair_budget_s=60)
    try:
        result = run_sweep(parse_profile(raw), "test.yaml", tmp_path_factory.mktemp("drift"), show_progress=False)
    finally:
        patch.undo()
    return {r["variant"]: r for r in result.records}


def assert_not_a_claim(claim: dict) -> None:
    """An identical variant's speedup is never published as faster or slower: its interval is inside the band,
    undecided or inconclusive, or beyond the band and taken back by the noise floor (``unverified`` for no
    other reason: too few pairs or a missing floor would hide a claim the floor failed to stop)."""
    assert claim["verdict"] in ("equivalent", "noise", "inconclusive", "unverified"), claim
    if claim["verdict"] == "unverified":
        low, high = claim["band"]
        assert claim["high"] < low or claim["low"] > high, claim  # only a decided interval is taken back
        assert any(reason in claim["reason"] for reason in FLOOR_TOOK_IT_BACK), claim


def test_burst_fools_cell_against_cell_timing(drifting_run):
    baseline, same = drifting_run["baseline"], drifting_run["same"]
    naive = baseline["warm"]["median"] / same["warm"]["median"]
    assert naive > 2, f"the simulated burst must make the cell-to-cell ratio a false speedup (got {naive:.2f})"


def test_identical_variant_is_noise_despite_the_burst(drifting_run):
    same = drifting_run["same"]
    claim = same["speedup_ci"]
    assert claim["method"] == "interleaved" and 6 <= claim["n"] <= 40 and claim["overall_confidence"] >= 0.95
    assert claim["n"] == same["paired"]["pairs_drawn"] == len(same["paired"]["reference_s"]), claim
    assert same["paired"]["stopped"], same["paired"]
    # Never a speed claim. With 6 pairs the interval is the lowest to the highest ratio: inside the ±5% band it is
    # "equivalent" (`≈1.0x`), wider and including 1.0 "noise" (`≈1.0x?`); all six on one side of 1.0 (probability
    # 2/64 for identical calls, more when load drifts) and reaching past the band, "inconclusive" (`x?`). All six
    # beyond the band (CI once measured [0.90, 0.95] under a parallel test worker) is a faster/slower interval,
    # and the noise floor must then take it back: "unverified" (`x?`), for the floor's reason and no other.
    assert_not_a_claim(claim)
    assert claim["low"] <= claim["ratio"] <= claim["high"]
    assert claim["reference_problem"] is None
    table = performance_table(list(drifting_run.values()), "tiny-flux", load_gate_data())
    row = next(line for line in table.splitlines() if line.startswith("| same "))
    assert SHOWN[claim["verdict"]] in row


def test_really_slower_variant_is_claimed_slower(drifting_run):
    claim = drifting_run["slow"]["speedup_ci"]
    assert claim["high"] < claim["band"][0], claim  # decided at the first look: far below the band
    assert "decided (slower) at look 1" in drifting_run["slow"]["paired"]["stopped"]
    if _slower_claim_stands(drifting_run):
        assert claim["verdict"] == "slower", claim
    else:  # the floor saw a bias, or one it allows could explain the slowdown
        assert claim["verdict"] == "unverified", claim


def _slower_claim_stands(run: dict) -> bool:
    """Whether the noise floor lets the slow variant's claim stand: an equivalent or undecided floor whose
    every possible arm bias still leaves the slowdown below the band (``floor_bias_of``)."""
    from accel.measure.speedup import floor_bias_of

    floor, slow = run["noise-floor"], run["slow"]
    if floor["speedup_ci"]["verdict"] not in ("equivalent", "noise"):
        return False
    check = floor_bias_of(slow["paired"], floor["paired"], tuple(slow["speedup_ci"]["band"]), 0.95)
    return check is not None and check[0]


def test_noise_floor_is_interleaved_with_a_copy_of_itself(drifting_run):
    floor = drifting_run["noise-floor"]
    assert len(floor["paired"]["reference_s"]) == len(floor["paired"]["variant_s"]) == floor["paired"]["pairs_drawn"]
    assert floor["paired"]["pairs_drawn"] >= 6
    verdict = floor["speedup_ci"]["verdict"]
    assert verdict in ("equivalent", "noise", "inconclusive", "faster", "slower"), floor["speedup_ci"]
    if verdict in ("faster", "slower"):
        # Identical configurations measured apart beyond the band (the load this test makes, on a busy CI
        # machine): the floor's record keeps what its pairs show (the machine's bias; the gate checks it against
        # them), the gate publishes no claim of a reference cell, and no variant's claim stands beside it.
        from accel.gate import gate_records

        report = gate_records(list(drifting_run.values()), load_gate_data())
        assert [key for key, _ in report.speed_claims if "noise-floor" in key] == []
        for variant in ("same", "slow"):  # no faster, slower or equivalent beside a floor that moved
            claim = drifting_run[variant]["speedup_ci"]
            assert claim["verdict"] in ("noise", "inconclusive", "unverified"), claim


def test_records_say_how_where_and_beside_what_they_were_timed(drifting_run):
    for record in drifting_run.values():
        timing = record["timing"]
        assert timing["executor"] == "inline" and timing["node"] and timing["threads"] >= 1
        assert timing["alone"]["wall_s"] > 0 and timing["alone"]["other_cores"] >= 0
        assert timing["method"] == ("alone" if record["variant"] == "baseline" else "interleaved")
        assert ("interleaved" in timing) == (record["variant"] != "baseline")


def _sweep(tmp_path, **measure):
    raw = small_profile(["tiny-flux"], [{"name": "same", "features": {"attention_backend": "native"}}])
    raw["measure"].update(measure)
    result = run_sweep(parse_profile(raw), "test.yaml", tmp_path, show_progress=False)
    return {r["variant"]: r for r in result.records}


def test_without_noise_floor_speedups_are_unverified(tmp_path):
    same = _sweep(tmp_path, noise_floor=False, pairs=6)["same"]
    assert same["speedup_ci"]["verdict"] == "unverified" and "noise floor" in same["speedup_ci"]["reason"]


def test_sequential_timing_is_unverified(tmp_path):
    records = _sweep(tmp_path, timing="sequential")
    assert "paired" not in records["same"]
    assert records["same"]["speedup_ci"]["method"] == "sequential"
    assert records["same"]["speedup_ci"]["verdict"] == "unverified"


def test_reference_stays_unaccelerated_when_a_feature_sets_global_state(tmp_path, monkeypatch):
    """``set_attention_backend`` changes diffusers' process-global backend; every call of the interleaved
    reference must see the default one (its output alone cannot tell: _native_math gives the same image)."""
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    seen: list[tuple[int, str]] = []
    original = AdapterTarget.generate

    def generate(self, request):
        seen.append((id(self), _AttentionBackendRegistry._active_backend.value))
        return original(self, request)

    monkeypatch.setattr(AdapterTarget, "generate", generate)
    raw = small_profile(["tiny-flux"], [{"name": "math", "features": {"attention_backend": "_native_math"}}])
    raw["measure"].update(pairs=6, noise_floor=False)
    records = {r["variant"]: r for r in run_sweep(parse_profile(raw), "t.yaml", tmp_path, show_progress=False).records}
    assert records["math"]["status"] == "ok"
    targets = list(dict.fromkeys(target for target, _ in seen))  # baseline, math variant, math reference
    assert len(targets) == 3
    variant = [backend for target, backend in seen if target == targets[1]]
    reference = [backend for target, backend in seen if target == targets[2]]
    assert set(variant) == {"_native_math"} and len(reference) == 1 + 6  # cold call + the pairs
    assert "_native_math" not in reference, reference


def test_caches_keep_caching_in_the_interleaved_calls(tmp_path, monkeypatch):
    """TeaCache resets its per-call state in ``begin_run``: the interleaved variant calls must skip steps too
    (they are the ones the speedup comes from), not only the calls the evidence was read from."""
    from accel.features import teacache

    skipped: list[int] = []
    original = teacache._TeaCacheHandle
    end_run = original.end_run

    def counting_end_run(self):
        end_run(self)
        skipped.append(len(self.current.get("cached_steps", [])))

    monkeypatch.setattr(original, "end_run", counting_end_run)
    raw = small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.8}}], steps=4)
    raw["measure"].update(pairs=6, noise_floor=False)
    run_sweep(parse_profile(raw), "t.yaml", tmp_path, show_progress=False)
    # cold + 1 timed + 1 stage pass + 6 interleaved calls + the untimed per-step capture (a lossy variant's
    # drift curve), every one with its evidence window
    assert len(skipped) == 10 and all(n > 0 for n in skipped), skipped


def test_attention_handle_pauses_the_global_backend_for_the_reference():
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    from accel.features import FEATURES
    from accel.features.base import RunContext
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget as Target

    target = Target(ModelSpec(name="tiny-flux", source="tiny-flux"))
    pipeline = target.load({})
    feature = FEATURES["attention_backend"]
    before = _AttentionBackendRegistry._active_backend
    handle = feature.apply(pipeline, feature.parse_options("_native_math"), RunContext("cpu", 2))
    try:
        assert _AttentionBackendRegistry._active_backend.value == "_native_math"
        with handle.global_state_paused():
            assert _AttentionBackendRegistry._active_backend == before
        assert _AttentionBackendRegistry._active_backend.value == "_native_math"
    finally:
        handle.remove()
    assert _AttentionBackendRegistry._active_backend == before


def test_gate_summary_publishes_the_same_claims(drifting_run):
    from accel.gate import gate_records, markdown_summary

    summary = markdown_summary(gate_records(list(drifting_run.values()), load_gate_data()))
    assert "## Speed claims" in summary
    same = next(line for line in summary.splitlines() if line.startswith("| tiny-flux/same "))
    slow = next(line for line in summary.splitlines() if line.startswith("| tiny-flux/slow "))
    # The summary states the record's own verdict. For the identical variant that is "equivalent" (`≈1.0x`),
    # "noise" (`≈1.0x?`) or, in
    # about 3% of runs (more when load drifts: CI once measured [1.09, 1.39]), "inconclusive" (`x?`), or an
    # interval beyond the band the noise floor took back, "unverified" (`x?`): never a claim, which the record
    # test above pins; here the summary must not turn any of them into one.
    verdict = drifting_run["same"]["speedup_ci"]["verdict"]
    assert_not_a_claim(drifting_run["same"]["speedup_ci"])
    assert f"| {verdict} |" in same and SHOWN[verdict] in same
    assert "| faster |" not in same and "| slower |" not in same
    if _slower_claim_stands(drifting_run):
        assert "| slower |" in slow and "[" in slow
    else:  # see test_really_slower_variant_is_claimed_slower
        assert "| unverified |" in slow
