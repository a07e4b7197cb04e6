"""Whether a cache threshold can change anything on a calibrated model, decided before anything is timed.

Each cache compares a signal with its threshold: TeaCache skips while its accumulated rescaled distance stays
below ``rel_l1_thresh``; FirstBlockCache and Cache-DiT reuse while the first blocks' residual changed less than
their threshold; MagCache skips while its accumulated error stays within ``threshold``. The calibration file
holds each signal's observed range on the calibration prompts; a threshold outside it is *inert*: it never
triggers a skip (the hooks cost time and save none), or it skips every step it may (no longer a threshold).
The range is the calibration workload's (``accel.calibration.workload``): on another one nothing is called inert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from accel.calibration.store import Calibration, load_calibration
from accel.calibration.workload import workload_difference
from accel.errors import ConfigError

# Feature -> its threshold option (what ``threshold_status`` judges).
THRESHOLD_OPTIONS = {
    "tea_cache": "rel_l1_thresh",
    "first_block_cache": "threshold",
    "cache_dit": "residual_diff_threshold",
    "mag_cache": "threshold",
}
State = Literal["in range", "never skips", "skips every step", "inert per denoiser", "not calibrated", "other workload"]
INERT_STATES = ("never skips", "skips every step", "inert per denoiser")


@dataclass(frozen=True)
class ThresholdStatus:
    """A threshold against the calibrated signal range: ``inert`` when it never skips or skips every step (on
    every denoiser; ``inert per denoiser``: never on one, every step on another); ``verdict`` says so with the
    numbers, per denoiser in ``by_denoiser``. ``other workload``: the calibration's range does not apply."""

    state: State
    verdict: str
    by_denoiser: dict[str, str] = field(default_factory=dict)

    @property
    def inert(self) -> bool:
        """True when the threshold cannot act as a threshold on this model."""
        return self.state in INERT_STATES


def _mag_skips(ratios: list[float], threshold: float, max_skip_steps: int, retention_ratio: float) -> int:
    """The steps diffusers' MagCache head hook would skip with these ratios (its logic, replayed)."""
    retention = int(retention_ratio * len(ratios) + 0.5)
    accumulated_ratio, accumulated_err, accumulated_steps, skipped = 1.0, 0.0, 0, 0
    for step, ratio in enumerate(ratios):
        if step < retention or step == 0:
            continue
        accumulated_ratio *= ratio
        accumulated_steps += 1
        accumulated_err += abs(1.0 - accumulated_ratio)
        if accumulated_err <= threshold and accumulated_steps <= max_skip_steps:
            skipped += 1
        else:
            accumulated_ratio, accumulated_err, accumulated_steps = 1.0, 0.0, 0
    return skipped


def _one(
    calibration: Calibration, denoiser: str, feature: str, threshold: float, max_skip_steps: int, retention_ratio: float
) -> tuple[State, str]:
    section = calibration.denoisers[denoiser]
    option = THRESHOLD_OPTIONS[feature]
    if feature == "tea_cache":
        fit = section.tea_cache
        if fit is None:
            return "not calibrated", f"{denoiser}: tea_cache not calibrated"
        low = fit.rescaled_change.min
        if threshold <= low:
            return "never skips", (
                f"inert: {option} {threshold:g} at or below every observed rescaled input change on {denoiser} "
                f"(min {low:.4g}): no step would be skipped"
            )
        if threshold > fit.run_total_max:
            return "skips every step", (
                f"inert: {option} {threshold:g} above the largest accumulated distance of a run on {denoiser} "
                f"(max {fit.run_total_max:.4g}): every step but the first and last would be skipped"
            )
        return (
            "in range",
            f"{denoiser}: {option} {threshold:g} within the observed distances ({fit.rescaled_change.line()})",
        )
    if feature == "mag_cache":
        mag = section.mag_cache
        if mag is None:
            return "not calibrated", f"{denoiser}: mag_cache not calibrated"
        if _mag_skips(mag.mag_ratios, threshold, max_skip_steps, retention_ratio) == 0:
            return "never skips", (
                f"inert: {option} {threshold:g} below the error of every skippable step on {denoiser} "
                f"(|1 - ratio|: {mag.error.line()}): no step would be skipped"
            )
        return "in range", f"{denoiser}: {option} {threshold:g} skips steps on the calibrated ratios"
    signal = section.first_block_cache if feature == "first_block_cache" else section.cache_dit
    if signal is None:
        return "not calibrated", f"{denoiser}: {feature} not calibrated"
    observed = signal.observed
    if threshold <= observed.min:
        return "never skips", (
            f"inert: {option} {threshold:g} below every observed {signal.signal} on {denoiser} "
            f"(min {observed.min:.4g}): no step would be cached"
        )
    if threshold > observed.max:
        return "skips every step", (
            f"inert: {option} {threshold:g} above every observed {signal.signal} on {denoiser} "
            f"(max {observed.max:.4g}): every step after the warm-up would be cached"
        )
    return "in range", f"{denoiser}: {option} {threshold:g} within the observed {signal.signal} ({observed.line()})"


