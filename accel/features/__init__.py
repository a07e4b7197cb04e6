"""Registry of acceleration features: one module per family registers its features here.

``FEATURES`` maps the user-facing name (the spelling used in YAML, the CLI and results) to the feature.
Conflicts are data in ``feature_matrix/rules.yaml``; the application order is each feature's ``stage``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from accel.errors import ConfigError, did_you_mean, unknown_choice
from accel.features import cache, offload
from accel.features.attention import AttentionBackend
from accel.features.base import Feature, FeatureConfig
from accel.features.compile import Compile
from accel.features.quant import Quantization
from accel.features.teacache import TeaCache
from accel.features.vae import VaeSlicing, VaeTiling

FEATURES: dict[str, Feature] = {
    feature.name: feature
    for feature in (
        Compile(),
        cache.CacheDit(),
        TeaCache(),
        cache.FirstBlockCache(),
        cache.MagCache(),
        cache.TaylorSeerCache(),
        cache.PyramidAttentionBroadcast(),
        cache.FasterCache(),
        Quantization(),
        offload.ModelOffload(),
        offload.SequentialOffload(),
        offload.GroupOffload(),
        offload.LayerwiseOffload(),
        VaeTiling(),
        VaeSlicing(),
        AttentionBackend(),
    )
}


def get_feature(name: str) -> Feature:
    """The feature registered as ``name``; a ConfigError listing the names otherwise."""
    if name not in FEATURES:
        raise ConfigError(unknown_choice("feature", name, FEATURES))
    return FEATURES[name]


def parse_feature_options(name: str, raw: Any, where: str) -> FeatureConfig:
    """Validated options of one feature; errors name ``where`` (file and key path)."""
    if name not in FEATURES:
        raise ConfigError(f"{where}: {unknown_choice('feature', name, FEATURES)}")
    try:
        return FEATURES[name].parse_options(raw)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        allowed = ", ".join(sorted(FEATURES[name].config_cls.model_fields))
        message = first["msg"]
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


def ordered(names: list[str]) -> list[Feature]:
    """Features in application order (by stage, then name for a stable order)."""
    return sorted((FEATURES[n] for n in names), key=lambda f: (int(f.stage), f.name))
