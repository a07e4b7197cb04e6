"""What would break first on a GPU, fixed on the CPU: dtype-aware probes, the peak table's labels and the
native pipeline's execution device after offload."""

from __future__ import annotations

import pytest
import torch

from accel.features.attention import AttentionBackend, AttentionBackendConfig
from accel.features.base import Support, compute_dtype
from accel.features.quant import Quantization, QuantizationConfig
from accel.measure.flops import peak_for


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr("accel.features.quant._needs_sm89", lambda device: Support.yes())


def test_fp8_row_wise_needs_bf16_weights(sm90):
    feature = Quantization()
    options = QuantizationConfig(method="fp8dq_row")
    refused = feature.probe("cuda", options, dtype="float32")
    assert not refused.supported and "needs bfloat16 weights" in refused.reason and "float32" in refused.reason
    assert feature.probe("cuda", options, dtype="bfloat16").supported
    assert feature.probe("cuda", QuantizationConfig(method="fp8dq"), dtype="float32").supported  # per tensor


def test_int4_needs_its_packing_package_and_bf16(monkeypatch):
    feature = Quantization()
    options = QuantizationConfig(method="int4wo")
    monkeypatch.setattr("accel.features.quant._int4_packing_package", lambda: "mslk")
    refused = feature.probe("cuda", options, dtype="bfloat16")
    assert not refused.supported and "packing package mslk" in refused.reason
    monkeypatch.setattr("accel.features.quant._int4_packing_package", lambda: None)
    assert "bfloat16" in feature.probe("cuda", options, dtype="float32").reason
    assert feature.probe("cuda", options, dtype="bfloat16").supported


@pytest.mark.parametrize(
    ("backend", "device", "dtype", "supported"),
    [
        ("_native_flash", "cuda", "float32", False),
        ("_native_cudnn", "cuda", "float32", False),
        ("_native_flash", "cuda", "bfloat16", True),
        ("_native_efficient", "cuda", "float32", True),
        ("_native_flash", "cpu", "float32", True),  # PyTorch's CPU flash kernel takes float32
    ],
)
def test_attention_probes_consider_the_dtype(backend, device, dtype, supported):
    support = AttentionBackend().probe(device, AttentionBackendConfig(backend=backend), dtype=dtype)
    assert support.supported is supported, support.reason
    if not supported:
        assert "needs float16 or bfloat16" in support.reason and dtype in support.reason


def test_check_reads_the_loaded_pipelines_dtype():
    class Pipeline:
        transformer = torch.nn.Linear(2, 2).to(torch.float16)

    assert compute_dtype(Pipeline()) == "float16"
    assert compute_dtype(object()) is None


def test_peak_labels_name_the_dtype_they_are_for():
    assert peak_for("NVIDIA H200", "bfloat16") == (989e12, "datasheet H200 bfloat16 dense")
    assert peak_for("NVIDIA H200", "float32") == (67e12, "datasheet H200 float32 dense")
    assert peak_for("NVIDIA H200", "float32", tf32=True) == (494.5e12, "datasheet H200 tfloat32 dense")
    assert peak_for("NVIDIA A100-SXM4-80GB", "float32")[0] == 19.5e12  # not the TF32 number
    peak, label = peak_for("NVIDIA L20", "float32")
    assert peak is None and "no datasheet float32 peak" in label
    assert peak_for("Some GPU", "bfloat16")[0] is None


def test_native_execution_device_survives_weights_leaving_the_device():
    from accel.native.contract import NativePipeline

    class Toy(NativePipeline):
        _dit_modules = ("transformer",)

        def __init__(self) -> None:
            super().__init__()
            self.transformer = torch.nn.Linear(2, 2)

    toy = Toy().to("cpu")
    toy.transformer.to("meta")  # what offload does to the weights (here: off the execution device)
    assert toy.execution_device == torch.device("cpu") and toy.device == torch.device("cpu")
    assert Toy().execution_device == torch.device("cpu")  # never moved: the weights' device
