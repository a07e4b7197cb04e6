"""Each judgement the harness makes, on hand-built facts: fast tests that a broken judgement fails.

These are the tests the curated mutations (``tests/mutations/mutations.yaml``, ``make mutation``) name: every
feature family's evidence check on a stand-in handle (no pipeline), the outputs-stability check, the ABBA
order of the interleaved pairs, the reference-leak check and the noise band the speedup claim uses.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import numpy as np
import pytest

from accel.features import FEATURES


def _handle(runs: list[dict[str, Any]], **attributes: Any) -> Any:
    return types.SimpleNamespace(runs=runs, calls_before_window=1, **attributes)


def _verify(name: str, handle: Any) -> Any:
    return FEATURES[name].verify(handle)


# --- attention ----------------------------------------------------------------------------------------------


def test_attention_needs_the_wanted_backend_alone_on_every_run():
    def verdict(per_run):
        return _verify(
            "attention_backend",
            _handle([{"dispatched": d} for d in per_run], wanted="_native_math", already_in_use=False),
        )

    assert verdict([{"_native_math": 4}, {"_native_math": 4}]).engaged
    assert not verdict([{"_native_math": 4}, {"native": 4}]).engaged  # another backend on one run
    assert not verdict([{"_native_math": 4, "native": 1}]).engaged  # partly another backend
    assert not verdict([{"_native_math": 4}, {}]).engaged  # a run that dispatched nothing
    assert not verdict([]).engaged


# --- compile --------------------------------------------------------------------------------------------------


def _compile_handle(runs, **delta):
    counters = {"unique_graphs": 2, "graph_breaks": 0, "frames_failed": 0, **delta}
    # One denoiser, called on every run it compiled: nothing ran untouched (tests/test_every_denoiser.py has both).
    return _handle(
        runs, modules=[object()], modules_by_denoiser={"transformer": [object()]}, untouched=dict,
        dynamo_delta=lambda: counters, eager_reasons=lambda: ["Data dependent operator"], parity_note=None,
    )  # fmt: skip


def test_compile_fails_on_an_eager_fallback_a_recompile_or_no_compiled_call():
    steady = [{"compiled_calls": 4, "frames_converted": 0, "new_graphs": 0}] * 2
    assert _verify("compile", _compile_handle(steady)).engaged
    given_up_in_a_run = [steady[0], {**steady[1], "frames_failed": 1}]
    fallback = _verify("compile", _compile_handle(given_up_in_a_run, frames_failed=1))
    assert not fallback.engaged and "during the timed runs" in fallback.summary and "ran eagerly" in fallback.summary
    # Given up once, at the first trace (before the timed runs): compiled otherwise, said as a constraint.
    at_first_trace = _verify("compile", _compile_handle(steady, frames_failed=1))
    assert at_first_trace.engaged and "1 frame(s) dynamo could not convert run eagerly" in at_first_trace.summary
    assert at_first_trace.evidence["eager_frames"] == 1
    recompiled = [steady[0], {"compiled_calls": 4, "frames_converted": 1, "new_graphs": 1}]
    assert not _verify("compile", _compile_handle(recompiled)).engaged
    assert not _verify("compile", _compile_handle([{"compiled_calls": 4}, {"compiled_calls": 0}])).engaged
    assert not _verify("compile", _compile_handle(steady, unique_graphs=0)).engaged


def test_compile_verdicts_say_what_ran_and_keep_the_evidence():
    from accel.features.base import Verdict

    counters = {"unique_graphs": 2, "graph_breaks": 0, "frames_failed": 0}

    def verdict(runs, before=1, **delta):
        handle = _compile_handle(runs, **delta)
        handle.calls_before_window = before
        return _verify("compile", handle)

    def evidence(calls, converted, graphs=None, **extra):
        graphs = graphs or [0] * len(calls)
        per_run = [{}] * len(calls)  # the fake handle's runs count no call per denoiser
        return {"compiled_modules": 1, "compiled_modules_by_denoiser": {"transformer": 1},
                "compiled_calls_per_run": calls, "compiled_calls_by_denoiser_per_run": per_run,
                "denoiser_calls_per_run": per_run, "new_graphs_per_run": graphs,
                "frames_converted_per_run": converted, **counters, **extra}  # fmt: skip

    steady = [{"compiled_calls": 4, "frames_converted": 0, "new_graphs": 0}] * 2
    ok = Verdict(
        True, "1 compiled modules, 2 graphs, 0 graph breaks, no recompile during 2 timed runs", evidence([4, 4], [0, 0])
    )
    assert verdict(steady) == ok
    assert verdict(steady, before=0) == ok  # no warm-up, but nothing compiled in the window either
    # A run's missing counters count 0: no compiled call, no frame converted.
    assert verdict([{"frames_converted": 0}]) == Verdict(
        False, "compile requested but no compiled graph ran during the timed runs", evidence([0], [0])
    )
    no_counter = verdict([{"compiled_calls": 4}])
    assert no_counter.engaged is True and no_counter.evidence["frames_converted_per_run"] == [0]
    first = [{"compiled_calls": 4, "frames_converted": 1, "new_graphs": 1}, steady[0]]
    why = ": its time includes compiling; time the calls after a warm-up (applied.reset_evidence())"
    assert verdict(first, before=0) == Verdict(
        True,
        f"1 compiled modules, 2 graphs, compiled during the first call (no recompile in the 1 call(s) after it){why}",
        evidence([4, 4], [1, 0], [1, 0], compiled_in_first_call=True),
    )
    only = verdict(first[:1], before=0)
    assert only.engaged is True and "compiled during the first call (no call after it)" in only.summary
    # The same first-call compile after a warm-up, or one followed by another, is a recompile in the window.
    assert verdict(first, before=1) == Verdict(
        False,
        "recompiled during timed run(s) [1]: dynamo converted 1 frame(s), 1 new graph(s) (guards failed; the times "
        "include compiling)",
        evidence([4, 4], [1, 0], [1, 0]),
    )
    again = verdict([first[0], first[0]], before=0)
    assert again.engaged is False and again.summary.startswith("recompiled during timed run(s) [1, 2]:")
    assert verdict([steady[0], {**steady[1], "frames_failed": 2}], frames_failed=2) == Verdict(
        False,
        "dynamo failed to convert 2 frame(s) during the timed runs (recompile limit or unsupported code): they ran "
        "eagerly",
        {**evidence([4, 4], [0, 0]), "frames_failed": 2, "frames_failed_per_run": [0, 2]},
    )


def test_compile_a_denoiser_that_ran_without_its_compiled_code_is_partial_with_its_calls():
    from accel.features.base import Verdict
    from accel.features.compile import _CompileHandle

    counters = {"unique_graphs": 2, "graph_breaks": 0, "frames_failed": 0}

    def verdict(runs, by_denoiser):
        handle = _handle(
            runs, modules=[m for group in by_denoiser.values() for m in group], modules_by_denoiser=by_denoiser,
            dynamo_delta=lambda: counters, parity_note=None,
        )  # fmt: skip
        handle.untouched = lambda: _CompileHandle.untouched(handle)  # the handle's own count, over these runs
        return _verify("compile", handle)

    def run(compiled, denoiser_calls=None):
        steady = {"compiled_calls": sum(compiled.values()), "frames_converted": 0, "new_graphs": 0}
        calls = {} if denoiser_calls is None else {"denoiser_calls": denoiser_calls}
        return {**steady, "compiled_calls_by_denoiser": compiled, **calls}

    # Wan 2.2's two denoisers: transformer_2 ran its 3 calls eagerly on the first run, its 1 call through 2 compiled
    # blocks on the second and was not called on the third; a run without a denoiser's calls counts 0 of them.
    wan = {"transformer": [object(), object()], "transformer_2": [object()]}
    runs = [
        run({"transformer": 4}, {"transformer": 2, "transformer_2": 3}),
        run({"transformer": 4, "transformer_2": 2}, {"transformer": 2, "transformer_2": 1}),
        run({"transformer": 4}, {"transformer": 2}),
        run({"transformer": 4}),
    ]
    evidence = {
        "compiled_modules": 3, "compiled_modules_by_denoiser": {"transformer": 2, "transformer_2": 1},
        "compiled_calls_per_run": [4, 6, 4, 4],
        "compiled_calls_by_denoiser_per_run": [r["compiled_calls_by_denoiser"] for r in runs],
        "denoiser_calls_per_run": [r.get("denoiser_calls", {}) for r in runs],
        "new_graphs_per_run": [0, 0, 0, 0], "frames_converted_per_run": [0, 0, 0, 0], **counters,
    }  # fmt: skip
    assert verdict(runs, wan) == Verdict(
        False,
        "partial: a denoiser ran without its compiled code (transformer_2 on 3 of 4 calls); compiled: transformer",
        {**evidence, "partial": True, "untouched_denoiser_calls": {"transformer_2": 3}},
    )
    # Two of three denoisers untouched, each named with its calls summed over the runs; the compiled one alone
    # listed as compiled.
    three = {"transformer": [object()], "transformer_2": [object()], "unet": [object()]}
    runs = [
        run({"transformer": 1}, {"transformer": 1, "transformer_2": 2, "unet": 5}),
        run({"transformer": 1, "unet": 1}, {"transformer": 1, "transformer_2": 1, "unet": 1}),
    ]
    partial = verdict(runs, three)
    assert partial.engaged is False
    assert partial.summary == (
        "partial: a denoiser ran without its compiled code (transformer_2 on 3 of 3 calls, unet on 5 of 6 calls); "
        "compiled: transformer"
    )
    assert partial.evidence["untouched_denoiser_calls"] == {"transformer_2": 3, "unet": 5}  # summed over the runs
    runs = [run({"transformer": 1, "unet": 1}, {"transformer": 1, "transformer_2": 2, "unet": 1})]
    assert verdict(runs, three).summary.endswith("(transformer_2 on 2 of 2 calls); compiled: transformer, unet")
    # A denoiser whose every call ran compiled code, or that was not called at all, is not partial; a run
    # without compiled calls per denoiser counts none (no compiled graph ran at all).
    eager = verdict([{"denoiser_calls": {"transformer": 2}}], wan)
    assert eager.summary == "compile requested but no compiled graph ran during the timed runs"
    assert verdict([run({"transformer": 4}, {"transformer": 2, "transformer_2": 0})], wan).engaged is True


# --- caches: cache-dit, TeaCache, diffusers hooks ------------------------------------------------------------------


def test_cached_steps_verdict_gives_the_range_per_run_and_keeps_the_evidence():
    from accel.features.base import Verdict
    from accel.features.cache import cached_steps_verdict

    evidence = {"cached_steps_per_run": [2, 3]}
    assert cached_steps_verdict([2, 3], evidence, " (x)") == Verdict(True, "2-3 cached steps per run (x)", evidence)
    assert cached_steps_verdict([2], evidence).summary == "2-2 cached steps per run"
    assert cached_steps_verdict([0, 2, 0], evidence) == Verdict(
        False, "cached 0-2 steps per run: none on 2 of 3 runs (engaged on some runs only)", evidence
    )
    assert cached_steps_verdict([0, 0], evidence) == Verdict(
        False, "enabled but no step cached on any of 2 runs", evidence
    )


def _work(calls, units, component="transformer"):
    """One run's work counts of one denoiser: its calls, and each unit's calls."""
    return {component: {"calls": calls, "units": {f"blocks.{i}.attn": n for i, n in enumerate(units)}}}


def test_skipped_work_verdict_counts_work_per_denoiser_and_keeps_the_evidence():
    from accel.features.base import Verdict
    from accel.features.cache import skipped_work_verdict

    def verdict(*works, cached=None):
        return skipped_work_verdict([{"work": w} for w in works], "mag_cache", cached=cached)

    # 3 calls x 2 units, 4 computed: a third skipped (rounded to 4 places); a unit never called is not counted.
    engaged = verdict(_work(3, [3, 1, 0]), _work(2, [2, 2, 0]))
    assert not engaged.engaged and "some runs only: none on 1 of 2 runs" in engaged.summary
    assert "any run" not in engaged.summary  # one denoiser: the runs say it all
    # Two experts, one skipping on one run of two, the other never: both facts are said (wave 14).
    two = verdict(
        {**_work(3, [3, 1]), **_work(3, [3, 3], "transformer_2")},
        {**_work(3, [3, 3]), **_work(3, [3, 3], "transformer_2")},
    )
    assert not two.engaged and two.summary == (
        "skipped work on some runs only: none on 1 of 2 runs; transformer_2 skipped no work on any run "
        "(of ['transformer', 'transformer_2'])"
    )
    engaged = verdict(_work(3, [3, 1, 0]), _work(2, [2, 1, 0]))
    assert engaged == Verdict(
        True,
        "skipped 25%-33% of block work per run",
        {
            "work_units": {"transformer": 3},
            "denoiser_calls_per_run": [{"transformer": 3}, {"transformer": 2}],
            "work_computed_per_run": [{"transformer": 4}, {"transformer": 3}],
            "skipped_work_per_run": [{"transformer": 0.3333}, {"transformer": 0.25}],
        },
    )
    # A unit called twice per forward counts as computed once, not as work of another unit: the second unit's
    # skipped computations stay skipped.
    assert not verdict(_work(2, [4, 2])).engaged
    twice = verdict(_work(2, [4, 0]), _work(2, [4, 1]))
    assert twice.engaged and twice.evidence["skipped_work_per_run"] == [{"transformer": 0.5}, {"transformer": 0.25}]
    assert verdict(_work(2, [2, 2])).summary == "mag_cache enabled but a run computed every step (0 cached)"
    # A unit skipped on every timed call still counts when an earlier call (warm-up) computed it: seen on the native
    # FLUX pipeline, whose FirstBlockCache skipped the tail blocks on every timed call.
    warm = _work(2, [2, 0])
    warm["transformer"]["used"] = ["blocks.0.attn", "blocks.1.attn"]
    assert verdict(warm).evidence["skipped_work_per_run"] == [{"transformer": 0.5}]
    nothing = verdict(_work(0, []))
    assert not nothing.engaged and nothing.summary.startswith("harness: mag_cache: no attention or feed-forward")


def test_library_reported_cached_steps_that_skipped_no_work_are_engaged_without_effect():
    from accel.features.cache import skipped_work_verdict

    runs = [{"work": _work(4, [4, 4])}, {"work": _work(4, [4, 4])}]
    verdict = skipped_work_verdict(runs, "cache_dit", cached=[2, 3])
    assert verdict.engaged and verdict.summary.startswith("engaged, no effect: 2-3 cached steps per run")
    assert "skipped no work" in verdict.evidence["no_effect"]
    skipped = skipped_work_verdict([{"work": _work(4, [2, 4])}] * 2, "cache_dit", cached=[2, 2])
    assert skipped.engaged and "no_effect" not in skipped.evidence
    assert not skipped_work_verdict(runs, "cache_dit", cached=[0, 0]).engaged  # no cached step: not engaged


def test_a_denoiser_that_skipped_nothing_makes_the_verdict_partial():
    from accel.features.cache import skipped_work_verdict

    both = {**_work(4, [2, 2]), **_work(4, [4, 4], "transformer_2")}
    verdict = skipped_work_verdict([{"work": both}], "first_block_cache")
    assert not verdict.engaged and verdict.summary.startswith("partial: transformer_2 called and skipped no work")
    idle = {**_work(4, [2, 2]), **_work(0, [0, 0], "transformer_2")}  # not called: nothing to skip there
    assert skipped_work_verdict([{"work": idle}], "first_block_cache").engaged


def test_cache_dit_needs_a_cached_step_on_every_run():
    def verdict(*runs):
        return _verify("cache_dit", _handle([{"cached_steps": [steps], "work": _work(4, [2])} for steps in runs]))

    assert verdict([2, 3], [2]).engaged
    partial = verdict([2, 3], [])
    assert not partial.engaged and "engaged on some runs only" in partial.summary
    assert not verdict([], []).engaged


def test_tea_cache_needs_a_cached_step_on_every_run():
    def verdict(*runs):
        handle = _handle(
            [{"cached_steps": steps, "work": _work(4, [2])} for steps in runs],
            coefficients_source={"transformer": "x"},
            coefficients_files={},
        )
        return _verify("tea_cache", handle)

    assert verdict([1, 2], [3]).engaged
    assert not verdict([1, 2], []).engaged
    assert not verdict([], []).engaged


def test_diffusers_caches_need_skipped_work_on_every_run():
    def verdict(name, computed, units=4):
        runs = [{"work": _work(2, [min(2, max(0, n - 2 * i)) for i in range(units)])} for n in computed]
        return _verify(name, _handle(runs, hooked=["a"]))

    for name in ("first_block_cache", "mag_cache", "taylorseer_cache"):
        assert verdict(name, [4, 5]).engaged, name  # 8 unit computations per full run
        assert not verdict(name, [4, 8]).engaged, name  # the second run computed everything
        assert not verdict(name, [0, 0]).engaged, name  # nothing called: nothing to observe


# --- quantization -----------------------------------------------------------------------------------------------


def test_quantization_needs_its_share_of_quantized_layers_on_every_run():
    import torch

    census = {"transformer": {"eligible_linears": 10, "skipped": {}, "weight_bytes_after": 0}}

    def verdict(per_run, min_share=1.0):
        runs = [{"quantized": {"transformer": n}} for n in per_run]
        pipeline = types.SimpleNamespace(transformer=torch.nn.Linear(2, 2))
        handle = _handle(runs, census=census, pipeline=pipeline, min_share=min_share)
        return _verify("quantization", handle)

    assert verdict([10, 10]).engaged
    partial = verdict([10, 9])
    assert not partial.engaged and "partial quantization" in partial.summary
    assert verdict([10, 9], min_share=0.8).engaged
    assert not verdict([10, 0], min_share=0.0).engaged  # a run on unquantized weights
    assert not verdict([]).engaged
    # A component that is no denoiser (a text encoder): a run on its unquantized weights is not engaged either.
    encoder = {"text_encoder": census["transformer"]}
    runs = [{"quantized": {"text_encoder": n}} for n in (10, 0)]
    pipeline = types.SimpleNamespace(text_encoder=torch.nn.Linear(2, 2))
    handle = _handle(runs, census=encoder, pipeline=pipeline, min_share=0.0)
    assert not _verify("quantization", handle).engaged


def test_quantization_below_full_share_is_partial_when_a_denoiser_has_none_quantized():
    """min_quantized_share 0.5 allows torchao's skips, not transformer_2 running on its float weights."""
    import torch

    entry = {"eligible_linears": 10, "skipped": {}, "weight_bytes_after": 0}
    census = {"transformer": entry, "transformer_2": dict(entry)}
    pipeline = types.SimpleNamespace(transformer=torch.nn.Linear(2, 2), transformer_2=torch.nn.Linear(2, 2))

    def verdict(second):
        runs = [{"quantized": {"transformer": 10, "transformer_2": second}}]
        return _verify("quantization", _handle(runs, census=census, pipeline=pipeline, min_share=0.5))

    assert verdict(8).engaged
    partial = verdict(0)
    assert not partial.engaged and partial.evidence["untouched_denoisers"] == ["transformer_2"]
    assert partial.summary.startswith("partial: a denoiser ran with none of its linear layers quantized (transformer_")


