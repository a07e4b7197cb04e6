"""report.md: the workload line states frames only when a video model was measured (issue 13)."""

from __future__ import annotations

from conftest import small_profile
from synthetic import results

from accel.profile import parse_profile
from accel.report.markdown import render


def _workload_line(records, **workload) -> str:
    profile = parse_profile(small_profile(["tiny-flux", "tiny-wan"], **workload))
    text = render(profile, records, {"packages": {}, "devices": ["cpu"]}, 1.0)
    return next(line for line in text.splitlines() if line.startswith("- Workload:"))


def test_an_image_only_report_states_no_frames():
    images = [r for r in results() if r["model"] == "flux"]
    assert "frames" not in _workload_line(images)


def test_a_report_with_a_video_model_states_its_frames():
    assert _workload_line(results()).endswith(", 5 frames per video (wan)")
    assert _workload_line(results(), num_frames=9).endswith(", 9 frames per video (wan)")


def test_mfu_is_shown_only_where_the_step_ran_the_flops_it_counts():
    from accel.report.markdown import compute_table

    common = {"model": "m", "warm": {"median": 0.1}, "stages": {"step_median_s": 0.01}}
    roofline = {"flops_per_step": 2e9, "floor_step_s": 0.005, "mfu": 1.49, "below_floor": False}
    full = {**common, "variant": "baseline", "roofline": {**roofline, "mfu": 0.42}}
    cached = {
        **common,
        "variant": "cache",
        "roofline": {**roofline, "floor_check": "not applicable: the feature skips work"},
    }
    rows = {line.split("|")[1].strip(): line for line in compute_table([full, cached]).splitlines()[2:]}
    assert "42.00%" in rows["baseline"]
    assert "149" not in rows["cache"] and "| – | not applicable" in rows["cache"], rows["cache"]


def test_the_model_table_says_how_many_pairs_each_speedup_drew():
    from accel.report.markdown import model_table

    claim = {"ratio": 1.5, "low": 1.4, "high": 1.6, "verdict": "faster", "reason": "r", "method": "interleaved"}
    record = {
        "model": "m", "variant": "cache", "status": "ok", "warm": {"median": 0.1, "cv": 0.01},
        "speedup_ci": claim, "paired": {"pairs_drawn": 12, "reference_s": [0.1] * 12, "variant_s": [0.07] * 12},
    }  # fmt: skip
    header, _, row = model_table([record]).splitlines()[:3]
    columns = [c.strip() for c in header.split("|")]
    assert row.split("|")[columns.index("pairs")].strip() == "12"
