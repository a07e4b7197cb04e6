"""A pipeline with two denoisers (Wan 2.2's high-noise ``transformer`` and low-noise ``transformer_2``): every
feature that targets the denoiser reaches both or is refused naming the one it would leave untouched, and a
feature that reached only one is partial, never engaged (issue 26, item 6)."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import generate, loaded

from accel import apply
from accel.features import FEATURES, CompileConfig, QuantizationConfig
from accel.features.base import Owner, Reach, denoisers, untouched_denoisers_refusal

TWO_DENOISERS = "tiny-wan22"


@pytest.fixture(scope="module")
def wan22():
    return loaded(TWO_DENOISERS)


def test_the_pipeline_has_two_denoisers_and_both_run(wan22):
    assert list(denoisers(wan22.pipeline)) == ["transformer", "transformer_2"]
    calls = {"transformer": 0, "transformer_2": 0}
    hooks = [
        getattr(wan22.pipeline, name).register_forward_pre_hook(
            lambda module, args, name=name: calls.__setitem__(name, calls[name] + 1)
        )
        for name in calls
    ]
    try:
        generate(wan22, steps=4)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls["transformer"] > 0 and calls["transformer_2"] > 0, calls  # the test below means something


def test_compile_reaches_both_denoisers_with_evidence_for_each(wan22):
    baseline = generate(wan22, steps=4)[0]
    with apply(wan22.pipeline, CompileConfig(backend="aot_eager"), num_inference_steps=4) as applied:
        generate(wan22, steps=4)  # the cold call compiles
        applied.reset_evidence()
        compiled = generate(wan22, steps=4)[0]
        verdict = applied.verdicts()["compile"]
    assert verdict.engaged, verdict.summary
    by_denoiser = verdict.evidence["compiled_calls_by_denoiser_per_run"][0]
    assert by_denoiser.get("transformer", 0) > 0 and by_denoiser.get("transformer_2", 0) > 0, by_denoiser
    assert set(verdict.evidence["compiled_modules_by_denoiser"]) == {"transformer", "transformer_2"}
    assert np.abs(compiled - baseline).max() < 1e-4


def test_compile_removed_from_the_second_denoiser_is_partial_not_engaged(wan22):
    with apply(wan22.pipeline, CompileConfig(backend="aot_eager"), num_inference_steps=4) as applied:
        generate(wan22, steps=4)
        applied.reset_evidence()
        handle = applied.handles[0]
        for module in handle.modules_by_denoiser["transformer_2"]:  # the feature taken off the second denoiser
            module._compiled_call_impl = None
        generate(wan22, steps=4)
        verdict = applied.verdicts()["compile"]
    assert not verdict.engaged
    assert verdict.summary.startswith("partial: a denoiser ran without its compiled code (transformer_2 on ")
    assert verdict.evidence["partial"] and set(verdict.evidence["untouched_denoiser_calls"]) == {"transformer_2"}


def test_tensor_parallel_reaches_both_denoisers_each_checked_and_refused_by_its_owner(wan22, monkeypatch):
    """Tensor parallelism shards every denoiser: no reach refusal on Wan 2.2, and each denoiser is checked with
    diffusers' own check (no ranks run): one without a ``_tp_plan`` is refused by the library, named; a head
    count the degree does not divide is the model's, named."""

    feature = FEATURES["tensor_parallel"]
    options = feature.parse_options({"tp": 2})
    pipeline = wan22.pipeline
    assert untouched_denoisers_refusal(feature, pipeline, options) is None
    assert feature.denoisers_reached(pipeline, options) == {"transformer", "transformer_2"}
    refused = feature.check(pipeline, "cpu", options)
    assert not refused.supported and refused.owner is Owner.LIBRARY
    assert refused.reason.startswith('transformer (WanTransformer3DModel): diffusers: "`_tp_plan` must be set')
    plan = {"proj_out": "colwise"}
    monkeypatch.setattr(pipeline.transformer, "_tp_plan", plan, raising=False)  # the first planned: the second
    refused = feature.check(pipeline, "cpu", options)
    assert refused.owner is Owner.LIBRARY and refused.reason.startswith("transformer_2 (WanTransformer3DModel): ")
    monkeypatch.setattr(pipeline.transformer_2, "_tp_plan", plan, raising=False)
    heads = pipeline.transformer_2.config.num_attention_heads
    indivisible = feature.check(pipeline, "cpu", feature.parse_options({"tp": heads + 1}))
    assert indivisible.owner is Owner.MODEL and indivisible.reason.startswith("transformer (WanTransformer3DModel): ")
    assert f"must divide the number of attention heads ({heads})" in indivisible.reason
    both = feature.check(pipeline, "cpu", options)  # both planned: what is left is the ranks
    assert not both.supported and "needs 2 ranks with torch.distributed initialised" in both.reason, both.reason