# --- offload ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["enable_cpu_offload", "group_offload", "enable_layerwise_offload"])
def test_offload_needs_an_onload_on_every_run(name):
    def verdict(onloads, hooks=3):
        return _verify(name, _handle([{"onloads": n} for n in onloads], hooks_installed=hooks))

    assert verdict([3, 3]).engaged
    assert not verdict([3, 0]).engaged
    assert not verdict([3, 3], hooks=0).engaged


@pytest.mark.parametrize("name", ["enable_cpu_offload", "group_offload"])
def test_offload_is_partial_when_a_called_denoiser_onloaded_nothing_of_its_own(name):
    """The other components' onloads do not make up for a denoiser that ran without its hooks (Wan 2.2)."""

    def run(second_onloads):
        return {
            "onloads": 5 + second_onloads,
            "onloads_by_component": {"text_encoder": 1, "transformer": 4, "transformer_2": second_onloads},
            "denoiser_calls": {"transformer": 2, "transformer_2": 2},
        }

    assert _verify(name, _handle([run(2), run(2)], hooks_installed=4)).engaged
    partial = _verify(name, _handle([run(2), run(0)], hooks_installed=4))
    assert not partial.engaged and partial.evidence["untouched_denoiser_calls"] == {"transformer_2": 2}
    assert partial.summary.startswith("partial: a denoiser ran without its offload hooks (transformer_2 on 2 of 4")


