"""Offload on a CPU-only host: hooks installed and used (onloads counted), outputs bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import applied_runs, generate, loaded

from accel.features import FEATURES
from accel.features.base import Owner


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("enable_cpu_offload", True),
        ("group_offload", {"offload_type": "block_level", "num_blocks_per_group": 1}),
        ("group_offload", {"offload_type": "leaf_level"}),
        ("enable_layerwise_offload", {}),
    ],
)
def test_offload_engages_and_is_bit_identical(name, raw):
    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    verdict, outputs = applied_runs(target, name, raw, runs=2)
    outputs = [output[0] for output in outputs]
    assert verdict.engaged, verdict.summary
    assert all(n > 0 for n in verdict.evidence["onloads_per_run"])
    assert all(np.array_equal(o, baseline) for o in outputs)
    assert np.array_equal(generate(target)[0], baseline)


@pytest.mark.parametrize(
    ("name", "raw", "reason"),
    [
        ("enable_sequential_cpu_offload", True, "sequential offload needs an accelerator"),
        ("enable_layerwise_offload", {"use_stream": True}, "use_stream needs CUDA streams (found: cpu)"),
        ("group_offload", {"use_stream": True}, "use_stream needs CUDA streams"),
    ],
)
def test_gpu_only_offload_paths_say_why(name, raw, reason):
    target = loaded("tiny-flux")
    feature = FEATURES[name]
    support = feature.check(target.pipeline, "cpu", feature.parse_options(raw))
    assert not support.supported and reason in support.reason


@pytest.mark.parametrize("name", ["group_offload", "enable_layerwise_offload"])
def test_a_model_that_declares_no_group_offloading_is_refused_with_that_cause(name):
    """HunyuanDiT2DModel sets diffusers' ``_supports_group_offloading = False``: the coverage cells failed with
    diffusers' ValueError from inside apply; the class's own declaration is the refusal, before anything runs."""
    target = loaded("tiny-hunyuandit")
    feature = FEATURES[name]
    support = feature.check(target.pipeline, "cpu", feature.parse_options(None))
    assert not support.supported
    assert support.reason == (
        "HunyuanDiT2DModel (transformer) declares _supports_group_offloading = False; diffusers' enable_group_offload: "
        '"HunyuanDiT2DModel does not support group offloading"'
    )
    assert support.owner is Owner.LIBRARY  # diffusers refuses (tests/test_refusal_owners.py calls it)
