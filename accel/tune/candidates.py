"""What a tune searches, read from the profile: threshold axes, fixed candidates, and the pairs to combine.

Every feature the profile's variants name (for the tuned model) becomes part of the search: a cache with a
threshold becomes an axis (``accel.tune.axes``; one per distinct setting of its other options), any other
feature a fixed candidate with the options the variant gives it. A lossless candidate is admitted only once
the gate's lossless verdict passed it; a ``quantization`` candidate leaves out the layers the per-layer
sensitivity table names (``exclude_for``, ``accel.diverge.sensitivity``). Combinations pair the best of one
axis with an admitted candidate, only where the conflict rules and the stage order allow the pair
(``accel.features.rules``, as the pairwise planner does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from accel.features.base import FeatureClass
from accel.profile import Profile
from accel.tune.axes import DEFAULT_RANGES, Axis, threshold_axis

LOSSLESS = "lossless"
LOSSY = "lossy"


@dataclass(frozen=True)
class Candidate:
    """A configuration to evaluate: its variant name, its features (as a profile writes them) and its kind
    (``lossless``, ``lossy``, ``threshold``, ``combination``)."""

    name: str
    features: dict[str, Any]
    kind: str


@dataclass
class Space:
    """Everything the search may evaluate for one model."""

    axes: list[Axis] = field(default_factory=list)
    fixed: list[Candidate] = field(default_factory=list)


def _feature_class(name: str, raw: Any) -> str:
    from accel.features import FEATURES, parse_feature_options

    config = parse_feature_options(name, raw, "tune")
    lossless = FEATURES[name].feature_class_for(config) == FeatureClass.LOSSLESS
    return LOSSLESS if lossless else LOSSY


def _base_options(name: str, raw: Any) -> dict[str, Any]:
    """The variant's options of cache ``name`` other than its threshold, as written (non-default ones)."""
    from accel.features import parse_feature_options

    option = DEFAULT_RANGES[name][0]
    written = parse_feature_options(name, raw, "tune").model_dump(mode="json", exclude_defaults=True)
    return {key: value for key, value in sorted(written.items()) if key != option}


def build_space(
    profile: Profile,
    model: str,
    extra_features: list[str] | None = None,
    observed: dict[str, tuple[float, float]] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
    exclude_for: Callable[[str], list[str]] | None = None,
) -> Space:
    """The search space of ``model``: an axis per cache setting the profile's variants name (plus
    ``extra_features``), ranged by ``observed`` (calibrated signal ranges), else the default ranges, with
    ``ranges`` over both; a fixed candidate per other single-feature variant. ``exclude_for(variant)``: the
    layers a quantization variant leaves out (the sensitivity table's pick)."""
    space = Space()
    seen: set[tuple[str, str]] = set()

    rungs: dict[tuple[str, str], list[float]] = {}

    def add_axis(name: str, base: dict[str, Any], rung: float | None = None) -> None:
        key = (name, repr(sorted(base.items())))
        if rung is not None:
            rungs.setdefault(key, []).append(rung)
        if key in seen:
            return
        seen.add(key)
        count = sum(1 for axis in space.axes if axis.feature == name)
        label = name.replace("_", "-") + (f"-{count + 1}" if count else "")
        calibrated = (observed or {}).get(name)
        space.axes.append(threshold_axis(name, calibrated, base, label, (ranges or {}).get(name)))

    for variant in profile.variant_plan().variants:
        if variant.models is not None and model not in variant.models:
            continue
        for name, raw in variant.features.items():
            if name in DEFAULT_RANGES:
                add_axis(name, _base_options(name, raw), _threshold(name, raw))
        if len(variant.features) != 1 or next(iter(variant.features)) in DEFAULT_RANGES:
            continue
        name, raw = next(iter(variant.features.items()))
        features = {name: raw}
        if name == "quantization" and exclude_for is not None:
            options = dict(raw) if isinstance(raw, dict) else {}
            features = {name: {**options, "exclude": sorted(exclude_for(variant.name))}}
        space.fixed.append(Candidate(variant.name, features, _feature_class(name, raw)))
    for name in extra_features or []:
        add_axis(name, {})
    space.axes = [
        replace(axis, rungs=tuple(sorted(set(rungs.get((axis.feature, repr(sorted(axis.base.items()))), [])))))
        for axis in space.axes
    ]
    return space


def _threshold(name: str, raw: Any) -> float:
    """The threshold a variant gives cache ``name`` (its default where the variant leaves it out)."""
    from accel.features import parse_feature_options

    return float(getattr(parse_feature_options(name, raw, "tune"), DEFAULT_RANGES[name][0]))


def compatible(features: dict[str, Any]) -> bool:
    """Whether these features may run together: they parse and no conflict rule refuses them (the check every
    variant of a profile passes, ``validate_variant_features``)."""
    from accel.errors import ConfigError
    from accel.features import validate_variant_features

    try:
        validate_variant_features(features, "tune")
    except ConfigError:
        return False
    return True


def combine(first: Candidate, second: Candidate) -> Candidate | None:
    """The pair as one candidate, or None when a rule refuses it or both set one feature."""
    if set(first.features) & set(second.features):
        return None
    features = {**first.features, **second.features}
    if not compatible(features):
        return None
    return Candidate(f"{first.name}+{second.name}", features, "combination")