# --- VAE ------------------------------------------------------------------------------------------------------------


def test_vae_tiling_and_slicing_need_their_decode_on_every_run():
    geometry = "tiles of 32 px every 24 px"  # what the handle says of diffusers' tiles (accel.features.vae)
    tiling = _verify("vae_use_tiling", _handle([{"tiled_decode": 1}, {"tiled_decode": 0}], geometry=geometry))
    assert not tiling.engaged
    assert _verify("vae_use_tiling", _handle([{"tiled_decode": 1}, {"tiled_decode": 2}], geometry=geometry)).engaged
    # Slicing: more slices than decodes (batch 2 decoded one sample at a time) on every run.
    assert _verify("vae_use_slicing", _handle([{"_decode": 2, "decode": 1}] * 2)).engaged
    assert not _verify("vae_use_slicing", _handle([{"_decode": 2, "decode": 1}, {"_decode": 1, "decode": 1}])).engaged
    assert not _verify("vae_use_slicing", _handle([{"_decode": 0, "decode": 0}])).engaged


# --- outputs stability, ABBA, reference leak, noise band --------------------------------------------------------------


def test_outputs_are_stable_only_when_every_pass_equals_the_first():
    from accel.sweep.collect import outputs_stable

    a, b = np.zeros((1, 2, 2, 3)), np.ones((1, 2, 2, 3))
    assert outputs_stable([[a, a], [a, a]])
    assert not outputs_stable([[a, a], [a, b]])  # the last pass differs
    assert not outputs_stable([[a], [b], [a]])  # a middle pass differs, first and last agree
    assert outputs_stable([[a]])


