"""Acceleration features: one module per family; the built-in ones are registered here.

``apply(pipe, *configs)`` is the public way to apply them (``accel.features.applied``); every feature's
config class is exported here. ``FEATURES`` maps the user-facing name (the spelling used in YAML, the CLI
and results) to the feature, built-in or registered by another package through the entry point group
``omni_accel.features`` (``accel.features.registry``). Conflicts are data in
``feature_matrix/rules.yaml``; the application order is each feature's ``stage``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from accel.errors import ConfigError, did_you_mean, explain_error, format_location, unknown_choice
from accel.features.attention import AttentionBackend, AttentionBackendConfig
from accel.features.base import AnyFeature, Feature, FeatureConfig
from accel.features.cache_dit import CacheDit, CacheDitConfig
from accel.features.cfg_parallel import CFGParallel, CFGParallelConfig
from accel.features.compile import Compile, CompileConfig
from accel.features.diffusers_cache import (
    FirstBlockCache,
    FirstBlockCacheConfig,
    MagCache,
    MagCacheConfig,
    TaylorSeerCache,
    TaylorSeerCacheConfig,
)
from accel.features.offload import (
    GroupOffload,
    GroupOffloadConfig,
    LayerwiseOffload,
    LayerwiseOffloadConfig,
    ModelOffload,
    ModelOffloadConfig,
    SequentialOffload,
    SequentialOffloadConfig,
)
from accel.features.parallel import ContextParallel, ContextParallelConfig, TensorParallel, TensorParallelConfig
from accel.features.quant import Quantization, QuantizationConfig
from accel.features.registry import ENTRY_POINT_GROUP, FEATURES, FeatureRegistry, get_feature
from accel.features.teacache import TeaCache, TeaCacheConfig
from accel.features.timestep_caches import (
    FasterCache,
    FasterCacheConfig,
    PyramidAttentionBroadcast,
    PyramidAttentionBroadcastConfig,
)
from accel.features.vae import VaeSlicing, VaeSlicingConfig, VaeTiling, VaeTilingConfig

for _feature in (
    Compile(),
    CacheDit(),
    TeaCache(),
    FirstBlockCache(),
    MagCache(),
    TaylorSeerCache(),
    PyramidAttentionBroadcast(),
    FasterCache(),
    Quantization(),
    ModelOffload(),
    SequentialOffload(),
    GroupOffload(),
    LayerwiseOffload(),
    VaeTiling(),
    VaeSlicing(),
    AttentionBackend(),
    ContextParallel(),
    TensorParallel(),
    CFGParallel(),
):
    FEATURES.register(_feature)

from accel.features.applied import Applied, apply  # noqa: E402 - needs the registry filled

__all__ = [
    "ENTRY_POINT_GROUP",
    "FEATURES",
    "Applied",
    "AttentionBackendConfig",
    "CFGParallelConfig",
    "CacheDitConfig",
    "CompileConfig",
    "ContextParallelConfig",
    "FasterCacheConfig",
    "Feature",
    "FeatureConfig",
    "FeatureRegistry",
    "FirstBlockCacheConfig",
    "GroupOffloadConfig",
    "LayerwiseOffloadConfig",
    "MagCacheConfig",
    "ModelOffloadConfig",
    "PyramidAttentionBroadcastConfig",
    "QuantizationConfig",
    "SequentialOffloadConfig",
    "TaylorSeerCacheConfig",
    "TeaCacheConfig",
    "TensorParallelConfig",
    "VaeSlicingConfig",
    "VaeTilingConfig",
    "apply",
    "get_feature",
    "ordered",
    "parse_feature_options",
    "validate_variant_features",
]


def parse_feature_options(name: str, raw: Any, where: str) -> FeatureConfig:
    """Validated options of one feature; errors name ``where`` (file and key path)."""
    if name not in FEATURES:
        raise ConfigError(f"{where}: {unknown_choice('feature', name, FEATURES)}")
    try:
        options: FeatureConfig = FEATURES[name].parse_options(raw)
        return options
    except ValidationError as error:
        first = error.errors()[0]
        location, suffix = explain_error(FEATURES[name].config_cls, first)
        key = format_location(location)
        allowed = ", ".join(sorted(FEATURES[name].config_cls.model_fields))
        message = first["msg"] + suffix
        if first["type"] == "extra_forbidden":
            message = f"unknown option{did_you_mean(key, FEATURES[name].config_cls.model_fields)} Allowed: {allowed}"
        raise ConfigError(f"{where}.{name}.{key}: {message}") from error
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where}.{name}: {error}") from error


def validate_variant_features(features: dict[str, Any], where: str) -> dict[str, FeatureConfig]:
    """Parse every feature of a variant and reject known-incompatible combinations."""
    from accel.features.rules import check_conflicts

    parsed = {name: parse_feature_options(name, raw, where) for name, raw in features.items()}
    check_conflicts(parsed, where)
    return parsed


def ordered(names: list[str]) -> list[AnyFeature]:
    """Features in application order (by stage, then name for a stable order)."""
    return sorted((get_feature(n) for n in names), key=lambda f: (int(f.stage), f.name))
