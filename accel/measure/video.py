"""Video parity against the baseline, frame by frame and over time (``accel.measure.parity`` gives the means).

Per prompt x seed (one video), with ``e_t`` the variant's frame ``t`` minus the baseline's:

- ``ssim`` and ``psnr``: one value per frame (the pinned definition of ``accel.measure.parity``): a curve,
  not only its mean, so a single broken frame is seen and named.
- ``temporal_mad``: per frame pair ``(t, t+1)``, the mean absolute difference between the variant's
  frame-to-frame change and the baseline's, ``mean |(v[t+1] - v[t]) - (b[t+1] - b[t])|`` = ``mean |e[t+1] -
  e[t]|``, in [0, 1] units. A steady error (a tint, a frozen offset) gives 0: it does not flicker.
- ``temporal_psnr``: the same change as a PSNR, ``10 log10(1 / mean((e[t+1] - e[t])^2))`` in dB (``inf`` when
  the change is the baseline's exactly). Comparable with the frames' PSNR: errors independent from frame to
  frame, each frame at P dB, give P - 3.01 dB (``INDEPENDENT_ERRORS_DB``); an error that reverses every frame
  gives P - 6.02 dB.
- ``flicker``: ``sum_t mean|e[t+1] - e[t]| / sum_t (mean|e[t]| + mean|e[t+1]|)``, from 0 to 1: 0 when the
  error holds still from frame to frame, about 0.71 when it is independent from frame to frame (Gaussian), 1
  when it reverses sign every frame; 0 for identical videos.

``video_parity`` keeps each curve and the worst frame (and frame pair) over every video, with which video and
which frame it is: the gate judges the worst (``accel.gate.video``) and the report plots the curves
(``accel.report.video``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from accel.measure.parity import Parity, parity_of_frames, psnr_frames, ssim_frames

# 10 log10(2): how far the PSNR of the frame-to-frame change of errors independent from frame to frame sits
# below the frames' own PSNR (the variance of a difference of two independent errors is twice theirs).
INDEPENDENT_ERRORS_DB = 10.0 * math.log10(2.0)

VIDEO_PARITY_DEFINITION = (
    "SSIM and PSNR per frame; temporal_mad = mean |(v[t+1]-v[t]) - (b[t+1]-b[t])| per frame pair, "
    "temporal_psnr = 10*log10(1/MSE) of that change (independent frame errors: frame PSNR - 3.01 dB), "
    "flicker = sum mean|e[t+1]-e[t]| / sum (mean|e[t]| + mean|e[t+1]|) (0 steady error, 1 reversing every frame)"
)


def _psnr(mse: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(mse == 0, math.inf, 10.0 * np.log10(1.0 / np.where(mse == 0, 1.0, mse)))


def video_curves(candidate: np.ndarray, reference: np.ndarray) -> tuple[Parity, dict[str, Any]]:
    """The parity of one (frames, H, W, 3) video against its reference, and its curves: ``ssim`` and ``psnr``
    per frame, ``temporal_mad`` and ``temporal_psnr`` per frame pair, and ``flicker`` (module docstring)."""
    if candidate.shape != reference.shape:
        raise ValueError(f"output shape {candidate.shape} differs from the baseline's {reference.shape}")
    ssim = ssim_frames(candidate, reference)
    psnr = psnr_frames(candidate, reference)
    error = candidate.astype(np.float64) - reference.astype(np.float64)
    frames = error.shape[0]
    flat = error.reshape(frames, -1)
    change = np.diff(flat, axis=0)  # e[t+1] - e[t]: the variant's frame-to-frame change minus the baseline's
    temporal_mad = np.abs(change).mean(axis=1)
    temporal_psnr = _psnr((change**2).mean(axis=1))
    level = np.abs(flat).mean(axis=1)
    denominator = float((level[:-1] + level[1:]).sum())
    flicker = float(temporal_mad.sum()) / denominator if denominator > 0 else 0.0
    curves = {
        "ssim": [float(x) for x in ssim],
        "psnr": [float(x) for x in psnr],
        "temporal_mad": [float(x) for x in temporal_mad],
        "temporal_psnr": [float(x) for x in temporal_psnr],
        "flicker": flicker,
    }
    return parity_of_frames(candidate, reference, ssim, psnr), curves


def _worst(curves: Mapping[str, dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The lowest value of ``metric`` over every video's curve: ``{sample, frame, value}`` (the first such frame
    of the first such video when several tie), or None when no curve has a value."""
    found: dict[str, Any] | None = None
    for sample, curve in curves.items():
        for frame, value in enumerate(curve[metric]):
            if found is None or value < found["value"]:
                found = {"sample": sample, "frame": frame, "value": value}
    return found


def video_parity(curves: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The record's ``video_parity`` from each video's curves (``video_curves``), keyed by prompt x seed.

    ``frames`` per video; ``samples``: the curves; ``worst_ssim``, ``worst_psnr``: the lowest frame over every
    video, ``{sample, frame, value}``; ``worst_temporal_psnr``: the lowest frame pair (``frame`` is the pair's
    first frame; None for one-frame videos); ``temporal_mad``: the mean over every pair of every video;
    ``flicker``: the highest of the videos'.
    """
    if not curves:
        raise ValueError("no video to summarise: pass one curve per prompt x seed")
    pairs = [x for curve in curves.values() for x in curve["temporal_mad"]]
    return {
        "frames": len(next(iter(curves.values()))["ssim"]),
        "samples": dict(curves),
        "worst_ssim": _worst(curves, "ssim"),
        "worst_psnr": _worst(curves, "psnr"),
        "worst_temporal_psnr": _worst(curves, "temporal_psnr"),
        "temporal_mad": float(np.mean(pairs)) if pairs else 0.0,
        "flicker": max(float(curve["flicker"]) for curve in curves.values()),
    }
