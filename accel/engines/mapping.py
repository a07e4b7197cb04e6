"""Feature mapping onto an engine's keyword arguments, as data (``feature_matrix/engines/<engine>.yaml``).

``map_variant`` turns a variant's features into the engine's kwargs for one path (``vllm-omni`` or
``vllm-omni-adapter``), or says why it cannot: unsupported by the engine, rejected by it on that path
(its own words), or accepted but skipped on this device (then not counted as engaged).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from accel.errors import ConfigError

PATHS = ("vllm-omni", "vllm-omni-adapter")


@dataclass
class EngineCall:
    """Keyword arguments for the engine, or the reason the variant cannot run there."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    unsupported: str | None = None
    skipped: list[str] = field(default_factory=list)  # accepted by the engine, not done on this device


@functools.cache
def load_mapping(engine: str = "vllm-omni", path: Path | None = None) -> dict[str, Any]:
    """The mapping document of an engine."""
    from accel.profile import data_dir

    path = path or data_dir("feature_matrix") / "engines" / f"{engine}.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: no feature mapping for engine '{engine}'")
    return yaml.safe_load(path.read_text())


def map_variant(
    features: dict[str, Any], path: str, device: str = "cpu", mapping: dict[str, Any] | None = None
) -> EngineCall:
    """Engine kwargs for a variant's features on one path."""
    from accel.features import parse_feature_options

    if path not in PATHS:
        raise ConfigError(f"unknown engine path '{path}'. Allowed: {', '.join(PATHS)}")
    mapping = mapping or load_mapping()
    path_info = mapping["paths"][path]
    call = EngineCall(kwargs=dict(path_info.get("kwargs", {})))
    for name, raw in features.items():
        entry = mapping["features"].get(name)
        if entry is None or "unsupported" in (entry or {}):
            reason = (entry or {}).get("unsupported") or f"no vLLM-Omni mapping for feature {name}"
            return EngineCall(unsupported=f"{name}: {reason}")
        rejected = (path_info.get("rejects") or {}).get(name)
        if rejected:
            return EngineCall(unsupported=f"{name}: rejected by {path}: {rejected}")
        options = parse_feature_options(name, raw, "variant").model_dump()
        call.kwargs.update(entry.get("kwargs", {}))
        for option, kwarg in (entry.get("option_kwargs") or {}).items():
            value = options.get(option)
            if value is None:
                continue
            values = entry.get("values")
            if values is not None:
                if value not in values:
                    return EngineCall(unsupported=f"{name}: vLLM-Omni has no equivalent of {option}={value}")
                value = values[value]
            call.kwargs[kwarg] = value
        if entry.get("config_key"):
            config = {k: options[k] for k in entry.get("options", []) if options.get(k) is not None}
            call.kwargs[entry["config_key"]] = config
        if device == "cpu" and name in (mapping.get("skipped_on_cpu") or {}):
            call.skipped.append(f"{name}: {mapping['skipped_on_cpu'][name]}")
    if "enforce_eager" in call.kwargs and path == "vllm-omni-adapter" and call.kwargs["enforce_eager"]:
        return EngineCall(unsupported="enforce_eager: Eager execution is not supported with the diffusers backend")
    return call
