"""torch.compile: regional and full, evidence from dynamo, removal, unsupported reasons."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, generate, loaded

from accel import apply
from accel.features import FEATURES, CompileConfig


@pytest.mark.parametrize("granularity", ["regional", "full"])
def test_compile_engages_and_remove_restores(granularity):
    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    # aot_eager traces and runs the same dynamo/AOT graphs as inductor without generating C++: fast.
    with apply(target.pipeline, CompileConfig(granularity=granularity, backend="aot_eager")) as applied:
        generate(target)  # the cold call compiles; the timed runs after it must not
        applied.reset_evidence()
        compiled = generate(target)[0]
        verdict = applied.verdicts()["compile"]
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["unique_graphs"] >= 1 and verdict.evidence["compiled_calls_per_run"][0] > 0
    expected_modules = 4 if granularity == "regional" else 1  # 2 double + 2 single blocks, or the transformer
    assert verdict.evidence["compiled_modules"] == expected_modules
    assert np.abs(compiled - baseline).max() < 1e-4
    assert np.array_equal(generate(target)[0], baseline)


def test_the_first_call_since_apply_compiles_and_a_recompile_after_it_does_not_engage():
    """The README's use: apply, call, read the evidence. The first call compiles (that is engagement, and the
    summary says its time includes compiling); a recompile after a warm-up was set aside never is."""
    target = loaded("tiny-flux")
    with apply(target.pipeline, CompileConfig(granularity="regional", backend="aot_eager")) as applied:
        generate(target)
        first = applied.verdicts()["compile"]
        generate(target)
        two = applied.verdicts()["compile"]
        applied.reset_evidence()  # a warm-up set aside: from here a conversion is a recompile
        generate(target, height=32, width=32)
        recompiled = applied.verdicts()["compile"]
    assert first.engaged and first.evidence["compiled_in_first_call"], first.summary
    assert "compiled during the first call (no call after it): its time includes compiling" in first.summary
    assert two.engaged and "no recompile in the 1 call(s) after it" in two.summary, two.summary
    assert not recompiled.engaged and recompiled.summary.startswith("recompiled during timed run(s) [1]")


@pytest.mark.slow
def test_inductor_regional_compile_keeps_parity():
    from accel.measure.parity import compare

    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    with apply(target.pipeline, CompileConfig(granularity="regional")) as applied:
        generate(target)  # the cold call compiles
        applied.reset_evidence()
        compiled = generate(target)[0]
        verdict = applied.verdicts()["compile"]
    parity = compare(compiled, baseline)
    assert verdict.engaged and parity.ssim >= 0.999 and parity.psnr >= 40


def test_compile_options_that_cannot_run_here_say_why():
    target = loaded("tiny-flux")
    feature = FEATURES["compile"]
    support = feature.check(target.pipeline, "cpu", feature.parse_options({"mode": "reduce-overhead"}))
    assert not support.supported and "CUDA graphs" in support.reason
    target.pipeline.transformer._repeated_blocks = []
    support = feature.check(target.pipeline, "cpu", feature.parse_options("regional"))
    assert not support.supported and "has no _repeated_blocks" in support.reason


def _apply_with_compile(target, name, raw):
    """``name`` and regional compile through ``apply`` (compile goes last, by stage), with dynamo's cheapest
    backend: tracing and guards are dynamo's (where recompiles come from) without generating any kernel."""
    config = FEATURES[name].parse_options(raw)
    return apply(target.pipeline, config, CompileConfig(granularity="regional", backend="eager"), device="cpu")


def _timed_runs(target, applied, warmup=0, runs=2):
    """One cold call and ``warmup`` calls, then ``runs`` calls whose evidence counts (as a cell does)."""
    from accel.features.compile import _dynamo_counters

    for _ in range(1 + warmup):
        generate(target)
    applied.reset_evidence()
    graphs = _dynamo_counters()["unique_graphs"]
    for _ in range(runs):
        generate(target)
    return graphs, _dynamo_counters()["unique_graphs"]


