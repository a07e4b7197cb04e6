"""vLLM-Omni feature mapping and rejection reasons, without the engine's environment."""

from __future__ import annotations

import pytest

from accel.engines.mapping import load_mapping, map_variant, read_engine_log
from accel.errors import ConfigError
from accel.features import FEATURES


def test_every_feature_has_a_mapping_or_a_reason():
    mapping = load_mapping()
    assert set(mapping["features"]) == {name for name in FEATURES if FEATURES.source(name) == "built-in"}


def test_cache_backends_map_to_cache_backend_and_config():
    call = map_variant({"tea_cache": 0.3}, "vllm-omni")
    assert call.kwargs == {"enforce_eager": True, "cache_backend": "tea_cache", "cache_config": {"rel_l1_thresh": 0.3}}
    call = map_variant({"cache_dit": {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}}, "vllm-omni")
    assert call.kwargs["cache_backend"] == "cache_dit"
    assert call.kwargs["cache_config"]["residual_diff_threshold"] == 0.5
    assert call.kwargs["cache_config"]["Fn_compute_blocks"] == 1


def test_options_map_to_engine_values():
    assert (
        map_variant({"attention_backend": "flash"}, "vllm-omni").kwargs["diffusion_attention_backend"] == "FLASH_ATTN"
    )
    assert map_variant({"quantization": "fp8dq"}, "vllm-omni").kwargs["quantization_config"] == "fp8"
    assert map_variant({"quantization": "int8dq"}, "vllm-omni").kwargs["quantization_config"] == "int8"
    call = map_variant({"compile": "full"}, "vllm-omni-adapter")
    assert call.kwargs["enforce_eager"] is False and call.kwargs["diffusion_compile_granularity"] == "full"
    assert map_variant({"vae_use_tiling": True}, "vllm-omni").kwargs["vae_use_tiling"] is True


def test_the_adapter_path_sends_cache_backends_to_vllm_omni():
    # What vLLM-Omni refuses is decided by running it (its own error), never from the mapping.
    assert map_variant({"cache_dit": {}}, "vllm-omni-adapter").kwargs["cache_backend"] == "cache_dit"
    assert map_variant({}, "vllm-omni-adapter").kwargs == {"diffusion_load_format": "diffusers", "enforce_eager": False}


@pytest.mark.parametrize(
    ("features", "reason"),
    [
        (
            {"attention_backend": "_native_math"},
            "attention_backend: backend=_native_math cannot be told apart on vLLM-Omni: vLLM-Omni's TORCH_SDPA is "
            "PyTorch's SDPA dispatch, as for `native`; it cannot force the math kernel",
        ),
        (
            {"quantization": "int8wo"},
            "quantization: method=int8wo cannot be told apart on vLLM-Omni: vLLM-Omni's only online int8 method is "
            "W8A8 with dynamic activations (our int8dq), not weight-only",
        ),
        (
            {"quantization": "fp8wo"},
            "quantization: method=fp8wo cannot be told apart on vLLM-Omni: vLLM-Omni's online fp8 method also "
            "quantizes activations (our fp8dq), not weight-only",
        ),
        (
            {"quantization": "fp8dq_row"},
            "quantization: method=fp8dq_row cannot be told apart on vLLM-Omni: vLLM-Omni's online fp8 method scales "
            "per tensor (our fp8dq); it has no per-row setting",
        ),
        (
            {"vae_use_tiling": {"tile_size": 32}},
            "vae_use_tiling: vLLM-Omni has no equivalent of tile_size=32 (its vae_use_tiling takes no such setting)",
        ),
        (
            {"compile": {"mode": "max-autotune"}},
            "compile: vLLM-Omni has no equivalent of mode=max-autotune (its compile takes no such setting)",
        ),
    ],
)
def test_settings_the_engine_cannot_tell_apart_are_unsupported_with_the_reason(features, reason):
    assert map_variant(features, "vllm-omni").unsupported == reason


def test_each_engine_value_takes_one_of_our_values():
    for name, entry in load_mapping()["features"].items():
        values = list((entry.get("values") or {}).values())
        assert len(values) == len(set(values)), name


