"""benchmarks/harness_overhead.py measures the path a sweep times, and nothing runs beside a headline call.

The benchmark calls the sweep's own functions; these tests pin that what surrounds a timed call in a real
sweep cell (the call stack down to the pipeline, the Python threads alive, a profiler or tracer) is what
surrounds it in the benchmark, so a meter added around the sweep's timed calls and not to the benchmark fails
here, and that no thread samples beside a headline call.
"""

from __future__ import annotations

import gc
import importlib.util
import inspect
import sys
import threading
from pathlib import Path

import pytest
from conftest import small_profile

from accel.features import apply
from accel.profile import parse_profile
from accel.sweep.runner import run_sweep
from accel.sweep.spec import build_requests
from accel.targets.adapter import AdapterTarget
from accel.targets.build import make_target

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "harness_overhead.py"
# The innermost sweep function of each kind of timed call: the stack below it is the timed path.
# The nearest root names a call: the stage pass runs inside measure_alone (between its passes) but is its own kind.
TIMED_ROOTS = {"measure_alone": "headline", "draw_pair": "interleaved", "stage_pass": "stage"}


def _script():
    spec = importlib.util.spec_from_file_location("harness_overhead", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _thread_kinds() -> frozenset[str]:
    """What each live Python thread runs (its target's name), other than the main thread."""
    kinds = set()
    for thread in threading.enumerate():
        if thread is threading.main_thread():
            continue
        target = getattr(thread, "_target", None)
        kinds.add(getattr(target, "__qualname__", type(thread).__name__))
    return frozenset(kinds)


@pytest.fixture
def timed_environments(monkeypatch):
    """Records, for every pipeline call made below a timed root, what surrounded it."""
    import torch

    seen: list[tuple[str, tuple[str, ...], frozenset[str], bool]] = []
    original = AdapterTarget.generate

    def generate(self, request):
        names = [frame.function for frame in inspect.stack(context=0)[1:]]
        root = next((name for name in names if name in TIMED_ROOTS), None)
        if root is not None:
            path = tuple(names[: names.index(root) + 1])
            # What else can slow a call without a thread: a profiler or tracer (sys.settrace made a mini-flux call
            # 1.12x slower in a review), the thread count, the garbage collector, autograd's anomaly mode.
            profiled = (
                sys.getprofile() is not None or torch.autograd.profiler._is_profiler_enabled,
                sys.gettrace() is not None,
                torch.get_num_threads(),
                gc.isenabled(),
                torch.is_anomaly_enabled(),
            )
            seen.append((TIMED_ROOTS[root], path, _thread_kinds(), profiled))
        return original(self, request)

    monkeypatch.setattr(AdapterTarget, "generate", generate)
    return seen


def _benchmark_run(rounds: int = 2):
    script = _script()
    spec = script.baseline_cell("tiny-flux", "cpu", steps=1, size=32, images=1)
    target = make_target(spec.model)
    target.load({})
    request = build_requests(spec.workload)[0]
    with apply(target.pipeline, num_inference_steps=1, device="cpu", windows_on_calls=False) as applied:
        return script, target, script.measure(spec, target, applied, request, rounds=rounds, warmup=1)


def test_the_bare_loop_is_bare_and_every_harness_path_is_measured():
    script, target, result = _benchmark_run(rounds=3)
    assert script.installed_hooks(target.pipeline) == 0
    assert result["bare_hooks"] == [0, 0, 0]  # checked before each timed bare call
    assert [len(result["samples"][name]) for name in script.CONFIGS] == [3, 3, 3, 3]
    assert len(result["pairs"]) == 3  # one ABBA pair per round, through the sweep's pair drawer
    assert set(result["ratios"]) == {"headline/bare", "interleaved/bare", "recorder/headline"}
    for ratio in result["ratios"].values():
        assert ratio["low"] <= ratio["median"] <= ratio["high"]
    assert script.installed_hooks(target.pipeline) == 0  # the stage recorder removed itself


def test_the_benchmark_times_what_a_sweep_cell_times(timed_environments, tmp_path):
    variants = [{"name": "same", "features": {"attention_backend": "native"}}]
    raw = small_profile(["tiny-flux"], variants, steps=1, height=32, width=32)
    raw["measure"].update(noise_floor=False, pairs=2, max_pairs=2)
    run_sweep(parse_profile(raw), "test.yaml", tmp_path, show_progress=False)
    sweep = {(kind, path, threads, profiled) for kind, path, threads, profiled in timed_environments}
    timed_environments.clear()
    _benchmark_run(rounds=2)
    benchmark = set(timed_environments)
    assert {kind for kind, *_ in sweep} == {"headline", "interleaved", "stage"}
    only_sweep, only_benchmark = sweep - benchmark, benchmark - sweep
    assert sweep == benchmark, f"timed in the sweep only: {only_sweep}; in the benchmark only: {only_benchmark}"


def test_nothing_samples_or_profiles_beside_a_headline_call(timed_environments, tmp_path):
    before = _thread_kinds()
    raw = small_profile(["tiny-flux"], [], steps=1, height=32, width=32)
    raw["measure"].update(noise_floor=False, repeats=2)
    run_sweep(parse_profile(raw), "test.yaml", tmp_path, show_progress=False)
    headline = [entry for entry in timed_environments if entry[0] == "headline"]
    assert len(headline) == 2
    for _, _, threads, profiled in headline:
        assert threads <= before, f"threads beside a headline call: {sorted(threads - before)}"
        profiler, tracer, _, collecting, anomaly = profiled
        assert not profiler and not tracer and collecting and not anomaly, profiled


def test_the_stage_pass_runs_between_the_headline_passes(timed_environments, tmp_path):
    """Drift on the host moves the headline median and the stage pass alike only when the stage pass runs in
    the middle of the headline passes: with 2 passes over 2 requests, 2 headline calls, the stage pass's 2,
    then 2 more."""
    from accel.sweep.timed import midway_after

    raw = small_profile(["tiny-flux"], [], steps=1, height=32, width=32)
    raw["workload"]["seeds"] = [0, 1]
    raw["measure"].update(noise_floor=False, repeats=2)
    run_sweep(parse_profile(raw), "test.yaml", tmp_path, show_progress=False)
    order = [kind for kind, *_ in timed_environments]
    assert order == ["headline", "headline", "stage", "stage", "headline", "headline"]
    assert [midway_after(repeats) for repeats in (1, 2, 3, 4)] == [1, 1, 1, 2]


def test_the_bootstrap_interval_brackets_the_median_and_narrows_with_agreement():
    script = _script()
    assert script.bootstrap_interval([1.0] * 10) == (1.0, 1.0)
    low, high = script.bootstrap_interval([0.9, 1.0, 1.1, 1.0, 0.95, 1.05, 1.0, 0.98, 1.02, 1.0])
    assert 0.9 <= low <= 1.0 <= high <= 1.1


# Every evidence mechanism's variant, tiny: compile with the eager backend (the same counted entry as inductor).
MECHANISM_FEATURES = {
    "compile-counters": {"compile": {"granularity": "regional", "backend": "eager"}},
    "cache-work-counters": {"first_block_cache": {"threshold": 0.2}},
    "attention-tallies": {"attention_backend": {"backend": "native"}},
    # Two ranks (the script starts itself per rank): the collectives counted, swapped for the originals when bare.
    "collective-wrappers": {"context_parallel": {"ulysses": 2}},
}


def test_every_evidence_mechanism_has_a_variant_here():
    script = _script()
    assert set(MECHANISM_FEATURES) == set(script.MECHANISMS)
    assert {name: set(features) for name, features in MECHANISM_FEATURES.items()} == {
        name: set(features) for name, features in script.MECHANISMS.items()
    }


@pytest.mark.parametrize("mechanism", sorted(MECHANISM_FEATURES))
def test_a_variants_bare_call_runs_none_of_its_evidence_and_its_harness_call_all_of_it(mechanism):
    """The bare arm is the same variant with the evidence out of the call path: no counter moves in a bare call
    (else the ratio hides the very cost it measures), every harness call moves them, and leaving restores all."""
    script = _script()
    spec = script.baseline_cell("tiny-flux", "cpu", steps=2, size=32, images=1)
    result = script.run_mechanism(spec, MECHANISM_FEATURES[mechanism], rounds=2, warmup=1)
    # per round: the bare call and the identical control's two (bare calls too), none moving evidence
    assert result["evidence_moved"] == {"bare": [False] * 6, "harness": [True, True]}, result["evidence_moved"]
    assert [len(result["samples"][arm]) for arm in script.ARMS] == [2, 2, 2, 2]
    assert set(result["ratios"]) == {"harness/bare", "control", "corrected"}
    for ratio in result["ratios"].values():
        assert ratio["low"] <= ratio["median"] <= ratio["high"]
    assert result["hooks_after_remove"] == 0
    if mechanism == "collective-wrappers":  # every rank's bare calls ran no wrapper, its harness calls all
        assert result["evidence_moved_per_rank"] == [result["evidence_moved"]] * 2, result["evidence_moved_per_rank"]
        assert result["verdicts"]["context_parallel"]["engaged"], result["verdicts"]
        # each rank waited at the barrier before every timed call of both arms (two rounds: 2 bare-type calls of 3)
        for waits in result["waits_ms_per_rank"]:
            assert [len(waits["bare"]), len(waits["harness"])] == [6, 2], waits
        # the counted bound: a call's collectives, each wrapper's cost measured (above zero: it does work)
        assert result["per_call"]["collectives"] > 0 and result["per_call"]["wrapper_s"] > 0
    else:
        assert result["per_call"] == {"collectives": 0, "wrapper_s": 0.0}


def test_the_evidence_comes_back_after_a_bare_call():
    """Suspending the evidence for a bare call must not leave it off: the cell's next harness call counts."""
    script = _script()
    spec = script.baseline_cell("tiny-flux", "cpu", steps=1, size=32, images=1)
    target = make_target(spec.model)
    target.load({})
    from accel.features import validate_variant_features

    configs = validate_variant_features(MECHANISM_FEATURES["cache-work-counters"], "test")
    with apply(target.pipeline, *configs.values(), num_inference_steps=1, device="cpu", windows_on_calls=False) as on:
        hooks = script.installed_hooks(target.pipeline)
        work_hooks = len(on.handles[0].work.hooks)  # the cache's counters inside the blocks
        assert work_hooks > 0
        with script.evidence_suspended(on):
            assert script.installed_hooks(target.pipeline) <= hooks - work_hooks
        assert script.installed_hooks(target.pipeline) == hooks


def test_the_control_pair_takes_exactly_the_positions_of_the_mechanisms_pair():
    """ABBA within each pair, the pairs swapping places every two rounds: over four rounds every arm takes every
    position once, and the control's (first, second) positions are the mechanism's, round for round shifted."""
    script = _script()
    orders = [script.round_order(index) for index in range(8)]
    assert all(sorted(order) == sorted(script.ARMS) for order in orders)
    for first in (0, 4):
        block = orders[first : first + 4]
        for arm in script.ARMS:
            assert sorted(order.index(arm) for order in block) == [0, 1, 2, 3], (arm, block)
        places = {
            pair: sorted((order.index(pair[0]), order.index(pair[1])) for order in block) for pair in script.PAIRS
        }
        assert places[script.PAIRS[0]] == places[script.PAIRS[1]], places
    assert [order.index("bare") < order.index("harness") for order in orders[:4]] == [True, False, True, False]


def test_the_corrected_ratio_divides_out_the_control_of_the_same_round():
    script = _script()
    samples = {"bare": [1.0, 2.0], "harness": [1.1, 2.0], "control-a": [1.0, 1.0], "control-b": [1.1, 0.5]}
    ratios = script.paired_ratios(samples)
    assert ratios["harness/bare"] == pytest.approx([1.1, 1.0])
    assert ratios["control"] == pytest.approx([1.1, 0.5])
    assert ratios["corrected"] == pytest.approx([1.0, 2.0])


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0.99, 1.02, "PASS"), (0.99, 1.0201, "INCONCLUSIVE"), (1.0201, 1.05, "FAIL"), (1.02, 1.03, "INCONCLUSIVE")],
)
def test_an_interval_passes_only_within_the_limit_and_straddling_is_inconclusive(low, high, expected):
    script = _script()
    assert script.interval_verdict({"median": (low + high) / 2, "low": low, "high": high}) == expected


