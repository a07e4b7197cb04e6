"""The profile's ``tune:`` section: constraints, fidelities, held-out validation and the search's shape.

The section is read by ``omni-accel tune`` only; ``omni-accel sweep`` ignores it (it is left out of the resolved
profile and its fingerprint). Every key is optional: with none, the constraints are the gate's limits.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError

from accel.errors import ConfigError
from accel.profile import MAX_SEED, StrictModel, format_validation_error


class Constraints(StrictModel):
    """What the recommended configuration must hold. Any key given replaces the gate's parity and adherence
    limits with these (the cell must still run and every feature engage); none given: the gate's verdict."""

    ssim_low: float | None = Field(
        default=None, ge=0, le=1, description="The lower bound of SSIM's 95% interval over the samples, at least."
    )
    psnr: float | None = Field(default=None, gt=0, description="Mean PSNR in dB, at least.")
    attributes_lost: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of prompt attributes lost vs the baseline, at most, by the top of its 95% interval over "
        "the images as the gate judges it (ground truth).",
    )
    per_prompt_ssim: float | None = Field(default=None, ge=0, le=1, description="Every sample's SSIM, at least.")

    @property
    def custom(self) -> bool:
        """Whether any constraint is given (else the gate's limits apply)."""
        return any(v is not None for v in self.model_dump().values())


class Fidelity(StrictModel):
    """The cheap screen: fewer prompts and fewer steps than the full workload."""

    prompts: int = Field(default=1, ge=1, description="Search prompts the cheap rounds run (the first ones).")
    steps: float = Field(default=0.5, gt=0, le=1, description="Share of the workload's steps (at least 2).")


class TuneSpec(StrictModel):
    """The ``tune:`` section of a profile."""

    objective: Literal["latency", "memory"] | None = Field(default=None, description="Default: latency.")
    constraints: Constraints = Field(default_factory=Constraints)
    cheap: Fidelity = Field(default_factory=Fidelity)
    holdout: int | None = Field(
        default=None, ge=1, description="Prompts held out for validation; default: half of them (at least one)."
    )
    validation_prompts: list[str] | None = Field(
        default=None, min_length=1, description="Validation prompts instead of held-out ones (never searched)."
    )
    validation_seeds: list[int] | None = Field(
        default=None, min_length=1, description="Validation seeds; default: as many as the workload's, unseen."
    )
    features: list[str] = Field(
        default_factory=list, description="Cache features to search besides those the profile's variants name."
    )
    ranges: dict[str, list[float]] = Field(
        default_factory=dict, description="Feature -> [low, high] threshold range, over the default or calibrated."
    )
    points: int = Field(default=3, ge=1, le=9, description="Thresholds per axis per round (k-section).")
    refine_rounds: int = Field(default=1, ge=0, le=5, description="Cheap rounds narrowing each axis after the screen.")
    survivors: int = Field(default=2, ge=1, le=5, description="Thresholds per axis re-run at full fidelity.")
    full_rounds: int = Field(
        default=2, ge=0, le=5, description="Rounds k-sectioning each axis at full fidelity after the first full round."
    )


def parse_tune_section(raw: Any, source: str) -> TuneSpec:
    """The profile's ``tune:`` section validated (empty when absent); ConfigError naming the bad key."""
    try:
        spec = TuneSpec.model_validate(raw or {})
    except ValidationError as error:
        raise ConfigError(format_validation_error(f"{source}: tune", error, TuneSpec)) from error
    for name, bounds in spec.ranges.items():
        if len(bounds) != 2:
            raise ConfigError(f"{source}: tune.ranges.{name}: give [low, high], got {bounds}")
    for seed in spec.validation_seeds or []:
        if not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"{source}: tune.validation_seeds: {seed} is not a seed (0 to {MAX_SEED})")
    return spec