def test_interleaved_pairs_alternate_in_abba_order(monkeypatch):
    import accel.targets.build
    from accel.sweep import timed

    calls: list[str] = []

    class Fake:
        device = "cpu"

        def __init__(self, label):
            self.label = label
            self.pipeline = None

        def load(self, extra):
            return None

        def generate(self, request):
            calls.append(self.label)
            return [np.zeros((1, 2, 2, 3))]

    applied = types.SimpleNamespace(global_state_paused=contextlib.nullcontext, window=contextlib.nullcontext)
    monkeypatch.setattr(accel.targets.build, "make_target", lambda model: Fake("R"))
    measure = types.SimpleNamespace(
        pairs=4, max_pairs=4, noise_floor=True, pair_budget_s=60.0, confidence=0.95, min_effect=0.05, warmup=0
    )
    spec = types.SimpleNamespace(model=None, measure=measure, variant="v")
    paired = timed.measure_interleaved(spec, Fake("V"), applied, ["request"])
    assert calls[1:] == ["R", "V", "V", "R", "R", "V", "V", "R"]  # [0]: the reference's output, kept untimed
    assert len(paired["reference_s"]) == len(paired["variant_s"]) == 4


def test_a_noise_floor_draws_the_pairs_its_bias_check_needs(monkeypatch):
    """Claims beside a noise floor must clear the band divided by every bias its interval allows, at a fifth of
    the error rate: a floor decided at the first look (8 pairs) could never bound it, so the floor's sampling
    starts at floor_first_look (10 of at most 40). A variant's starts at measure.pairs unless a claim decided
    there could not be held beyond the floor's bias: pairs 8 of at most 60 (6 looks) start at 9; without a noise
    floor there is no such check and it starts at 8."""
    import accel.measure.speedup
    import accel.targets.build
    from accel.measure.speedup import floor_first_look
    from accel.sweep import timed

    started: dict[str, int] = {}
    current = [""]

    class Sampler(accel.measure.speedup.SequentialPairs):
        def run(self, draw, clock=None):
            started[current[0]] = self.schedule[0]
            return accel.measure.speedup.SpeedupEstimate(1.0, 0.99, 1.01, 0.99, 1, "interleaved")

    class Fake:
        device = "cpu"
        pipeline = None

        def load(self, extra):
            return None

        def generate(self, request):
            return [np.zeros((1, 2, 2, 3))]

    applied = types.SimpleNamespace(global_state_paused=contextlib.nullcontext, window=contextlib.nullcontext)
    monkeypatch.setattr(accel.targets.build, "make_target", lambda model: Fake())
    monkeypatch.setattr(accel.measure.speedup, "SequentialPairs", Sampler)

    def first_looks(max_pairs: int, noise_floor: bool = True) -> dict[str, int]:
        measure = types.SimpleNamespace(
            pairs=8, max_pairs=max_pairs, pair_budget_s=None, confidence=0.95, min_effect=0.05, warmup=0,
            noise_floor=noise_floor,
        )  # fmt: skip
        started.clear()
        for variant in ("noise-floor", "cache"):
            current[0] = variant
            timed.measure_interleaved(
                types.SimpleNamespace(model=None, measure=measure, variant=variant), Fake(), applied, ["r"]
            )
        return dict(started)

    assert first_looks(40) == {"noise-floor": floor_first_look(8, 40, 0.95), "cache": 8}
    assert floor_first_look(8, 40, 0.95) == 10
    assert first_looks(60) == {"noise-floor": 11, "cache": 9}
    assert first_looks(60, noise_floor=False)["cache"] == 8


