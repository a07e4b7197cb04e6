"""A pipeline with two denoisers (Wan 2.2's high-noise ``transformer`` and low-noise ``transformer_2``): every
feature that targets the denoiser reaches both or is refused naming the one it would leave untouched, and a
feature that reached only one is partial, never engaged (issue 26, item 6)."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import generate, loaded

from accel import apply
from accel.features import FEATURES, CompileConfig, QuantizationConfig
from accel.features.applied import ACTIVE_ATTRIBUTE, FeatureUnavailable
from accel.features.base import Reach, denoisers, untouched_denoisers_refusal

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


@pytest.mark.parametrize(
    "name, raw",
    [
        ("attention_backend", "_native_math"),
        ("enable_layerwise_offload", True),
    ],
)
def test_a_first_denoiser_feature_is_refused_naming_the_denoiser_it_would_leave_untouched(wan22, name, raw):
    config = FEATURES[name].parse_options(raw)
    with pytest.raises(FeatureUnavailable) as refused:
        apply(wan22.pipeline, config, num_inference_steps=4)
    assert refused.value.scope == "model"
    assert f"{name} reaches transformer only, so transformer_2 would run untouched" in str(refused.value)
    assert getattr(wan22.pipeline, ACTIVE_ATTRIBUTE, None) is None  # refused before anything was applied


def test_quantization_reaches_the_denoisers_its_components_name(wan22):
    quant = FEATURES["quantization"]
    assert "transformer_2 would run untouched" in untouched_denoisers_refusal(
        quant, wan22.pipeline, QuantizationConfig()
    )
    both = QuantizationConfig(components=("transformer", "transformer_2"))
    assert untouched_denoisers_refusal(quant, wan22.pipeline, both) is None


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
    for name in ("tea_cache", "first_block_cache", "attention_backend"):
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