def _bound(calibration: Calibration, denoiser: str, feature: str, state: State) -> float:
    """The end of ``denoiser``'s observed range that a threshold in ``state`` lies beyond."""
    section = calibration.denoisers[denoiser]
    if feature == "tea_cache" and section.tea_cache is not None:
        fit = section.tea_cache
        return fit.run_total_max if state == "skips every step" else fit.rescaled_change.min
    if feature == "mag_cache" and section.mag_cache is not None:
        return section.mag_cache.error.min
    signal = section.first_block_cache if feature == "first_block_cache" else section.cache_dit
    assert signal is not None
    return signal.observed.max if state == "skips every step" else signal.observed.min


def threshold_status(
    calibration: Calibration | str | Path,
    feature: str,
    threshold: float,
    max_skip_steps: int = 3,
    retention_ratio: float = 0.2,
    workload: Mapping[str, Any] | None = None,
) -> ThresholdStatus:
    """Whether ``threshold`` of ``feature`` (tea_cache, first_block_cache, cache_dit, mag_cache) lies inside the
    signal range calibrated for the model (a ``Calibration`` or its file). Inert when it is on every calibrated
    denoiser (never skips, or skips every step); the verdict names the threshold and the range, and which denoiser
    skips everything where they differ. ``max_skip_steps`` and ``retention_ratio``: mag_cache's options, with which
    its decisions are replayed. ``workload``: the run's steps, height, width, num_frames, guidance_scale (None or
    a key left out: not compared); where it differs from the calibration's, ``other workload``, never inert."""
    if feature not in THRESHOLD_OPTIONS:
        raise ConfigError(
            f"threshold_status: {feature} has no calibrated threshold; one of {', '.join(THRESHOLD_OPTIONS)}"
        )
    loaded = calibration if isinstance(calibration, Calibration) else load_calibration(str(calibration))
    results = {
        name: _one(loaded, name, feature, threshold, max_skip_steps, retention_ratio) for name in loaded.denoisers
    }
    by_denoiser = {name: line for name, (_, line) in results.items()}
    other = workload_difference(loaded, workload)
    if other is not None:
        return ThresholdStatus("other workload", f"{THRESHOLD_OPTIONS[feature]} {threshold:g} not judged: {other}")
    states = {state for state, _ in results.values() if state != "not calibrated"}
    if not states:
        return ThresholdStatus("not calibrated", f"{feature} not calibrated for {loaded.model}", by_denoiser)
    if len(states) == 1 and (only := next(iter(states))) != "in range":
        # The denoiser nearest the threshold names the range: the largest maximum above, the smallest minimum below.
        inert = [name for name, (state, _) in results.items() if state == only]
        bounds = {name: _bound(loaded, name, feature, only) for name in inert}
        nearest = (max if only == "skips every step" else min)(inert, key=lambda name: bounds[name])
        verdict = by_denoiser[nearest] + (" (and on every other calibrated denoiser)" if len(results) > 1 else "")
        return ThresholdStatus(only, verdict, by_denoiser)
    if "in range" not in states:  # never skips on one denoiser, skips every step on another: inert on each
        lines = [line for state, line in results.values() if state != "not calibrated"]
        everything = [name for name, (state, _) in results.items() if state == "skips every step"]
        verdict = (
            f"inert on each denoiser: {', '.join(everything)} would skip every step, the other(s) none; "
            + "; ".join(lines)
        )
        return ThresholdStatus("inert per denoiser", verdict, by_denoiser)
    return ThresholdStatus("in range", "; ".join(by_denoiser.values()), by_denoiser)


def observed_ranges(
    calibration: Calibration | str | Path, workload: Mapping[str, Any] | None = None
) -> dict[str, tuple[float, float]]:
    """The threshold range inside which each calibrated cache can act on this model, per feature, over every
    calibrated denoiser: TeaCache from the smallest rescaled step distance to the largest accumulated distance of a
    run; FirstBlockCache and Cache-DiT from the smallest to the largest observed residual difference. What
    ``omni-accel tune --calibration`` searches between (MagCache's is a replay, not a range: left to its default).
    Empty where ``workload`` differs from the calibration's (``workload_difference`` says how): no range applies."""
    loaded = calibration if isinstance(calibration, Calibration) else load_calibration(str(calibration))
    if workload_difference(loaded, workload) is not None:
        return {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for section in loaded.denoisers.values():
        if section.tea_cache is not None:
            fit = section.tea_cache
            spans.setdefault("tea_cache", []).append((fit.rescaled_change.min, fit.run_total_max))
        for feature, signal in (("first_block_cache", section.first_block_cache), ("cache_dit", section.cache_dit)):
            if signal is not None:
                spans.setdefault(feature, []).append((signal.observed.min, signal.observed.max))
    return {
        feature: (min(low for low, _ in pairs), max(high for _, high in pairs))
        for feature, pairs in spans.items()
        if max(high for _, high in pairs) > min(low for low, _ in pairs)
    }
