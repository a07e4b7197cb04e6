"""Cache engagement by work counted where it is done: below every cache hook, per denoiser, and cached steps that
skipped nothing shown as "engaged, no effect" (issue 40)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from features_helpers import applied_runs, generate, loaded

from accel.features import FEATURES
from accel.features.diffusers_cache import TaylorSeerCacheConfig, taylorseer_identifiers

STEPS = 12


@pytest.mark.parametrize(
    ("name", "raw"),
    [("first_block_cache", 0.5), ("pyramid_attention_broadcast", {}), ("faster_cache", {})],
)
def test_diffusers_caches_run_on_cogvideox_and_their_skipped_work_is_counted_below_the_hooks(name, raw):
    """CogVideoX's attention does not dispatch through diffusers' registry: the harness used to refuse these caches
    there ("does not dispatch attention through diffusers") though diffusers runs them. The work is counted inside
    the blocks' attention and feed-forward submodules, where a hook that replaces a block's or an attention
    module's forward cannot make a skipped computation look done."""
    target = loaded("tiny-cogvideox")
    feature = FEATURES[name]
    assert feature.check(target.pipeline, "cpu", feature.parse_options(raw)).supported
    baseline = generate(target, steps=STEPS)[0]
    block = target.pipeline.transformer.transformer_blocks[1]
    seen = {"block": 0, "attn1": 0}
    hooks = [
        block.register_forward_pre_hook(lambda *_: seen.__setitem__("block", seen["block"] + 1)),
        block.attn1.register_forward_pre_hook(lambda *_: seen.__setitem__("attn1", seen["attn1"] + 1)),
    ]
    try:
        verdict, outputs = applied_runs(target, name, raw, runs=1, steps=STEPS)
    finally:
        for hook in hooks:
            hook.remove()
    assert verdict.engaged, verdict.summary
    calls = verdict.evidence["denoiser_calls_per_run"][0]["transformer"]
    units = verdict.evidence["work_units"]["transformer"]
    computed = verdict.evidence["work_computed_per_run"][0]["transformer"]
    assert 0 < computed < calls * units
    # What a count at the call of the module a hook replaced would have seen: every call, nothing skipped.
    hooked = "block" if name == "first_block_cache" else "attn1"
    assert seen[hooked] == calls
    assert not np.array_equal(outputs[0][0], baseline)


def test_fastercache_skipping_the_unconditional_half_counts_as_half_the_work_of_that_call():
    """FasterCache skips the unconditional half of a [uncond, cond] batch by calling the denoiser on the conditional
    half: every unit is still called once per denoiser call, so a count of calls saw nothing skipped ("0 cached")
    while the output changed. Work is counted in batch rows: a call on half the batch is half a call's work."""
    target = loaded("tiny-cogvideox")
    baseline = generate(target, steps=STEPS)[0]
    rows: list[int] = []
    block = target.pipeline.transformer.transformer_blocks[0]
    hook = block.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append((args[0] if args else kwargs["hidden_states"]).shape[0]), with_kwargs=True
    )
    raw = {"spatial_attention_timestep_skip_range": [0, 1]}  # no attention reuse: the batch skip alone
    try:
        verdict, outputs = applied_runs(target, "faster_cache", raw, runs=1, steps=STEPS)
    finally:
        hook.remove()
    full = max(rows)
    assert full == 2 and min(rows) == 1, rows  # CFG batched, and the library did skip the unconditional half
    halved = sum(1 - n / full for n in rows) / len(rows)
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["denoiser_calls_per_run"] == [{"transformer": len(rows)}]
    assert verdict.evidence["skipped_work_per_run"] == [{"transformer": round(halved, 4)}]
    assert not np.array_equal(outputs[0][0], baseline)


def test_a_call_on_a_smaller_batch_made_by_the_pipeline_is_not_work_skipped():
    """A denoiser call is measured in the rows of its latents too: where the pipeline itself calls on fewer rows
    (here the next call of two images, then one), every unit computes all of that call and nothing is skipped."""
    from accel.features.work import BlockWork, work_done

    target = loaded("tiny-flux")
    work = BlockWork({"transformer": target.pipeline.transformer}, rows=True)
    try:
        runs = []
        for images in (2, 1):
            work.begin()
            generate(target, num_images_per_prompt=images)
            runs.append(work.end())
    finally:
        work.remove()
    assert [run["transformer"]["rows"] for run in runs] == [2 * 2, 2 * 1]  # two steps each
    assert all(computed == full > 0 for run in work_done(runs) for computed, full in run.values())


def _one_block_wan():
    """tiny-wan cut to one block in its block list: Cache-DiT's Fn_compute_blocks=1 leaves nothing to cache."""
    target = loaded("tiny-wan")
    transformer = target.pipeline.transformer
    transformer.blocks = torch.nn.ModuleList(transformer.blocks[:1])
    return target


