"""What a tune hands back besides its report: the recommendation as a profile ``omni-accel sweep`` runs as
it is, the ``apply(...)`` call that applies it from Python, and the serving engine's arguments where the
mapping knows the features (``accel.engines.mapping``)."""

from __future__ import annotations

from typing import Any

import yaml

from accel.profile import ModelSpec, Profile

RECOMMENDED_FILE = "recommended.yaml"
TUNED_VARIANT = "tuned"


def recommended_profile(profile: Profile, model: ModelSpec, features: dict[str, Any], why: str) -> dict[str, Any]:
    """The profile data of the recommendation: ``model`` on the profile's own workload and measurement, with the
    recommended features as its one variant (the tune section left out: this profile is swept, not tuned)."""
    data = profile.model_dump(mode="json", exclude_unset=True, exclude={"variants", "combinations", "models"})
    data["name"] = f"{profile.name}-tuned"
    data["description"] = why
    data["models"] = [model.model_dump(mode="json", exclude_unset=True)]
    data["variants"] = [{"name": TUNED_VARIANT, "features": features}]
    measure = data.get("measure") or {}
    measure.pop("reference_model", None)
    if measure:
        data["measure"] = measure
    return data


def profile_yaml(data: dict[str, Any]) -> str:
    """The profile as YAML, with a header saying where it came from."""
    header = "# Written by `omni-accel tune`: run it with `omni-accel sweep recommended.yaml --out DIR`.\n"
    return header + yaml.safe_dump(data, sort_keys=False)


def apply_snippet(features: dict[str, Any]) -> str:
    """Python applying ``features`` with ``accel.apply`` (config classes with the options that differ from
    their defaults)."""
    from accel.features import ordered, parse_feature_options

    configs = {name: parse_feature_options(name, raw, "tune") for name, raw in features.items()}
    imports, calls = [], []
    for feature in ordered(list(configs)):
        config = configs[feature.name]
        cls = type(config)
        imports.append(f"from {cls.__module__} import {cls.__name__}")
        options = config.model_dump(mode="json", exclude_defaults=True)
        calls.append(f"{cls.__name__}(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")")
    lines = ["from accel import apply", *sorted(set(imports)), "", f"with apply(pipe, {', '.join(calls)}) as applied:"]
    lines += ["    image = pipe(prompt, num_inference_steps=STEPS).images[0]", "print(applied.evidence())"]
    return "\n".join(lines)


def engine_arguments(features: dict[str, Any]) -> dict[str, Any]:
    """Per engine path, the keyword arguments of the features, or why the path has no equivalent."""
    from accel.engines.mapping import PATHS, map_variant

    out: dict[str, Any] = {}
    for path in PATHS:
        call = map_variant(features, path)
        out[path] = {"unsupported": call.unsupported} if call.unsupported else call.kwargs
    return out