def test_a_first_denoiser_feature_is_refused_naming_the_denoiser_it_would_leave_untouched(wan22, monkeypatch):
    """No built-in reaches the first denoiser only now (tensor parallelism reaches both, above): a feature that
    did (first_block_cache narrowed here) is refused before anything is applied, as the harness's gap."""
    from accel.features.applied import ACTIVE_ATTRIBUTE, FeatureUnavailable

    feature = FEATURES["first_block_cache"]
    monkeypatch.setattr(type(feature), "reach", Reach.FIRST_DENOISER)
    with pytest.raises(FeatureUnavailable) as refused:
        apply(wan22.pipeline, feature.parse_options(0.5), num_inference_steps=4)
    assert refused.value.scope == "model" and refused.value.owner is Owner.HARNESS  # the library reaches both
    assert "first_block_cache reaches transformer only, so transformer_2 would run untouched" in str(refused.value)
    assert getattr(wan22.pipeline, ACTIVE_ATTRIBUTE, None) is None  # refused before anything was applied


def test_quantization_reaches_every_denoiser_by_default_or_those_its_components_name(wan22):
    quant = FEATURES["quantization"]
    assert untouched_denoisers_refusal(quant, wan22.pipeline, QuantizationConfig()) is None
    first = QuantizationConfig(components=("transformer",))
    assert "transformer_2 would run untouched" in untouched_denoisers_refusal(quant, wan22.pipeline, first)
    both = QuantizationConfig(components=("transformer", "transformer_2"))
    assert untouched_denoisers_refusal(quant, wan22.pipeline, both) is None


def _engaged(target, config, steps: int = 4, **request):
    """``config`` applied to ``target``: (its verdict on a call after a warm-up call, that call's outputs)."""
    with apply(target.pipeline, config, num_inference_steps=steps, device="cpu") as applied:
        generate(target, steps=steps, **request)
        applied.reset_evidence()
        outputs = generate(target, steps=steps, **request)
        verdict = next(iter(applied.verdicts().values()))
    return verdict, outputs


def test_quantization_by_default_quantizes_both_denoisers_with_a_census_for_each(wan22):
    verdict, _ = _engaged(wan22, QuantizationConfig())
    assert verdict.engaged, verdict.summary
    census = verdict.evidence["components"]
    assert set(census) == {"transformer", "transformer_2"}
    for name, counts in census.items():
        assert counts["eligible_linears"] > 0 and not counts["skipped"], (name, counts)
        assert counts["weight_bytes_after"] < counts["weight_bytes_before"], (name, counts)


def test_attention_backend_reaches_both_denoisers_with_evidence_for_each(wan22):
    from accel.features import AttentionBackendConfig

    verdict, _ = _engaged(wan22, AttentionBackendConfig(backend="_native_math"))
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["backend_by_denoiser"] == {
        "transformer": ["_native_math"],
        "transformer_2": ["_native_math"],
    }
    ran = verdict.evidence["denoiser_calls_per_run"][0]
    attention = verdict.evidence["attention_calls_by_denoiser_per_run"][0]
    assert ran["transformer"] > 0 and ran["transformer_2"] > 0, ran
    assert attention["transformer"] > 0 and attention["transformer_2"] > 0, attention
    assert verdict.evidence["dispatched_per_run"][0] == {"_native_math": sum(attention.values())}


