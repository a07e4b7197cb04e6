"""A profile's variants expanded once: the explicit ones, then those its ``combinations`` section plans,
each with its feature options parsed into config objects and checked for conflicts.

``Profile.variant_plan()`` computes this once per loaded profile (``parse_profile`` does it first, so a bad
option is reported at load with the profile's file and key); the sweep's cells, the engines mapping and
``omni-accel plan`` use the parsed configs and never parse a variant's options again. Records keep the
options as written (``features``), which is what the gate and tables read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.errors import ConfigError
from accel.features.base import FeatureConfig
from accel.features.combinations import PairwisePlan, plan_pairwise


@dataclass(frozen=True)
class PlannedVariant:
    """One variant to run: its options as written and parsed, and the models it runs on (None: all)."""

    name: str
    features: dict[str, Any]
    configs: dict[str, FeatureConfig]
    models: list[str] | None = None
    generated: bool = False  # planned by the profile's combinations section


@dataclass(frozen=True)
class VariantPlan:
    """Every variant of a profile in order, and the pairwise plan when the profile has one."""

    variants: list[PlannedVariant] = field(default_factory=list)
    pairwise: PairwisePlan | None = None


def plan_variants(variants: list[Any], combinations: Any, source: str) -> VariantPlan:
    """Parse the explicit ``variants`` (profile ``Variant`` objects) and expand ``combinations`` (or None).

    ConfigError naming ``source`` and the key on an unknown feature, a bad option, a conflict, or a generated
    name that clashes with an explicit variant.
    """
    from accel.features import validate_variant_features

    planned = [
        PlannedVariant(
            name=variant.name,
            features=dict(variant.features),
            configs=validate_variant_features(variant.features, f"{source}: variants[{index}].features"),
            models=variant.models,
        )
        for index, variant in enumerate(variants)
    ]
    pairwise = None
    if combinations is not None:
        pairwise = plan_pairwise(combinations.features, f"{source}: combinations", combinations.prefix)
        names = {variant.name for variant in planned}
        for generated in pairwise.variants:
            if generated["name"] in names:
                raise ConfigError(
                    f"{source}: combinations.prefix: generated variant '{generated['name']}' clashes with an "
                    "explicit variant; choose another prefix"
                )
            planned.append(  # plan_pairwise parsed the options and kept every variant within the rules
                PlannedVariant(
                    name=generated["name"],
                    features=dict(generated["features"]),
                    configs=dict(generated["configs"]),
                    generated=True,
                )
            )
    return VariantPlan(planned, pairwise)