def _run_with_reference(tmp_path, shift):
    from accel.results import outputs_path
    from accel.sweep.spec import REFERENCE_OUTPUT_KEY

    sample = np.full((1, 4, 4, 3), 0.5, dtype=np.float32)
    baseline = tmp_path / outputs_path("", "m", "baseline")
    baseline.parent.mkdir(parents=True, exist_ok=True)
    np.savez(baseline, s0=sample)
    variant = outputs_path("", "m", "v")
    np.savez(tmp_path / variant, s0=sample, **{REFERENCE_OUTPUT_KEY: sample + shift})
    return {"model": "m", "variant": "v", "outputs_file": str(variant)}


def test_a_reference_that_differs_from_the_baseline_is_a_leak(tmp_path):
    from accel.sweep.compare import _reference_problem

    assert _reference_problem(_run_with_reference(tmp_path, 0.0), tmp_path, ["s0"]) is None
    assert _reference_problem(_run_with_reference(tmp_path, 1 / 255), tmp_path, ["s0"]) is None  # 8-bit rounding
    leak = _reference_problem(_run_with_reference(tmp_path, 0.05), tmp_path, ["s0"])
    assert leak is not None and "reached the unaccelerated reference" in leak


def _floor(verdict: str, low: float, high: float) -> dict:
    from accel.measure.speedup import SpeedupEstimate

    estimate = SpeedupEstimate(1.0, low, high, 0.99, 20, "interleaved")
    claim = {**estimate.to_dict(), "verdict": verdict, "reason": f"interval [{low:.2f}, {high:.2f}] ..."}
    ratios = [low + (high - low) * i / 19 for i in range(20)]
    paired = {"estimate": estimate.to_dict(), "reference_s": ratios, "variant_s": [1.0] * 20}
    return {"variant": "noise-floor", "paired": paired, "speedup_ci": claim}


