"""Feature mapping onto an engine's keyword arguments, as data (``feature_matrix/engines/<engine>.yaml``).

``map_variant`` turns a variant's features into the engine's kwargs for one path (``vllm-omni`` or
``vllm-omni-adapter``), or says why it cannot without running the engine (a *declared* decision): the
engine has no equivalent, or the mapping could not tell this setting from another one (two option values
onto one engine value, or an option the engine has no keyword for).

``read_engine_log`` decides from what the engine itself printed during a run (a *measured* decision):
whether it refused a feature (its own error message, per path or device), and which features it shows
evidence of having engaged (its own log lines). Nothing counts as engaged on acceptance alone.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import ConfigError
from accel.targets.registry import engine_targets

PATHS = engine_targets()  # the engine target kinds
# How an engine cell was decided: from the mapping alone, without running the engine, or by running it.
DECLARED = "declared"
MEASURED = "measured"


@dataclass
class EngineCall:
    """Keyword arguments for the engine, or the reason the variant cannot run there (declared)."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    unsupported: str | None = None


@dataclass
class EngineOutcome:
    """What one engine run's log says: a refusal (its own words) or per-feature evidence."""

    refused: str | None = None  # "feature: the engine's message"
    refused_scope: str | None = None  # "model" (this path refuses it) or "environment" (this device)
    skipped: str | None = None  # "feature: the engine's message" when it accepted and did not apply it here
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)


def _mapping_file(engine: str) -> Path:
    from accel.data import data_dir

    return data_dir("feature_matrix") / "engines" / f"{engine}.yaml"


@functools.cache
def load_mapping(engine: str = "vllm-omni", path: Path | None = None) -> dict[str, Any]:
    """The mapping document of an engine, checked: each feature's option values map one to one."""
    path = path or _mapping_file(engine)
    if not path.is_file():
        raise ConfigError(f"{path}: no feature mapping for engine '{engine}'")
    from accel.yaml_bounds import load_yaml_file

    mapping: dict[str, Any] = load_yaml_file(path, "engine mapping")
    for name, entry in (mapping.get("features") or {}).items():
        values = (entry or {}).get("values") or {}
        seen: dict[Any, str] = {}
        for ours, theirs in values.items():
            if theirs in seen:
                raise ConfigError(
                    f"{path}: features.{name}.values: {seen[theirs]} and {ours} both map to {theirs}: the engine "
                    f"could not tell them apart; keep one and list the other under features.{name}.indistinct "
                    "with the reason"
                )
            seen[theirs] = ours
    return mapping


def _untranslated(name: str, options: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """An option set away from its default that the mapping has no engine keyword for."""
    from accel.features import FEATURES

    translated = set(entry.get("option_kwargs") or {}) | set(entry.get("options") or [])
    defaults = FEATURES[name].config_cls().model_dump()
    for option, value in options.items():
        if option not in translated and value != defaults.get(option):
            return f"{name}: vLLM-Omni has no equivalent of {option}={value} (its {name} takes no such setting)"
    return None


def map_variant(
    features: dict[str, Any], path: str, device: str = "cpu", mapping: dict[str, Any] | None = None
) -> EngineCall:
    """Engine kwargs for a variant's features (name -> config object or raw options) on one path, or the
    declared reason it cannot run."""
    from accel.features import parse_feature_options
    from accel.features.base import FeatureConfig

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
        # A config object from the profile's variant plan; a raw option (tests, scripts) is parsed here.
        options = (raw if isinstance(raw, FeatureConfig) else parse_feature_options(name, raw, "variant")).model_dump()
        untranslated = _untranslated(name, options, entry)
        if untranslated:
            return EngineCall(unsupported=untranslated)
        call.kwargs.update(entry.get("kwargs", {}))
        for option, kwarg in (entry.get("option_kwargs") or {}).items():
            value = options.get(option)
            if value is None:
                continue
            indistinct = (entry.get("indistinct") or {}).get(value)
            if indistinct:
                reason = f"{name}: {option}={value} cannot be told apart on vLLM-Omni: {indistinct}"
                return EngineCall(unsupported=reason)
            values = entry.get("values")
            if values is not None:
                if value not in values:
                    return EngineCall(unsupported=f"{name}: vLLM-Omni has no equivalent of {option}={value}")
                value = values[value]
            call.kwargs[kwarg] = value
        if entry.get("config_key"):
            config = {k: options[k] for k in entry.get("options", []) if options.get(k) is not None}
            call.kwargs[entry["config_key"]] = config
    return call


def _first_match(pattern: str, log: str) -> str | None:
    found = re.search(pattern, log, flags=re.MULTILINE)
    return found.group(0).strip() if found else None


def read_engine_log(
    features: dict[str, Any], path: str, device: str, log: str, failed: bool, mapping: dict[str, Any] | None = None
) -> EngineOutcome:
    """Refusals and engagement evidence of one engine run, from the engine's own output.

    A failed run whose output holds one of the refusal messages of this path (``paths.<path>.refuses``) or
    device (``devices.<device>.refuses``) for a feature of the variant is that feature's refusal. Each
    feature with an ``evidence`` pattern found in the output has engaged; the others have no evidence
    from the engine (a lossy one may still show an effect on the output: see ``gate.judge_engine_engagement``).
    """
    mapping = mapping or load_mapping()
    outcome = EngineOutcome()
    device_kind = "cpu" if device == "cpu" else "cuda" if device.startswith("cuda") else device
    device_info = (mapping.get("devices") or {}).get(device_kind) or {}
    if failed:
        for scope, table in (
            ("model", (mapping["paths"][path].get("refuses") or {})),
            ("environment", device_info.get("refuses") or {}),
        ):
            for name in features:
                pattern = (table.get(name) or {}).get("message")
                message = _first_match(pattern, log) if pattern else None
                if message:
                    where = f"on {path}" if scope == "model" else f"on this {device_kind} host"
                    outcome.refused = f"{name}: refused by vLLM-Omni {where}: {message}"
                    outcome.refused_scope = scope
                    return outcome
        return outcome
    for name in features:
        pattern = ((device_info.get("skips") or {}).get(name) or {}).get("message")
        message = _first_match(pattern, log) if pattern else None
        if message:
            outcome.skipped = f"{name}: accepted, then skipped by vLLM-Omni on this {device_kind} host: {message}"
            return outcome
    for name in features:
        pattern = (mapping["features"].get(name) or {}).get("evidence", {}).get("message")
        line = _first_match(pattern, log) if pattern else None
        if line:
            outcome.evidence[name] = {"engaged": True, "summary": f"vLLM-Omni logged: {line}", "engine_log": line}
        else:
            summary = "accepted by vLLM-Omni; no log line of it engaging" if pattern else "accepted by vLLM-Omni"
            outcome.evidence[name] = {"engaged": False, "summary": summary}
    return outcome