def test_a_one_block_model_gets_engaged_no_effect_from_cache_dit():
    target = _one_block_wan()
    baseline = generate(target, steps=STEPS)[0]
    raw = {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}
    verdict, outputs = applied_runs(target, "cache_dit", raw, runs=2, steps=STEPS)
    assert verdict.engaged and verdict.summary.startswith("engaged, no effect:"), verdict.summary
    assert "skipped no work" in verdict.evidence["no_effect"]
    assert all(len(run[0]) > 0 for run in verdict.evidence["cached_steps_per_run"])  # the library's own report
    assert verdict.evidence["skipped_work_per_run"] == [{"transformer": 0.0}] * 2
    assert np.array_equal(outputs[0][0], baseline)

    # The same cache on the two-block model skips work and is engaged with effect.
    full = loaded("tiny-wan")
    verdict, _ = applied_runs(full, "cache_dit", raw, runs=1, steps=STEPS)
    assert verdict.engaged and "no_effect" not in verdict.evidence, verdict.summary


@pytest.mark.parametrize(
    ("name", "raw"),
    [("first_block_cache", 0.5), ("cache_dit", {"residual_diff_threshold": 0.5, "max_warmup_steps": 2})],
)
def test_caches_reach_both_denoisers_of_wan22_with_evidence_per_denoiser(name, raw):
    target = loaded("tiny-wan22")
    feature = FEATURES[name]
    options = feature.parse_options(raw)
    assert feature.denoisers_reached(target.pipeline, options) == {"transformer", "transformer_2"}
    verdict, _ = applied_runs(target, name, raw, runs=1, steps=STEPS)
    assert verdict.engaged, verdict.summary
    (calls,) = verdict.evidence["denoiser_calls_per_run"]
    (skipped,) = verdict.evidence["skipped_work_per_run"]
    assert set(calls) == {"transformer", "transformer_2"} and all(calls.values())
    assert all(skipped[component] > 0 for component in ("transformer", "transformer_2")), skipped


def test_a_model_whose_blocks_show_no_work_to_count_is_refused_as_the_harness_gap():
    target = loaded("tiny-flux")
    transformer = target.pipeline.transformer
    transformer.transformer_blocks = torch.nn.ModuleList()
    transformer.single_transformer_blocks = torch.nn.ModuleList()
    feature = FEATURES["first_block_cache"]
    support = feature.check(target.pipeline, "cpu", feature.parse_options(0.5))
    assert not support.supported and support.reason.startswith("harness: cannot observe the work first_block_cache")


def test_taylorseer_identifiers_are_derived_from_the_module_tree():
    flux = loaded("tiny-flux").pipeline.transformer
    assert taylorseer_identifiers(flux, TaylorSeerCacheConfig()) == (
        r"transformer_blocks\.\d+\.attn",
        r"single_transformer_blocks\.\d+\.attn",
    )
    assert taylorseer_identifiers(flux, TaylorSeerCacheConfig(cache_identifiers=("x",))) == ("x",)


def test_teacache_coefficients_are_the_published_sets_with_their_source():
    """Every family's sets are data with the file they are published in; the FLUX set is what the hooks use, and
    the native port takes FLUX's."""
    import yaml

    from accel.data import data_dir
    from accel.features.teacache import COEFFICIENTS_FILE, published_sets

    data = yaml.safe_load((data_dir("feature_matrix") / COEFFICIENTS_FILE).read_text())
    sets = published_sets()
    for name, entry in data["families"].items():
        family = data["families"][entry.get("alias_of", name)]
        assert family["default"] in family["sets"], name
        for published in family["sets"].values():
            assert len(published["coefficients"]) == 5 and published["file"].startswith("TeaCache4"), name
        assert sets[name].coefficients == tuple(family["sets"][family["default"]]["coefficients"]), name
    assert {"HunyuanVideoTransformer3DModel", "WanTransformer3DModel", "LTXVideoTransformer3DModel"} <= set(sets)
    assert sets["NativeFluxTransformer"] == sets["FluxTransformer2DModel"]


@pytest.mark.parametrize("rows", [False, True], ids=["calls", "rows"])
def test_work_counters_inside_regionally_compiled_blocks_add_no_graph_and_count_every_call(rows):
    """The counted leaves sit inside the compiled blocks: their hooks are traced, bump tensor tallies at run time,
    and leave the graphs, graph breaks and converted frames as without them (no recompile for a counter)."""
    from accel.features.compile import _dynamo_counters
    from accel.features.work import BlockWork

    counts = []
    for counted in (False, True):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        target = loaded("tiny-flux")
        transformer = target.pipeline.transformer
        transformer.compile_repeated_blocks(backend="aot_eager")
        work = BlockWork({"transformer": transformer}, rows=rows) if counted else None
        generate(target, steps=2)
        before = _dynamo_counters()
        if work is not None:
            work.begin()
        generate(target, steps=2)
        counts.append((before, _dynamo_counters()))
        if work is not None:
            run = work.end()["transformer"]
            assert run["calls"] == 2 and set(run["units"].values()) == {2}, run
            work.remove()
    (bare_first, bare_after), (counted_first, counted_after) = counts
    assert counted_first == bare_first and counted_after == counted_first == bare_after