def test_a_median_under_the_limit_with_an_interval_over_it_is_inconclusive_never_a_pass():
    """The hostile review's case: every median under 1.02, every interval reaching above it."""
    script = _script()
    for median, low, high in ((1.014, 1.006, 1.028), (1.012, 1.009, 1.029), (1.014, 1.007, 1.023)):
        interval = {"median": median, "low": low, "high": high}
        assert script.mechanism_verdict(interval, interval) == "INCONCLUSIVE"
    within = {"median": 1.004, "low": 0.996, "high": 1.012}
    over = {"median": 1.06, "low": 1.04, "high": 1.08}
    straddling = {"median": 1.01, "low": 0.99, "high": 1.03}
    assert script.mechanism_verdict(within, within) == "PASS"
    assert script.mechanism_verdict(within, straddling) == "INCONCLUSIVE"  # a pass needs both intervals
    assert script.mechanism_verdict(straddling, within) == "INCONCLUSIVE"
    assert script.mechanism_verdict(over, over) == "FAIL"
    assert script.mechanism_verdict(over, straddling) == "INCONCLUSIVE"  # the control may explain it
    assert script.mechanism_verdict(over, within) == "INCONCLUSIVE"


def test_an_interval_of_too_few_rounds_decides_nothing():
    """At the fewest rounds the parser takes (4), the median's interval is min to max and covers it with 87.5%,
    not 95%: four rounds within the limit are INCONCLUSIVE, not a pass (nor four above it a fail)."""
    script = _script()
    few = script._interval([1.0, 1.01, 1.02, 1.0])
    assert few["coverage"] < script.CONFIDENCE and few["high"] <= script.LIMIT
    assert script.mechanism_verdict(few, few) == "INCONCLUSIVE"
    assert script.mechanism_verdict(*[script._interval([1.5, 1.6, 1.7, 1.5])] * 2) == "INCONCLUSIVE"
    enough = script._interval([1.0, 1.01, 1.02, 1.0] * 2)
    assert enough["coverage"] >= script.CONFIDENCE and script.mechanism_verdict(enough, enough) == "PASS"