def test_compile_with_attention_backend_stays_compiled_and_counts_dispatches():
    """The dispatch counters used to be traced: a guard on the evidence list recompiled every call."""
    target = loaded("tiny-flux")
    with _apply_with_compile(target, "attention_backend", "_native_math") as applied:
        graphs_before, graphs_after = _timed_runs(target, applied)
        verdicts = applied.verdicts()
        attention_verdict, compile_verdict = verdicts["attention_backend"], verdicts["compile"]
        assert graphs_after == graphs_before  # no recompile during the timed runs
        assert compile_verdict.engaged, compile_verdict.summary
        assert compile_verdict.evidence["new_graphs_per_run"] == [0, 0]
        # 2 steps x 4 blocks, every attention inside a compiled block: counted at run time, once each.
        assert attention_verdict.evidence["dispatched_per_run"] == [{"_native_math": 8}, {"_native_math": 8}]
        assert attention_verdict.engaged, attention_verdict.summary

        # A run at another resolution fails dynamo's shape guards: compile names the run that recompiled,
        # also when it comes after the timed runs (a later timing phase).
        generate(target, height=32, width=32)
        verdict = applied.verdicts()["compile"]
        assert not verdict.engaged
        assert verdict.summary.startswith("recompiled during timed run(s) [3]")
        assert verdict.evidence["new_graphs_per_run"][:2] == [0, 0] and verdict.evidence["new_graphs_per_run"][2] > 0


def test_compile_with_diffusers_cache_hook_counts_skipped_work_inside_compiled_blocks():
    """The work counters count at run time inside compiled blocks, as without compile, and never recompile."""
    target = loaded("tiny-flux")
    cache = FEATURES["first_block_cache"]
    eager_handle = cache.apply(target.pipeline, cache.parse_options(0.5), CONTEXT)
    generate(target, [eager_handle])
    eager = cache.verify(eager_handle).evidence
    eager_handle.remove()

    with _apply_with_compile(target, "first_block_cache", 0.5) as applied:
        # One warm-up call, as the profiles have: the hook's second call still takes new graphs (its state
        # differs from the first call's); without it compile fails the cell with "recompiled".
        graphs_before, graphs_after = _timed_runs(target, applied, warmup=1)
        verdicts = applied.verdicts()
        cached, compiled = verdicts["first_block_cache"], verdicts["compile"]
        assert graphs_after == graphs_before
        assert compiled.engaged, compiled.summary
        assert cached.engaged, cached.summary
        for key in ("denoiser_calls_per_run", "work_computed_per_run"):
            assert cached.evidence[key] == eager[key] * 2, key
        # 2 calls x 10 units (attn, ff, ff_context of 2 double blocks; attn, proj_mlp of 2 single blocks)
        assert 0 < cached.evidence["work_computed_per_run"][0]["transformer"] < 2 * 10  # some skipped, some ran


def test_the_sweeps_own_cell_path_leaves_a_fully_compiled_denoiser_as_compiled():
    """The stage pass times the denoiser of a cell whose transformer was compiled whole: its timers must sit
    outside the compiled frame (a hook inside it changes what dynamo guarded, and the pass recompiled: compile-full
    was failed on every family by the harness's own instrument). The cell runs as a sweep runs it, inline."""
    import tempfile
    from pathlib import Path

    from accel.profile import parse_profile
    from accel.sweep.cell import run_cell
    from accel.sweep.runner import plan

    profile = parse_profile(
        {
            "name": "t",
            "models": [{"name": "tiny-flux", "source": "tiny-flux"}],
            "workload": {"prompts": ["a red fox"], "seeds": [0], "steps": 2, "height": 32, "width": 32},
            "variants": [{"name": "full", "features": {"compile": {"granularity": "full", "backend": "eager"}}}],
            "measure": {"warmup": 1, "repeats": 2, "executor": "inline", "timing": "sequential", "noise_floor": False},
        }
    )
    spec = next(cell for cell in plan(profile, Path(tempfile.mkdtemp())) if cell.variant == "full")
    record = run_cell(spec)
    evidence = record["evidence"]["compile"]
    assert record["status"] == "ok", record.get("error")
    # Three timed runs: the two headline passes and the stage pass between them; none converted a frame.
    assert evidence["frames_converted_per_run"] == [0, 0, 0], evidence
    assert evidence["engaged"] and "no recompile during 3 timed runs" in evidence["summary"]
    assert evidence["graph_breaks"] == 0  # the stage timers were not traced into the graph either
    # The stage pass still saw the denoiser: one call per step, timed from the compiled entry.
    assert record["timing"]["stage_pass"] == "between the headline passes"
    assert record["denoiser_calls_per_call"] == 2, record["stages"]
