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