def test_a_mapping_collapsing_two_values_is_refused(tmp_path):
    path = tmp_path / "collapsing.yaml"
    path.write_text("features:\n  quantization:\n    values: {int8wo: int8, int8dq: int8}\n")
    with pytest.raises(ConfigError, match=r"features\.quantization\.values: int8wo and int8dq both map to int8"):
        load_mapping("vllm-omni", path)


# vLLM-Omni 0.30's own lines, as it printed them on a CPU host (tests/test_engines_vllm_omni.py: the real engine).
TEA_LOG = (
    "(DiffusionWorker pid=10777) INFO 11-30 18:05:58 [backend.py:194] TeaCache applied with rel_l1_thresh=0.4, "
    "transformer_class=FluxTransformer2DModel\n"
)
LAYERWISE_ERROR = (
    "(DiffusionWorker pid=16060) [rank0]: RuntimeError: Orchestrator initialization failed: pin_memory=True requires "
    "a CUDA or other accelerator backend; no pinned memory allocator is available on this system.\n"
)


def test_the_engines_log_is_the_evidence():
    outcome = read_engine_log({"tea_cache": 0.4}, "vllm-omni", "cpu", TEA_LOG, failed=False)
    assert outcome.evidence["tea_cache"] == {
        "engaged": True,
        "summary": "vLLM-Omni logged: TeaCache applied with rel_l1_thresh=0.4, "
        "transformer_class=FluxTransformer2DModel",
        "engine_log": "TeaCache applied with rel_l1_thresh=0.4, transformer_class=FluxTransformer2DModel",
    }
    silent = read_engine_log({"vae_use_tiling": True}, "vllm-omni", "cpu", TEA_LOG, failed=False)
    assert silent.evidence["vae_use_tiling"] == {"engaged": False, "summary": "accepted by vLLM-Omni"}


def test_a_device_refusal_is_the_engines_error_on_that_device_only():
    outcome = read_engine_log({"enable_layerwise_offload": True}, "vllm-omni", "cpu", LAYERWISE_ERROR, failed=True)
    assert outcome.refused_scope == "environment"
    assert outcome.refused == (
        "enable_layerwise_offload: refused by vLLM-Omni on this cpu host: pin_memory=True requires a CUDA or other "
        "accelerator backend; no pinned memory allocator is available on this system."
    )
    on_gpu = read_engine_log({"enable_layerwise_offload": True}, "vllm-omni", "cuda:0", LAYERWISE_ERROR, failed=True)
    assert on_gpu.refused is None


def test_diffusers_model_offload_on_a_cpu_host_is_refused_there_not_failed():
    # What the diffusers path printed for enable_cpu_offload in `make report-engines` (vLLM-Omni 0.30, CPU).
    log = (
        "(DiffusionWorker pid=23030) ERROR 11-30 21:05:09 [omni_engine_base.py:478] RuntimeError: "
        "`enable_model_cpu_offload` requires accelerator, but not found\n"
    )
    outcome = read_engine_log({"enable_cpu_offload": True}, "vllm-omni-adapter", "cpu", log, failed=True)
    assert outcome.refused_scope == "environment"
    assert outcome.refused.endswith("on this cpu host: `enable_model_cpu_offload` requires accelerator, but not found")
    assert (
        read_engine_log({"enable_cpu_offload": True}, "vllm-omni-adapter", "cuda:0", log, failed=True).refused is None
    )


def test_features_without_an_equivalent_are_unsupported_with_the_reason():
    assert "no FirstBlockCache backend" in map_variant({"first_block_cache": 0.1}, "vllm-omni").unsupported
    assert "not diffusers group offload" in map_variant({"group_offload": {}}, "vllm-omni").unsupported
    assert (
        "no equivalent of backend=_native_flash"
        in map_variant({"attention_backend": "_native_flash"}, "vllm-omni").unsupported
    )


def test_unknown_path_is_bad_input():
    with pytest.raises(ConfigError, match=r"unknown engine path 'vllm'\. Allowed: vllm-omni, vllm-omni-adapter"):
        map_variant({}, "vllm")
