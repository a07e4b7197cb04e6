"""Parity metrics against the baseline, with one pinned definition.

- SSIM: Gaussian window 11, sigma 1.5, data range 1.0, constants K1 0.01 and K2 0.03, on RGB float in
  [0, 1], channels averaged, over the pixels where the whole window fits (a 5-pixel border left out, as
  scikit-image does; the map is torchmetrics', checked against scikit-image in the tests). Variances and
  the covariance are population (Gaussian-weighted, normalised by N, not N - 1): scikit-image's
  ``structural_similarity(..., gaussian_weights=True, use_sample_covariance=False)``. Its default,
  sample covariance, gives a different number. Images must be at least 11x11.
- PSNR: ``10 log10(1 / MSE)`` in float64 over all pixels and channels, data range 1.0; identical
  outputs give ``inf`` (stored as JSON ``Infinity`` and printed as ``inf``).
- Mean and max absolute pixel difference in [0, 1] units.
- Video: every metric per frame; the reported value is the mean over frames, with the minimum SSIM and
  PSNR kept beside it (the curves, the worst frame named and the temporal consistency: ``accel.measure.video``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

PARITY_DEFINITION = (
    "SSIM: Gaussian window 11, sigma 1.5, data range 1.0, RGB float [0,1], channel mean, 5-pixel border "
    "excluded, population covariance (as scikit-image with use_sample_covariance=False; torchmetrics map); "
    "PSNR: 10*log10(1/MSE) in float64, data range 1.0, identical outputs = inf; "
    "abs diff in [0,1] units; video: per-frame values, mean and minimum over frames"
)


BORDER = 5  # (window 11 - 1) / 2


def ssim_frames(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM of each frame pair; ``a`` and ``b`` are (frames, H, W, 3) float in [0, 1]."""
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure

    ta = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).permute(0, 3, 1, 2)
    tb = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float64)).permute(0, 3, 1, 2)
    _, ssim_map = structural_similarity_index_measure(
        ta,
        tb,
        gaussian_kernel=True,
        sigma=1.5,
        kernel_size=11,
        data_range=1.0,
        reduction="none",
        return_full_image=True,
    )
    # torchmetrics averages over the reflect-padded border too; the pinned definition (and scikit-image)
    # leaves out the border where the window does not fit: 5 pixels for an 11-pixel window.
    inner = ssim_map[..., BORDER:-BORDER, BORDER:-BORDER]
    return inner.reshape(inner.shape[0], -1).mean(dim=1).numpy().astype(np.float64)


def psnr_frames(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PSNR in dB of each frame pair, float64; ``inf`` where frames are identical."""
    diff = a.astype(np.float64) - b.astype(np.float64)
    mse = (diff**2).reshape(diff.shape[0], -1).mean(axis=1)
    with np.errstate(divide="ignore"):
        return np.where(mse == 0, math.inf, 10.0 * np.log10(1.0 / np.where(mse == 0, 1.0, mse)))


@dataclass(frozen=True)
class Parity:
    """Parity of one output (or a set of outputs) against the baseline."""

    ssim: float
    ssim_min: float
    psnr: float
    psnr_min: float
    mean_abs_diff: float
    max_abs_diff: float
    bit_identical: bool

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


def compare(candidate: np.ndarray, reference: np.ndarray) -> Parity:
    """Parity of one (frames, H, W, 3) output against its reference."""
    if candidate.shape != reference.shape:
        raise ValueError(f"output shape {candidate.shape} differs from the baseline's {reference.shape}")
    return parity_of_frames(candidate, reference, ssim_frames(candidate, reference), psnr_frames(candidate, reference))


def parity_of_frames(candidate: np.ndarray, reference: np.ndarray, ssim: np.ndarray, psnr: np.ndarray) -> Parity:
    """The ``Parity`` of two outputs of the same shape from their per-frame SSIM and PSNR (``ssim_frames``,
    ``psnr_frames``), so a caller that keeps the per-frame curves computes them once."""
    diff = np.abs(candidate.astype(np.float64) - reference.astype(np.float64))
    return Parity(
        ssim=float(ssim.mean()),
        ssim_min=float(ssim.min()),
        psnr=_mean_psnr(psnr),
        psnr_min=float(psnr.min()),
        mean_abs_diff=float(diff.mean()),
        max_abs_diff=float(diff.max()),
        bit_identical=bool(np.array_equal(candidate, reference)),
    )


def _mean_psnr(values: np.ndarray) -> float:
    return math.inf if np.isinf(values).all() else float(values[np.isfinite(values)].mean())


def aggregate(parities: list[Parity]) -> Parity:
    """Combine the parity of every prompt x seed sample: means of means, minima of minima, max of max."""
    return Parity(
        ssim=float(np.mean([p.ssim for p in parities])),
        ssim_min=float(min(p.ssim_min for p in parities)),
        psnr=_mean_psnr(np.array([p.psnr for p in parities])),
        psnr_min=float(min(p.psnr_min for p in parities)),
        mean_abs_diff=float(np.mean([p.mean_abs_diff for p in parities])),
        max_abs_diff=float(max(p.max_abs_diff for p in parities)),
        bit_identical=all(p.bit_identical for p in parities),
    )
