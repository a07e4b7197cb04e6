"""vLLM-Omni feature mapping and rejection reasons, without the engine's environment."""

from __future__ import annotations

import pytest

from accel.engines.mapping import load_mapping, map_variant
from accel.errors import ConfigError
from accel.features import FEATURES


def test_every_feature_has_a_mapping_or_a_reason():
    mapping = load_mapping()
    assert set(mapping["features"]) == set(FEATURES)


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
    assert map_variant({"quantization": "fp8dq_row"}, "vllm-omni").kwargs["quantization_config"] == "fp8"
    call = map_variant({"compile": "full"}, "vllm-omni-adapter")
    assert call.kwargs["enforce_eager"] is False and call.kwargs["diffusion_compile_granularity"] == "full"
    assert map_variant({"vae_use_tiling": {"tile_size": 32}}, "vllm-omni").kwargs["vae_use_tiling"] is True


def test_the_adapter_path_rejects_cache_backends_in_vllm_omnis_words():
    call = map_variant({"cache_dit": {}}, "vllm-omni-adapter")
    assert call.unsupported == (
        "cache_dit: rejected by vllm-omni-adapter: any cache_backend is rejected with the diffusers backend "
        "(vllm-omni 0.30)"
    )
    assert map_variant({}, "vllm-omni-adapter").kwargs == {"diffusion_load_format": "diffusers", "enforce_eager": False}


def test_features_without_an_equivalent_are_unsupported_with_the_reason():
    assert "no FirstBlockCache backend" in map_variant({"first_block_cache": 0.1}, "vllm-omni").unsupported
    assert "not diffusers group offload" in map_variant({"group_offload": {}}, "vllm-omni").unsupported
    assert (
        "no equivalent of backend=_native_flash"
        in map_variant({"attention_backend": "_native_flash"}, "vllm-omni").unsupported
    )


def test_cpu_skips_are_not_engagement():
    call = map_variant({"enable_cpu_offload": True}, "vllm-omni", device="cpu")
    assert call.kwargs["enable_cpu_offload"] is True
    assert call.skipped == ["enable_cpu_offload: accepted, then skipped: the platform does not support CPU offloading"]
    assert map_variant({"enable_cpu_offload": True}, "vllm-omni", device="cuda").skipped == []


def test_unknown_path_is_bad_input():
    with pytest.raises(ConfigError, match=r"unknown engine path 'vllm'\. Allowed: vllm-omni, vllm-omni-adapter"):
        map_variant({}, "vllm")