def test_the_exit_status_says_error_fail_or_inconclusive():
    script = _script()
    assert script.exit_code(["PASS", "PASS"]) == 0
    assert script.exit_code(["PASS", "INCONCLUSIVE"]) == 3
    assert script.exit_code(["INCONCLUSIVE", "FAIL", "PASS"]) == 1
    assert script.exit_code(["FAIL", "ERROR"]) == 2


def test_a_mechanism_variant_that_did_not_engage_is_an_error_not_a_row():
    script = _script()
    idle = {"first_block_cache": {"engaged": False, "summary": "0 cached", "no_effect": None}}
    error = script.engagement_error("cache-work-counters", idle)
    assert error is not None and "did not engage" in error and "0 cached" in error
    no_effect = {"cache_dit": {"engaged": True, "summary": "engaged, no effect", "no_effect": "skipped no work"}}
    assert script.engagement_error("cache-work-counters", no_effect) is not None  # a cache must act
    # the attention tallies run on the backend already in use ("no effect" on the output): exercised all the same
    same = {"attention_backend": {"engaged": True, "summary": "native dispatched", "no_effect": "already used"}}
    assert script.engagement_error("attention-tallies", same) is None
    assert script.engagement_error("compile-counters", {}) is not None  # nothing applied
    acting = {"first_block_cache": {"engaged": True, "summary": "skipped 43%", "no_effect": None}}
    assert script.engagement_error("cache-work-counters", acting) is None


