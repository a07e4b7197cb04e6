"""The threshold axes a tune searches: one cache feature's decision threshold, inside a range.

A cache reuses a step when its decision signal (a relative change, a residual difference) stays under the
threshold, so raising the threshold reuses more steps: faster and lossier, monotonically. That is the axis
the search bisects. Its range comes from one place, ``threshold_axis``: the observed range of the feature's
decision signal where a calibration measured it (a threshold under the smallest observed signal can skip
nothing: inert, never timed), else the feature's documented default range (``DEFAULT_RANGES``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.errors import ConfigError

# feature -> (its threshold option, the default range searched when no calibration is given). The ranges span
# the libraries' defaults (cache_dit 0.24, tea_cache 0.2, first_block_cache 0.05, mag_cache 0.06) up to where the
# ladders in docs/features.md break parity on mini-flux (cache_dit 1.0, tea_cache 1.6).
DEFAULT_RANGES: dict[str, tuple[str, float, float]] = {
    "cache_dit": ("residual_diff_threshold", 0.05, 1.0),
    "tea_cache": ("rel_l1_thresh", 0.05, 2.0),
    "first_block_cache": ("threshold", 0.01, 0.5),
    "mag_cache": ("threshold", 0.01, 0.5),
}
SIGNIFICANT = 3  # digits a threshold keeps: names and configs of one value are identical on every run


def rounded(value: float) -> float:
    """``value`` to ``SIGNIFICANT`` significant digits (the variant name and the config use the same value)."""
    return float(f"{value:.{SIGNIFICANT}g}")


@dataclass(frozen=True)
class Axis:
    """One cache feature's threshold between ``low`` and ``high``, the feature's other options fixed (``base``).

    ``observed``: the range of the decision signal a calibration measured (None: not calibrated); a threshold
    below its low end is inert (``inert``). ``label`` names the axis in variant names. ``rungs``: the thresholds
    the profile's own variants give this setting (a user's ladder), screened beside the evenly spaced points so
    the search starts from every rung the user already runs."""

    feature: str
    option: str
    low: float
    high: float
    label: str
    base: dict[str, Any] = field(default_factory=dict)
    observed: tuple[float, float] | None = None
    rungs: tuple[float, ...] = ()

    @property
    def source(self) -> str:
        """Where the range came from, for the report."""
        return "calibrated signal range" if self.observed is not None else "documented default range"

    def features(self, value: float) -> dict[str, Any]:
        """The variant's features at threshold ``value``."""
        return {self.feature: {**self.base, self.option: rounded(value)}}

    def variant_name(self, value: float) -> str:
        """The variant's name at threshold ``value`` (``tea-cache-0.8``)."""
        return f"{self.label}-{rounded(value):g}"

    def inert(self, value: float) -> bool:
        """Whether a calibration shows ``value`` can skip nothing (under every observed signal)."""
        return self.observed is not None and value < self.observed[0]

    def points(self, low: float, high: float, count: int, rungs: tuple[float, ...] = ()) -> list[float]:
        """``count`` thresholds evenly inside (``low``, ``high``), and the ``rungs`` above ``low`` up to ``high``,
        rounded, sorted, without repeats."""
        values = [rounded(low + (high - low) * (i + 1) / (count + 1)) for i in range(count)]
        values = [v for v in values if low < v < high] + [v for v in map(rounded, rungs) if low < v <= high]
        return sorted(set(values))


def threshold_axis(
    feature: str,
    observed: tuple[float, float] | None = None,
    base: dict[str, Any] | None = None,
    label: str | None = None,
    override: tuple[float, float] | None = None,
) -> Axis:
    """The axis of ``feature``'s threshold: inside ``observed`` (the calibrated range of its decision signal)
    when given, else inside its documented default range; ``override`` (the profile's ``tune.ranges``) wins over
    both. ConfigError for a feature without a threshold axis or an empty range."""
    if feature not in DEFAULT_RANGES:
        raise ConfigError(
            f"tune: feature '{feature}' has no threshold axis; the tune searches the thresholds of "
            f"{', '.join(DEFAULT_RANGES)}"
        )
    option, low, high = DEFAULT_RANGES[feature]
    if observed is not None:
        low, high = observed
    if override is not None:
        low, high = override
    if not 0 <= low < high:
        raise ConfigError(f"tune: {feature}: range [{low}, {high}] is empty; give low < high, both at least 0")
    return Axis(feature, option, low, high, label or feature.replace("_", "-"), dict(base or {}), observed)
