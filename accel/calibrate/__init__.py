"""Calibration per model (``omni-accel calibrate``): what each cache needs to know about a model before it runs.

TeaCache's rescaling polynomial and MagCache's magnitude ratios are fitted per model (per denoiser where a pipeline
has two), and the observed range of every cache's decision signal is kept, so a threshold that can never act is
called inert before anything is timed. The file format is ``accel.calibration.store``; the measurement
``accel.calibrate.run``; the inert check ``accel.calibration.inert``. Public API::

    from accel.calibrate import calibrate, load_calibration, threshold_status
    calibration = calibrate("profiles/calibration.yaml", "tiny-wan22", out="calibration/tiny-wan22.yaml")
    threshold_status(calibration, "cache_dit", 0.24).verdict
"""

from __future__ import annotations

from accel.calibrate.profile import calibrate
from accel.calibration.inert import THRESHOLD_OPTIONS, ThresholdStatus, observed_ranges, threshold_status
from accel.calibration.store import Calibration, load_calibration, save_calibration

__all__ = [
    "THRESHOLD_OPTIONS",
    "Calibration",
    "ThresholdStatus",
    "calibrate",
    "load_calibration",
    "observed_ranges",
    "save_calibration",
    "threshold_status",
]