def test_attention_backend_left_off_the_second_denoiser_is_not_engaged(wan22):
    """transformer_2 set back to another backend mid-apply (diffusers' ``native``): its attention dispatches there,
    the cell fails. (``reset_attention_backend`` would not do: its processors then follow the registry's active
    backend, which ``set_attention_backend`` made the wanted one.)"""
    from accel.features import AttentionBackendConfig

    with apply(wan22.pipeline, AttentionBackendConfig(backend="_native_math"), num_inference_steps=4) as applied:
        wan22.pipeline.transformer_2.set_attention_backend("native")
        generate(wan22, steps=4)
        verdict = applied.verdicts()["attention_backend"]
    assert not verdict.engaged and "but dispatched" in verdict.summary, verdict.summary


def test_attention_backend_a_denoiser_that_ran_without_its_attention_modules_is_partial(wan22):
    """transformer_2's attention-module counter swapped for a fresh one (its hooks count on the old): as if it ran
    without calling its attention modules. It ran, so the verdict is partial, naming it, not engaged."""
    from accel.features import AttentionBackendConfig
    from accel.features.base import Tally

    with apply(wan22.pipeline, AttentionBackendConfig(backend="_native_math"), num_inference_steps=4) as applied:
        applied.handles[0].attention_calls["transformer_2"] = Tally()
        applied.reset_evidence()
        generate(wan22, steps=4)
        verdict = applied.verdicts()["attention_backend"]
    assert not verdict.engaged
    assert verdict.summary.startswith("partial: a denoiser ran without calling its attention modules (transformer_2")
    assert set(verdict.evidence["untouched_denoiser_calls"]) == {"transformer_2"}


def test_layerwise_offload_reaches_both_denoisers_with_onloads_for_each(wan22):
    from accel.features import LayerwiseOffloadConfig

    verdict, _ = _engaged(wan22, LayerwiseOffloadConfig())
    assert verdict.engaged, verdict.summary
    onloads = verdict.evidence["onloads_by_denoiser_per_run"][0]
    assert onloads["transformer"] > 0 and onloads["transformer_2"] > 0, onloads


@pytest.mark.parametrize("name, raw", [("quantization", "int8wo"), ("enable_layerwise_offload", True)])
def test_quantization_and_layerwise_offload_reach_a_unet(name, raw):
    """SD 1.5 denoises with a UNet: both used to fail with "pipeline has no component 'transformer'" although
    diffusers quantizes and group-offloads a UNet; they reach it, with its evidence under ``unet``."""
    target = loaded("tiny-sd15")
    verdict, _ = _engaged(target, FEATURES[name].parse_options(raw), steps=2, height=32, width=32)
    assert verdict.engaged, verdict.summary
    if name == "quantization":
        assert list(verdict.evidence["components"]) == ["unet"]
    else:
        assert verdict.evidence["onloads_by_denoiser_per_run"][0]["unet"] > 0


def test_every_built_in_denoiser_feature_declares_its_reach():
    """A feature left at the default (the whole pipeline) would skip the check: the built-ins that act on the
    transformer all say so."""
    reach = {name: feature.reach for name, feature in FEATURES.items()}
    pipeline_wide = {name for name, value in reach.items() if value is Reach.PIPELINE}
    assert pipeline_wide == {
        "enable_cpu_offload",
        "enable_sequential_cpu_offload",
        "group_offload",
        "vae_use_tiling",
        "vae_use_slicing",
        "cfg_parallel",  # splits the guidance branches of the pipeline's own loop, whatever denoises in it
    }, pipeline_wide
    assert reach["compile"] is Reach.EVERY_DENOISER


