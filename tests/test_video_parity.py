"""Video parity: per-frame curves find the broken frame, the temporal measure sees flicker the per-frame values
cannot, and the gate judges (and names) a video's worst frame and frame pair."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import record

from accel.gate import FAIL, PASS, gate_cell, load_gate_data, worst_frame_limits
from accel.measure.parity import aggregate, compare
from accel.measure.video import INDEPENDENT_ERRORS_DB, video_curves, video_parity

SHIPPED = load_gate_data()
FRAMES, SIZE = 6, 32


def _video(frames: int = FRAMES) -> np.ndarray:
    """A textured square moving right over a gradient, values kept in [0.2, 0.8] (no clipping of a small shift)."""
    y, x = np.mgrid[0:SIZE, 0:SIZE] / SIZE
    out = []
    for t in range(frames):
        frame = np.stack([x, y, (x + y) / 2], axis=-1) * 0.3 + 0.3
        left = 4 + 3 * t
        frame[10:22, left : left + 10] = [0.75, 0.25, 0.4]
        frame[12:20:2, left : left + 10] -= 0.05
        out.append(frame)
    return np.stack(out)


def _cell(video: np.ndarray, reference: np.ndarray, **values) -> dict:
    """A cache cell of ``video`` against ``reference``, with its parity and video_parity as the sweep records them."""
    parity, curves = video_curves(video, reference)
    cell = record("wan", "cache", {"cache_dit": {"residual_diff_threshold": 0.5}}, modality="video", speedup=1.5)
    cell["parity"] = aggregate([parity]).to_dict()
    cell["video_parity"] = video_parity({"p0_s0_n0": curves})
    return {**cell, **values}


def _verdict(cell: dict):
    return gate_cell(cell, SHIPPED, None, "video", baseline=record("wan", "baseline", {}, modality="video"))


def test_the_per_frame_curve_finds_the_one_corrupted_frame():
    reference = _video()
    rng = np.random.default_rng(0)
    video = reference + rng.normal(0, 0.002, reference.shape)
    video[3] = np.clip(video[3] + rng.normal(0, 0.15, video[3].shape), 0, 1)
    parity, curves = video_curves(video, reference)
    assert int(np.argmin(curves["ssim"])) == 3 and int(np.argmin(curves["psnr"])) == 3
    assert parity == compare(video, reference)  # the same means and minima as the image path
    summary = video_parity({"p0_s0_n0": curves, "p0_s1_n0": video_curves(reference, reference)[1]})
    assert summary["worst_ssim"] == {"sample": "p0_s0_n0", "frame": 3, "value": min(curves["ssim"])}
    assert summary["worst_psnr"]["frame"] == 3 and summary["worst_psnr"]["sample"] == "p0_s0_n0"
    assert summary["frames"] == FRAMES and len(curves["temporal_psnr"]) == FRAMES - 1
    # The pairs into and out of the corrupted frame are the worst of the temporal curve.
    assert sorted(np.argsort(curves["temporal_psnr"])[:2]) == [2, 3]


def test_flicker_is_seen_although_every_frame_matches_a_steady_error():
    reference = _video()
    delta = 0.05  # 26 dB per frame either way
    steady = reference + delta
    signs = np.array([1 if t % 2 == 0 else -1 for t in range(FRAMES)])[:, None, None, None]
    flickering = reference + delta * signs
    steady_parity, steady_curves = video_curves(steady, reference)
    flicker_parity, flicker_curves = video_curves(flickering, reference)
    assert flicker_parity.psnr == pytest.approx(steady_parity.psnr)  # the per-frame values cannot tell them apart
    assert flicker_parity.ssim == pytest.approx(steady_parity.ssim, abs=1e-3)
    # A steady error: its frame-to-frame change is the baseline's but for float64 rounding.
    assert steady_curves["flicker"] == pytest.approx(0.0, abs=1e-12)
    assert min(steady_curves["temporal_psnr"]) > 2 * max(flicker_curves["temporal_psnr"])
    assert flicker_curves["flicker"] == pytest.approx(1.0)
    assert max(flicker_curves["temporal_psnr"]) == pytest.approx(flicker_parity.psnr - 2 * INDEPENDENT_ERRORS_DB)
    assert flicker_curves["temporal_mad"] == pytest.approx([2 * delta] * (FRAMES - 1))
    # The gate: the mean and the worst frame pass for both; the flickering one fails its temporal check alone.
    steady_verdict, flicker_verdict = _verdict(_cell(steady, reference)), _verdict(_cell(flickering, reference))
    assert steady_verdict.outcome == PASS, steady_verdict.message()
    assert flicker_verdict.outcome == FAIL
    failed = [c.name for c in flicker_verdict.checks if not c.ok]
    assert len(failed) == 1 and failed[0].startswith("temporal PSNR dB worst frame pair") and "frames 0-1" in failed[0]
    assert flicker_verdict.in_parity is False


def test_errors_independent_frame_to_frame_sit_3_db_below_the_frames():
    reference = _video(frames=12)
    noisy = reference + np.random.default_rng(1).normal(0, 0.02, reference.shape)
    parity, curves = video_curves(noisy, reference)
    temporal = float(np.mean(curves["temporal_psnr"]))
    assert temporal == pytest.approx(parity.psnr - INDEPENDENT_ERRORS_DB, abs=0.1)
    assert curves["flicker"] == pytest.approx(math.sqrt(0.5), abs=0.02)  # Gaussian: E|a-b| / 2E|a| = sqrt(2)/2


def test_the_gate_fails_a_video_whose_worst_frame_is_below_its_limit_and_names_it():
    reference = _video(frames=12)
    video = reference + 0.01  # 40 dB everywhere ...
    video[4] = reference[4] + np.random.default_rng(2).normal(0, 0.12, reference[4].shape)  # ... but one frame
    cell = _cell(video, reference)
    ssim_limit, _, _ = worst_frame_limits(SHIPPED, cell, None)
    required_ssim = SHIPPED.thresholds["lossy"]["cache"]["ssim"]
    assert cell["parity"]["ssim"] >= required_ssim  # the mean over frames passes ...
    assert cell["video_parity"]["worst_ssim"]["value"] < ssim_limit  # ... the worst frame does not
    verdict = _verdict(cell)
    assert verdict.outcome == FAIL
    failed = [c for c in verdict.checks if not c.ok]
    assert any(c.name.startswith("SSIM worst frame") and "p0_s0_n0 frame 4" in c.name for c in failed)
    assert next(c for c in verdict.checks if c.name == "SSIM, lossy (cache)").ok  # the mean's own check passes
    # Without the curves (an image, an older record) the same means pass.
    assert _verdict({k: v for k, v in cell.items() if k != "video_parity"}).outcome == PASS


def test_worst_frame_limits_come_from_the_file_and_never_exceed_the_mean_limits():
    thresholds = {**SHIPPED.thresholds, "video": {"worst_frame": {"lossy": {}}}}
    data = type(SHIPPED)(thresholds, SHIPPED.claims, SHIPPED.perf)
    cell = _cell(_video(), _video())
    mean = SHIPPED.thresholds["lossy"]["cache"]
    assert worst_frame_limits(data, cell, None)[:2] == (mean["ssim"], mean["psnr"])
    frame = SHIPPED.thresholds["video"]["worst_frame"]["lossy"]["cache"]
    shipped = (min(frame["ssim"], mean["ssim"]), min(frame["psnr"], mean["psnr"]))
    assert worst_frame_limits(SHIPPED, cell, None)[:2] == shipped
    assert shipped != (mean["ssim"], mean["psnr"])  # the shipped file sets its own worst-frame limit
    # A model whose mean limits are loosened below the worst-frame ones: its frames are not held stricter.
    loose = {"ssim": mean["ssim"] / 2, "psnr": mean["psnr"] / 2}
    model = type(SHIPPED)({**SHIPPED.thresholds, "models": {"wan": {"lossy": {"cache": loose}}}}, {}, None)
    assert worst_frame_limits(model, cell, None)[:2] == (loose["ssim"], loose["psnr"])


def test_a_lossless_video_holds_its_worst_frame_to_the_lossless_class():
    reference = _video()
    cell = _cell(reference + 1e-4, reference)  # 80 dB: far inside a lossy class, not lossless in float32
    cell = {**cell, "variant": "compile", "features": {"compile": "regional"}, "dtype": "float32"}
    cell["evidence"] = {"compile": {"engaged": True, "summary": "evidence"}}
    verdict = _verdict(cell)
    assert verdict.outcome == FAIL
    assert any(c.name.startswith("PSNR dB worst frame, lossless") and not c.ok for c in verdict.checks)


def test_a_malformed_video_section_of_the_thresholds_is_refused():
    from accel.errors import ConfigError
    from accel.gate import check_thresholds

    for bad, said in (
        ({"worst_frame": {"lossy": {"cashe": {"ssim": 0.9, "psnr": 24.0}}}}, "cashe"),
        ({"worst_frame": {"lossy": {"cache": {"ssim": 1.5, "psnr": 24.0}}}}, "ssim"),
        ({"frame": {}}, "worst_frame"),
    ):
        with pytest.raises(ConfigError, match=said):
            check_thresholds({**SHIPPED.thresholds, "video": bad}, "thresholds.yaml")


def test_the_report_shows_each_variants_worst_frame_and_its_curves(tmp_path):
    from accel.report.figures import write_figures
    from accel.report.video import video_table

    reference = _video()
    broken = reference + 0.01
    broken[2] = np.clip(reference[2] + np.random.default_rng(3).normal(0, 0.1, reference[2].shape), 0, 1)
    cells = [
        record("wan", "baseline", {}, modality="video"),
        {**_cell(broken, reference), "variant": "broken-frame"},
        {**_cell(reference, reference), "variant": "identical"},
    ]
    lines = video_table(cells, "wan")
    row = next(line for line in lines if line.startswith("| broken-frame "))
    assert "(p0_s0_n0, frame 2)" in row.split("|")[2] and "(p0_s0_n0, frame 2)" in row.split("|")[3]
    assert "frame 1-2" in row.split("|")[4] or "frame 2-3" in row.split("|")[4]
    assert video_table([cells[0]], "wan") == []  # no curves, no section
    figures = write_figures(tmp_path, cells, [])
    video = [f for f in figures["wan"] if f.startswith("figures/video-")]
    assert video == ["figures/video-wan-broken-frame.png"]  # the bit-identical variant has no curve to draw
    assert (tmp_path / video[0]).stat().st_size > 0


def test_a_record_whose_worst_frame_is_malformed_is_refused_when_read():
    from accel.errors import ConfigError
    from accel.results import check_record

    reference = _video()
    cell = {**_cell(reference + 0.01, reference), "schema_version": 3}
    assert check_record(cell, "results.jsonl:2") is cell
    for bad in ({"sample": "p0_s0_n0", "frame": -1, "value": 0.5}, {"sample": "p0_s0_n0", "frame": 1, "value": "low"}):
        broken = {**cell, "video_parity": {**cell["video_parity"], "worst_ssim": bad}}
        with pytest.raises(ConfigError, match=r"video_parity\.worst_ssim"):
            check_record(broken, "results.jsonl:2")
