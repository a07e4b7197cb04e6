"""Prompt adherence in reports: a per-model table (the speed-vs-adherence figure is in ``figures.py``).

Only records that carry ``adherence`` (models whose source declares a world, see
``accel.sweep.adherence``) appear; a sweep without such a model gets neither.
"""

from __future__ import annotations

from typing import Any

from accel.measure.adherence import ATTRIBUTES
from accel.measure.speedup import format_speedup
from accel.measure.video_adherence import VIDEO_ATTRIBUTES
from accel.report.format import fmt, table_lines
from accel.results import is_noise_floor, parity_of

ADHERENCE_DEFINITION = (
    "share of the prompt's attributes (background colour, shape colour, shape class, position) that "
    "classical image analysis recovers from each image; [a, b]: 95% Wilson interval with each image (prompt x "
    "seed) one trial, since an image's attributes fail together; lost / gained: image by image against the "
    "baseline, the share of the scored attributes the baseline got right and the variant wrong (what the gate "
    "bounds: gains on other images do not offset it) / the reverse; for videos (mini-wan's moving-shapes world) the "
    "kinds are background colour, ball colour, direction of motion (the centroid track) and persistence (a ball "
    "in every frame), each video one trial"
)


def has_adherence(records: list[dict[str, Any]]) -> bool:
    """Whether any record carries an adherence score."""
    return any(r.get("adherence") for r in records)


def adherence_table(records: list[dict[str, Any]]) -> str:
    """One row per cell with an adherence score: speedup, SSIM, each attribute kind, overall, lost and gained.

    The kinds are those the records were scored on: an image world's, a video world's (``VIDEO_ATTRIBUTES``),
    or both in a sweep of both.
    """
    scored = [r.get("adherence") or {} for r in records]
    kinds = [k for k in dict.fromkeys((*ATTRIBUTES, *VIDEO_ATTRIBUTES)) if any(k in score for score in scored)]
    header = ("variant", "speedup", "SSIM ↑", *(f"{k} ↑" for k in kinds), "overall ↑ [95% CI]",
              "lost vs baseline ↓", "gained", "images")  # fmt: skip
    align = ("left", "right", "right", *("right",) * len(kinds), "center", "right", "right", "right")
    rows = []
    for r in records:
        score = r.get("adherence")
        if not score or is_noise_floor(r):
            continue
        speedup = "1.00x" if r["variant"] == "baseline" else format_speedup(r.get("speedup_ci"))
        low, high = score.get("overall_ci") or (None, None)
        ssim = parity_of(r).get("ssim")
        rows.append(
            (
                r["variant"], speedup, fmt(ssim, 3), *(fmt(score.get(k), 3) for k in kinds),
                f"{fmt(score.get('overall'), 3)} [{fmt(low, 2)}, {fmt(high, 2)}]", fmt(r.get("adherence_loss"), 3),
                fmt((score.get("vs_baseline") or {}).get("gained"), 3), score.get("n"),
            )
        )  # fmt: skip
    return "\n".join(table_lines(header, align, rows)) + f"\n\nAdherence: {ADHERENCE_DEFINITION}.\n"