def test_a_one_denoiser_pipeline_is_not_refused():
    target = loaded("tiny-flux")
    for name in ("context_parallel", "first_block_cache", "attention_backend"):
        feature = FEATURES[name]
        assert untouched_denoisers_refusal(feature, target.pipeline, feature.parse_options(None)) is None


@pytest.mark.parametrize("granularity", ["full", "regional"])
def test_compile_reaches_a_unet(granularity):
    """SD 1.5's denoiser is a UNet: compile reaches it (diffusers' UNet2DConditionModel declares
    _repeated_blocks: its BasicTransformerBlocks), engaged, with its evidence under `unet`."""
    target = loaded("tiny-sd15")
    config = CompileConfig(granularity=granularity, backend="aot_eager")
    with apply(target.pipeline, config, num_inference_steps=2) as done:
        generate(target, height=32, width=32)
        done.reset_evidence()
        generate(target, height=32, width=32)
        verdict = done.verdicts()["compile"]
    assert verdict.engaged, verdict.summary
    compiled = verdict.evidence["compiled_modules_by_denoiser"]
    assert list(compiled) == ["unet"] and (compiled["unet"] == 1 if granularity == "full" else compiled["unet"] > 1)


def _take_offload_off(name: str, module) -> None:
    """The offload hooks taken off one denoiser (it then runs untouched), the others left in place."""
    if name == "group_offload":
        from accel.features.offload import _remove_group_offload

        _remove_group_offload([module], "cpu")
    else:
        from accelerate.hooks import remove_hook_from_module

        remove_hook_from_module(module)


OFFLOADS = [("group_offload", {"offload_type": "block_level", "num_blocks_per_group": 1}), ("enable_cpu_offload", True)]


@pytest.mark.parametrize("name, raw", OFFLOADS)
def test_offload_reaches_both_denoisers_with_onloads_counted_for_each(wan22, name, raw):
    config = FEATURES[name].parse_options(raw)
    with apply(wan22.pipeline, config, num_inference_steps=4) as applied:
        generate(wan22, steps=4)
        verdict = applied.verdicts()[name]
    assert verdict.engaged, verdict.summary
    onloads = verdict.evidence["onloads_by_denoiser_per_run"][0]
    assert onloads.get("transformer", 0) > 0 and onloads.get("transformer_2", 0) > 0, onloads


@pytest.mark.parametrize("name, raw", OFFLOADS)
def test_offload_removed_from_the_second_denoiser_is_partial_not_engaged(wan22, name, raw):
    """A pipeline-wide feature counted its hooks over every component: the other components' onloads made it
    engaged while transformer_2 ran without any."""
    config = FEATURES[name].parse_options(raw)
    with apply(wan22.pipeline, config, num_inference_steps=4) as applied:
        _take_offload_off(name, wan22.pipeline.transformer_2)
        generate(wan22, steps=4)
        verdict = applied.verdicts()[name]
    assert not verdict.engaged, verdict.summary
    assert verdict.summary.startswith("partial: a denoiser ran without its offload hooks (transformer_2 on ")
    assert verdict.evidence["partial"] and set(verdict.evidence["untouched_denoiser_calls"]) == {"transformer_2"}


def test_quantization_left_off_the_second_denoiser_is_partial_even_under_a_low_min_share(wan22):
    """min_quantized_share below 1 allows torchao's skips, not a whole denoiser running unquantized."""
    both = QuantizationConfig(components=("transformer", "transformer_2"), min_quantized_share=0.3)
    with apply(wan22.pipeline, both, num_inference_steps=4) as applied:
        handle = applied.handles[0]
        for linear_name, weight in handle.originals["transformer_2"].items():  # transformer_2's weights restored
            wan22.pipeline.transformer_2.get_submodule(linear_name).weight = weight
        generate(wan22, steps=4)
        verdict = applied.verdicts()["quantization"]
    assert not verdict.engaged, verdict.summary
    assert "transformer_2" in verdict.summary and verdict.summary.startswith("partial")