def test_the_cache_variant_skips_block_work_on_the_default_workload():
    """The cache work counters' variant must time the skip path: on the default workload (mini-flux, 20 steps)
    its FirstBlockCache skips work (threshold 0.05 skipped none)."""
    script = _script()
    spec = script.baseline_cell("mini-flux", "cpu", steps=20, size=64, images=2)
    result = script.run_mechanism(spec, script.MECHANISMS["cache-work-counters"], rounds=1, warmup=1)
    verdict = result["verdicts"]["first_block_cache"]
    assert verdict["engaged"] and "skipped" in verdict["summary"], verdict
    assert script.engagement_error("cache-work-counters", result["verdicts"]) is None


def test_a_timed_call_of_several_ranks_starts_at_a_barrier_outside_its_clock(monkeypatch):
    """Rank 0's clock must not run while it waits for another rank still in the harness's meters: the barrier
    (here a stand-in that takes 0.2 s, as a late rank would) comes before the clock starts, once per timed call."""
    import contextlib
    import time

    import torch.distributed as dist

    from accel.sweep import timed

    barriers: list[float] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: (barriers.append(time.perf_counter()), time.sleep(0.2)))

    class Target:
        device = "cpu"

        def generate(self, request):
            return []

    class Applied:
        window = staticmethod(contextlib.nullcontext)

    sink: list[float] = []
    timed._generate(Target(), Applied(), None, sink)
    timed._generate(Target(), Applied(), None)  # an untimed call waits for nothing
    assert len(barriers) == 1 and len(sink) == 1
    assert sink[0] < 0.1, f"the barrier's wait was timed: {sink[0]:.3f} s"
