"""Parity metrics: agreement with scikit-image and the identical / changed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from accel.measure.parity import aggregate, compare, psnr_frames, ssim_frames


def _skimage_ssim(a: np.ndarray, b: np.ndarray) -> float:
    return structural_similarity(
        a.astype(np.float64),
        b.astype(np.float64),
        channel_axis=-1,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=1.0,
    )


def _random_pair(seed: int, size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random((size, size, 3))
    b = np.clip(a + rng.normal(0, 0.05 * (seed + 1), a.shape), 0, 1)
    return a, b


def _structured_pair(size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    y, x = np.mgrid[0:size, 0:size] / size
    a = np.stack([x, y, (x + y) / 2], axis=-1)
    checker = ((np.arange(size)[:, None] // 8 + np.arange(size)[None, :] // 8) % 2).astype(np.float64)
    b = np.clip(0.8 * a + 0.2 * checker[..., None], 0, 1)
    return a, b


@pytest.mark.parametrize("pair", [_random_pair(0), _random_pair(3), _structured_pair()], ids=["rand0", "rand3", "grid"])
def test_ssim_and_psnr_agree_with_scikit_image(pair):
    a, b = pair
    ours_ssim = ssim_frames(a[None], b[None])[0]
    ours_psnr = psnr_frames(a[None], b[None])[0]
    assert abs(ours_ssim - _skimage_ssim(a, b)) < 1e-3
    assert abs(ours_psnr - peak_signal_noise_ratio(a, b, data_range=1.0)) < 1e-3
    assert ours_ssim < 0.99


def test_identical_outputs_give_ssim_one_and_infinite_psnr():
    a, _ = _random_pair(1)
    parity = compare(a[None].astype(np.float32), a[None].astype(np.float32))
    assert parity.ssim == pytest.approx(1.0, abs=1e-9)
    assert math.isinf(parity.psnr) and parity.psnr > 0
    assert parity.max_abs_diff == 0.0 and parity.bit_identical


def test_changed_output_gives_ssim_below_one_and_finite_psnr():
    a, b = _random_pair(0)
    parity = compare(b[None], a[None])
    assert parity.ssim < 1.0
    assert math.isfinite(parity.psnr)
    assert parity.max_abs_diff > 0 and not parity.bit_identical


def test_video_metrics_are_per_frame_with_mean_and_minimum():
    a, b = _random_pair(0)
    video_ref = np.stack([a, a, a])
    video = np.stack([a, b, a])  # only the middle frame differs
    parity = compare(video, video_ref)
    frame_ssim = _skimage_ssim(b, a)
    assert parity.ssim_min == pytest.approx(frame_ssim, abs=1e-3)
    assert parity.ssim == pytest.approx((2 + frame_ssim) / 3, abs=1e-3)
    assert math.isfinite(parity.psnr_min)
    assert parity.psnr == pytest.approx(parity.psnr_min)  # identical frames (inf) are left out of the mean


def test_shape_mismatch_is_an_error():
    a, _ = _random_pair(0)
    with pytest.raises(ValueError, match="differs from the baseline"):
        compare(a[None], a[None, :32])


def test_aggregate_keeps_worst_case():
    a, b = _random_pair(0)
    same = compare(a[None], a[None])
    diff = compare(b[None], a[None])
    total = aggregate([same, diff])
    assert total.ssim_min == diff.ssim_min
    assert total.psnr_min == diff.psnr_min  # the worst sample's, not the best's (inf)
    assert total.max_abs_diff == diff.max_abs_diff
    assert not total.bit_identical


def test_the_pinned_ssim_states_its_covariance_convention():
    """Population covariance (N), not scikit-image's default sample covariance (N - 1): on this pair the
    two conventions differ by more than the tolerance the scikit-image check uses, so the definition must
    say which one it pins, in the code, the manual (docs/measuring.md) and every report."""
    from pathlib import Path

    from accel.measure import parity

    rng = np.random.default_rng(0)  # two independent low-contrast images: variances near SSIM's C2
    a, b = (np.clip(0.5 + 0.03 * rng.standard_normal((64, 64, 3)), 0, 1) for _ in range(2))
    ours = ssim_frames(a[None], b[None])[0]
    sample = structural_similarity(a, b, channel_axis=-1, gaussian_weights=True, sigma=1.5, data_range=1.0)
    assert abs(ours - _skimage_ssim(a, b)) < 1e-3 and abs(ours - sample) > 1e-3
    assert "population covariance (as scikit-image with use_sample_covariance=False" in parity.PARITY_DEFINITION
    assert "use_sample_covariance=False" in parity.__doc__
    manual = (Path(__file__).parent.parent / "docs" / "measuring.md").read_text()
    definition = manual.split("## Parity definition")[1].split("\n## ")[0]
    assert "population" in definition and "use_sample_covariance=False" in definition
