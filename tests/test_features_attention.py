"""attention_backend: the dispatched backend is the evidence; the global backend is restored."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, applied_runs, generate, loaded
from pydantic import ValidationError

from accel.features import FEATURES
from accel.features.attention import AttentionBackendConfig, _NativeAttentionHandle


def _active_backend():
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    return _AttentionBackendRegistry._active_backend


@pytest.mark.parametrize("model", ["tiny-flux", "tiny-wan", "tiny-qwen-image"])
def test_math_backend_dispatches_matches_and_restores(model):
    target = loaded(model)
    baseline = generate(target)
    before = _active_backend()
    verdict, (output,) = applied_runs(target, "attention_backend", "_native_math")
    assert verdict.engaged, verdict.summary
    assert set(verdict.evidence["dispatched_per_run"][0]) == {"_native_math"}
    assert np.abs(output[0] - baseline[0]).max() < 1e-4
    assert _active_backend() == before
    assert np.array_equal(generate(target)[0], baseline[0])


def test_the_backend_the_pipeline_already_uses_is_no_effect_in_the_evidence_and_the_support_matrix():
    """``attention_backend: native`` (diffusers' default) engages but tests nothing: shown as no effect (⚪),
    like offload on a CPU, never as a measured ✅ ~1.0x."""
    from synthetic import record

    from accel.gate import load_gate_data
    from accel.report.tables import support_matrix

    target = loaded("tiny-flux")
    same, _ = applied_runs(target, "attention_backend", "native")
    assert same.engaged and "already used the native backend" in same.evidence["no_effect"], same.evidence
    other, _ = applied_runs(target, "attention_backend", "_native_math")
    assert other.engaged and "no_effect" not in other.evidence
    evidence = {"attention_backend": {"engaged": True, "summary": same.summary, **same.evidence}}
    records = [
        record("m", "baseline", {}, device="cpu", dtype="float32"),
        record("m", "attn-native", {"attention_backend": "native"}, evidence=evidence, device="cpu", dtype="float32"),
    ]
    matrix = support_matrix(records, load_gate_data())
    assert "⚪" in matrix and "attention_backend engaged, no effect: the pipeline already used" in matrix, matrix
    assert "| **m** | ⚪<sup>1</sup> |" in matrix, matrix  # not ✅ ≈1.0x: nothing was tested


def test_native_attention_layers_already_on_the_backend_are_no_effect():
    from accel.native.attention import Attention

    handle = _NativeAttentionHandle([Attention(), Attention()], "native")
    assert handle.already_in_use
    assert not _NativeAttentionHandle([Attention()], "_native_math").already_in_use


def test_requested_backend_never_reached_fails():
    target = loaded("tiny-flux")
    feature = FEATURES["attention_backend"]
    handle = feature.apply(target.pipeline, AttentionBackendConfig(backend="_native_math"), CONTEXT)
    handle.begin_run()  # a run in which nothing dispatched
    verdict = feature.verify(handle)
    handle.remove()
    assert not verdict.engaged and "no attention call reached" in verdict.summary


@pytest.mark.parametrize(
    ("backend", "reason"),
    [
        ("flash", "package flash_attn not installed: pip install 'omni-accel[gpu]'"),
        ("sage", "package sageattention not installed"),
        ("_native_cudnn", "needs a CUDA GPU (found: cpu)"),
        ("flash_hub", "downloads its kernel from the Hugging Face hub"),
    ],
)
def test_unavailable_backends_say_why(backend, reason):
    target = loaded("tiny-flux")
    support = FEATURES["attention_backend"].check(target.pipeline, "cpu", AttentionBackendConfig(backend=backend))
    assert not support.supported
    assert reason in support.reason


def test_unknown_backend_is_rejected_with_a_suggestion():
    with pytest.raises(ValidationError, match=r"unknown attention backend 'native_math'\. Did you mean '_native_math'"):
        AttentionBackendConfig(backend="native_math")


def test_sage_is_lossy_and_sdpa_lossless():
    feature = FEATURES["attention_backend"]
    assert feature.feature_class_for(AttentionBackendConfig(backend="sage")).value == "lossy"
    assert feature.feature_class_for(AttentionBackendConfig(backend="_native_math")).value == "lossless"
