"""torchao quantization: layers counted, bytes shrink, remove restores, GPU-only methods say why."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, generate, loaded

from accel.features import FEATURES


@pytest.mark.parametrize("method", ["int8wo", "int8dq", "fp8wo"])
def test_quantization_engages_and_remove_restores(method):
    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    feature = FEATURES["quantization"]
    options = feature.parse_options(method)
    handle = feature.apply(target.pipeline, options, CONTEXT)
    quantized = generate(target, [handle])[0]
    verdict = feature.verify(handle)
    handle.remove()
    census = verdict.evidence["components"]["transformer"]
    assert verdict.engaged and census["quantized_linears"] == census["linears"] > 0
    assert census["weight_bytes_after"] < census["weight_bytes_before"]
    assert not np.array_equal(quantized, baseline)
    assert np.array_equal(generate(target)[0], baseline)


def test_quantization_at_load_goes_through_from_pretrained():
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget

    feature = FEATURES["quantization"]
    options = feature.parse_options({"method": "int8wo", "at_load": True})
    target = AdapterTarget(ModelSpec(name="tiny-flux", source="tiny-flux"))
    target.load(feature.load_kwargs(options))
    handle = feature.apply(target.pipeline, options, CONTEXT)
    verdict = feature.verify(handle)
    assert verdict.engaged, verdict.summary


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
