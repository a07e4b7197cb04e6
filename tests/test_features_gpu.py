"""GPU-only paths: float8 dynamic and int4 quantization, CUDA-stream offload, flash attention.

Skipped with the reason on a machine without CUDA; run on a GPU host with plain pytest.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none found)"),
]


def _loaded():
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget

    target = AdapterTarget(ModelSpec(name="tiny-flux", source="tiny-flux", device="cuda", dtype="bfloat16"))
    target.load()
    return target


def _run_feature(name, raw):
    from features_helpers import REQUEST

    from accel.features import FEATURES
    from accel.features.base import RunContext

    target = _loaded()
    baseline = target.generate(REQUEST)[0]
    feature = FEATURES[name]
    options = feature.parse_options(raw)
    support = feature.check(target.pipeline, "cuda", options)
    if not support.supported:
        pytest.skip(support.reason)
    handle = feature.apply(target.pipeline, options, RunContext("cuda", REQUEST.steps))
    handle.begin_run()
    output = target.generate(REQUEST)[0]
    handle.end_run()
    verdict = feature.verify(handle)
    handle.remove()
    return verdict, output, baseline


@pytest.mark.parametrize("method", ["fp8dq", "fp8dq_row", "int4wo"])
def test_gpu_quantization_engages(method):
    verdict, output, _ = _run_feature("quantization", method)
    assert verdict.engaged, verdict.summary
    assert np.isfinite(output).all()


def test_layerwise_offload_with_a_cuda_stream_is_exact():
    verdict, output, baseline = _run_feature("enable_layerwise_offload", {"use_stream": True})
    assert verdict.engaged and np.array_equal(output, baseline)


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="flash-attn not installed")
def test_flash_attention_dispatches():
    verdict, output, baseline = _run_feature("attention_backend", "flash")
    assert verdict.engaged and np.abs(output - baseline).max() < 0.05
