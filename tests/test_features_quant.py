"""torchao quantization: layers counted, bytes shrink, remove restores, GPU-only methods say why."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, applied_runs, generate, loaded

from accel.features import FEATURES


@pytest.mark.parametrize("method", ["int8wo", "int8dq", "fp8wo"])
def test_quantization_engages_and_remove_restores(method):
    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    verdict, ((quantized, *_),) = applied_runs(target, "quantization", method)
    census = verdict.evidence["components"]["transformer"]
    assert verdict.engaged, verdict.summary
    assert census["eligible_linears"] > 0 and census["skipped"] == {}
    assert verdict.evidence["quantized_linears_per_run"] == [census["eligible_linears"]]
    assert verdict.evidence["quantized_share_per_run"] == [1.0] and not verdict.evidence["partial"]
    assert census["weight_bytes_after"] < census["weight_bytes_before"]
    assert not np.array_equal(quantized, baseline)
    assert np.array_equal(generate(target)[0], baseline)


def test_remove_is_bit_exact_on_a_pipeline_loaded_with_plain_diffusers():
    """The README's promise outside the harness: a copy of the weights restored at another address made
    outputs 1e-6 apart (CPU kernels choose their path by alignment); the original Parameters go back."""
    import torch
    from diffusers import DiffusionPipeline

    from accel import apply, zoo
    from accel.features import QuantizationConfig

    pipe = DiffusionPipeline.from_pretrained(str(zoo.build("tiny-flux")))
    pipe.set_progress_bar_config(disable=True)
    weights = {name: p for name, p in pipe.transformer.named_parameters()}

    def run():
        generator = torch.Generator().manual_seed(0)
        return pipe("a red fox", height=64, width=64, num_inference_steps=2, generator=generator, output_type="np")

    before = run().images
    with apply(pipe, QuantizationConfig(method="int8wo")) as applied:
        quantized = run().images
    assert applied.evidence()["quantization"]["engaged"] and not np.array_equal(quantized, before)
    assert np.array_equal(run().images, before)
    assert all(p is weights[name] for name, p in pipe.transformer.named_parameters())


def test_quantization_at_load_goes_through_from_pretrained():
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget

    feature = FEATURES["quantization"]
    options = feature.parse_options({"method": "int8wo", "at_load": True})
    target = AdapterTarget(ModelSpec(name="tiny-flux", source="tiny-flux"))
    target.load(feature.load_kwargs(options))
    verdict, _ = applied_runs(target, "quantization", {"method": "int8wo", "at_load": True})
    assert verdict.engaged, verdict.summary
    census = verdict.evidence["components"]["transformer"]
    assert verdict.evidence["quantized_linears_per_run"] == [census["eligible_linears"]] and census["skipped"] == {}


@pytest.mark.parametrize(
    ("method", "reason"),
    [("fp8dq", "needs a CUDA GPU with SM >= 8.9 (found: cpu)"), ("int4wo", "int4wo needs a CUDA GPU")],
)
def test_gpu_only_methods_are_unsupported_on_cpu(method, reason):
    target = loaded("tiny-flux")
    feature = FEATURES["quantization"]
    support = feature.check(target.pipeline, "cpu", feature.parse_options(method))
    assert not support.supported and reason in support.reason


def test_unknown_component_is_unsupported_with_the_components_listed():
    target = loaded("tiny-flux")
    feature = FEATURES["quantization"]
    support = feature.check(target.pipeline, "cpu", feature.parse_options({"components": ["unet"]}))
    assert not support.supported and "no component 'unet'" in support.reason and "transformer" in support.reason


def test_a_bare_module_is_refused_with_a_clear_reason():
    import torch

    from accel import apply
    from accel.features import QuantizationConfig
    from accel.features.applied import FeatureUnavailable

    with pytest.raises(FeatureUnavailable, match=r"Linear is not a pipeline: quantization quantizes a pipeline's"):
        apply(torch.nn.Linear(2, 2), QuantizationConfig())


def _toy_pipeline(*shapes):
    import types

    import torch

    layers = [torch.nn.Linear(n_in, n_out) for n_in, n_out in shapes]
    return types.SimpleNamespace(transformer=torch.nn.Sequential(*layers).to(torch.bfloat16))


def _quantize(pipeline, raw, runs=1, between=None):
    feature = FEATURES["quantization"]
    handle = feature.apply(pipeline, feature.parse_options(raw), CONTEXT)
    for index in range(runs):
        if between is not None:
            between(index)
        handle.begin_run()
        handle.end_run()
    return feature.verify(handle)


def test_torchao_skips_are_reported_with_torchaos_reason():
    """torchao skips shapes its kernels reject with an INFO log and no error; the census used to hide it."""
    verdict = _quantize(_toy_pipeline((64, 64), (64, 32)), "int4wo")  # in_features 64: not a multiple of 128
    assert not verdict.engaged
    assert verdict.summary.startswith("quantization requested but 0/2 eligible linear layers quantized; 2 skipped")
    skipped = verdict.evidence["components"]["transformer"]["skipped"]
    assert set(skipped) == {"0", "1"}
    assert all("is not compatible with group_size 128" in reason for reason in skipped.values())


def test_partial_quantization_is_measured_on_each_run_and_gated_by_min_share():
    import torch

    pipeline = _toy_pipeline((32, 32), (32, 32), (32, 32), (32, 32))

    def unquantize_one(run):  # from the second run on, one layer runs with a plain weight
        if run == 1:
            layer = pipeline.transformer[3]
            layer.weight = torch.nn.Parameter(torch.zeros(32, 32, dtype=torch.bfloat16), requires_grad=False)

    verdict = _quantize(pipeline, {"method": "int8wo", "min_quantized_share": 0.7}, runs=2, between=unquantize_one)
    assert verdict.engaged, verdict.summary
    assert verdict.summary == "partial quantization: 3/4 eligible linear layers quantized"
    assert verdict.evidence["quantized_share_per_run"] == [1.0, 0.75] and verdict.evidence["partial"]

    pipeline = _toy_pipeline((32, 32), (32, 32), (32, 32), (32, 32))
    verdict = _quantize(pipeline, "int8wo", runs=2, between=unquantize_one)  # default: every layer
    assert not verdict.engaged
    assert verdict.summary == (
        "partial quantization: 3/4 eligible linear layers quantized (75% < min_quantized_share 100%)"
    )


def test_min_quantized_share_is_validated():
    from accel.errors import ConfigError
    from accel.features import parse_feature_options

    with pytest.raises(ConfigError, match=r"quantization\.min_quantized_share: Input should be less than or equal"):
        parse_feature_options("quantization", {"min_quantized_share": 1.5}, "p.yaml: variants[0].features")