def _paired(low: float, high: float, n: int = 10) -> dict:
    """An interleaved comparison's record part: ``n`` ratios from ``low`` to ``high`` and their estimate."""
    from accel.measure.speedup import paired_speedup

    ratios = [low + (high - low) * i / (n - 1) for i in range(n)]
    estimate = paired_speedup(ratios, [1.0] * n, 0.95)
    return {"estimate": estimate.to_dict(), "reference_s": ratios, "variant_s": [1.0] * n}


def test_the_noise_band_is_the_threshold_and_a_noisy_floor_unverifies_claims(tmp_path):
    from accel.sweep.compare import attach_speedup

    measure = types.SimpleNamespace(min_effect=0.05, confidence=0.95)
    cases = (
        (_floor("equivalent", 0.98, 1.03), _paired(1.2, 1.4), "faster"),
        (_floor("noise", 0.8, 1.25), _paired(1.2, 1.4), "unverified"),
        # an undecided floor (it includes 1.0) keeps a claim that clears the band beyond every bias it allows
        (_floor("noise", 0.8, 1.25), _paired(1.9, 2.1), "faster"),
        (_floor("inconclusive", 1.06, 1.25), _paired(1.9, 2.1), "unverified"),  # a bias seen: no claim at all
    )
    for floor, paired, verdict in cases:
        record = _run_with_reference(tmp_path, 0.0)
        record.update(warm={"median": 0.1}, paired=paired)
        attach_speedup(record, {"warm": {"median": 0.13}}, floor, tmp_path, ["s0"], measure)
        claim = record["speedup_ci"]
        assert claim["band"] == [pytest.approx(1 / 1.05), pytest.approx(1.05)]  # never widened by the floor
        assert claim["verdict"] == verdict, claim
        if floor["speedup_ci"]["verdict"] == "noise":  # the reason says what the floor allowed
            assert "divided by every bias the noise floor allows" in claim["reason"], claim
            assert verdict == "faster" or "[0.80, 1.25]" in claim["reason"], claim
    assert "too noisy for this threshold" in claim["reason"] and "[1.06, 1.25]" in claim["reason"]
