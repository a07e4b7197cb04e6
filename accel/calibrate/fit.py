"""TeaCache's polynomial fit (np.polyfit, degree 4 as TeaCache's authors) with its quality, and MagCache's ratios."""

from __future__ import annotations

import numpy as np

from accel.calibration.store import MagCacheCalibration, Percentiles, TeaCacheFit
from accel.errors import ConfigError

DEGREE = 4  # TeaCache's authors fit degree 4 (ali-vilab/TeaCache #2: np.polyfit over their prompts)


def fit_tea_cache(runs: list[list[tuple[float, float]]], steps: int, degree: int = DEGREE) -> TeaCacheFit:
    """Fit the rescaling polynomial on (input change, output change) pairs, one list per run and stream.

    The degree falls to the number of distinct input changes less one when there are fewer (a model whose
    modulated input is the timestep embedding changes identically on every prompt). ``steps``: the run's steps;
    the run totals leave out the first and last steps (TeaCache always computes them)."""
    pairs = [pair for run in runs for pair in run]
    if len(pairs) < 2:
        raise ConfigError(
            f"TeaCache calibration needs at least 2 (input change, output change) pairs, got {len(pairs)}: "
            "calibrate with more steps (at least 3)"
        )
    x = np.asarray([p[0] for p in pairs], dtype=float)
    y = np.asarray([p[1] for p in pairs], dtype=float)
    used = max(1, min(degree, len(np.unique(np.round(x, 12))) - 1))
    coefficients = np.polyfit(x, y, used)
    predicted = np.polyval(coefficients, x)
    residual = y - predicted
    spread = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / spread if spread > 0 else 1.0
    rescale = np.poly1d(coefficients)
    rescaled = [float(rescale(change)) for change in x]
    totals = [sum(float(rescale(c)) for c, _ in run[: max(0, steps - 2)]) for run in runs if run]
    return TeaCacheFit(
        coefficients=[float(c) for c in coefficients],
        degree=used,
        points=len(pairs),
        r2=r2,
        residual_rms=float(np.sqrt((residual**2).mean())),
        residual_max=float(np.abs(residual).max()),
        input_change=Percentiles.of(list(x)),
        output_change=Percentiles.of(list(y)),
        rescaled_change=Percentiles.of(rescaled),
        run_total_max=max(totals) if totals else 0.0,
    )


def average_ratios(lists: list[list[float]]) -> MagCacheCalibration:
    """MagCache's ratios averaged over the lists diffusers' calibration mode logged (one per run and CFG branch,
    all of one length: the denoiser's steps)."""
    lengths = {len(ratios) for ratios in lists}
    if not lists or len(lengths) != 1:
        raise ConfigError(
            f"MagCache calibration logged {len(lists)} ratio lists of lengths {sorted(lengths)}; expected lists of "
            "one length (the denoiser's steps): calibrate with a fixed step count"
        )
    mean = np.asarray(lists, dtype=float).mean(axis=0)
    errors = [abs(1.0 - float(r)) for ratios in lists for r in ratios[1:]]
    return MagCacheCalibration(
        mag_ratios=[float(r) for r in mean],
        steps=lengths.pop(),
        runs=len(lists),
        error=Percentiles.of(errors or [0.0]),
    )
