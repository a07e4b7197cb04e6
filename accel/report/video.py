"""Video parity in the report: per variant, its worst frame and frame pair (which video, which frame) and its
flicker as a table, and a figure of its curves (SSIM and PSNR per frame, temporal PSNR per frame pair, one line
per prompt x seed), from the record's ``video_parity`` (``accel.measure.video``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accel.report.format import fmt
from accel.report.plot import pyplot, save_figure


def _cells(records: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return [r for r in records if r["model"] == model and r.get("video_parity")]


def _at(worst: dict[str, Any] | None, digits: int, pair: bool = False) -> str:
    if not worst:
        return "–"
    frame = int(worst["frame"])
    where = f"{frame}-{frame + 1}" if pair else str(frame)
    return f"{fmt(float(worst['value']), digits)} ({worst['sample']}, frame {where})"


def video_table(records: list[dict[str, Any]], model: str) -> list[str]:
    """Markdown lines: per variant with video curves, its worst frame's SSIM and PSNR, its worst frame pair's
    temporal PSNR, each with where it is, the mean temporal difference and the flicker; none without curves."""
    cells = _cells(records, model)
    if not cells:
        return []
    lines = [
        "### Video parity per frame (vs the baseline's videos; frames counted from 0)",
        "",
        "Temporal: the variant's frame-to-frame change against the baseline's (temporal PSNR of the pair; errors",
        "independent from frame to frame sit 3 dB below the frames' PSNR). Flicker: 0 when the error holds still",
        "between frames, about 0.71 when independent, 1 when it reverses every frame (the worst video's).",
        "",
        "| variant | worst SSIM | worst PSNR dB | worst temporal PSNR dB | temporal mean abs diff | flicker |",
        "|---|---|---|---|---|---|",
    ]
    for r in cells:
        video = r["video_parity"]
        mad = fmt(video.get("temporal_mad"), 3, significant=True)
        lines.append(
            f"| {r['variant']} | {_at(video.get('worst_ssim'), 4)} | {_at(video.get('worst_psnr'), 2)} "
            f"| {_at(video.get('worst_temporal_psnr'), 2, pair=True)} | {mad} | {fmt(video.get('flicker'), 3)} |"
        )
    return [*lines, ""]


def _capped(values: list[float], cap: float) -> list[float]:
    """Infinite PSNR (identical frames) drawn at ``cap``, the top of the axis."""
    return [min(v, cap) for v in values]


def video_figure(run_dir: Path, record: dict[str, Any]) -> Path | None:
    """The curves of one variant: SSIM and PSNR per frame, temporal PSNR per frame pair, one line per prompt x
    seed, each video's worst frame marked; None without curves or when every video is bit-identical."""
    video = record.get("video_parity")
    if not video or (record.get("parity") or {}).get("bit_identical"):
        return None
    samples: dict[str, dict[str, Any]] = video["samples"]
    finite = [v for curve in samples.values() for v in (*curve["psnr"], *curve["temporal_psnr"]) if math.isfinite(v)]
    cap = (max(finite) if finite else 60.0) + 5
    figure, axes = pyplot().subplots(1, 3, figsize=(14, 4))
    panels = (("ssim", "SSIM per frame"), ("psnr", "PSNR per frame (dB; identical = top)"))
    for axis, (metric, title) in zip(axes, panels, strict=False):
        for sample, curve in samples.items():
            values = _capped(curve[metric], cap) if metric == "psnr" else curve[metric]
            (line,) = axis.plot(range(len(values)), values, "o-", markersize=3, label=sample)
            worst = min(range(len(values)), key=values.__getitem__)
            axis.plot([worst], [values[worst]], "x", color=line.get_color(), markersize=9)
        axis.set(xlabel="frame", title=title)
    for sample, curve in samples.items():
        values = _capped(curve["temporal_psnr"], cap)
        axes[2].plot(range(len(values)), values, "o-", markersize=3, label=f"{sample} (flicker {curve['flicker']:.2f})")
    axes[2].set(xlabel="frame pair (t, t+1)", title="temporal PSNR: change vs the baseline's (dB)")
    for axis in axes:
        axis.grid(alpha=0.3)
    axes[2].legend(loc="best", fontsize="small")
    figure.suptitle(
        f"{record['model']}/{record['variant']}: video parity vs the baseline (x: each video's worst frame)"
    )
    safe = f"{record['model']}-{record['variant']}".replace("/", "_").replace(" ", "_")
    return save_figure(figure, run_dir, f"video-{safe}.png")


def video_figures(run_dir: Path, records: list[dict[str, Any]], model: str) -> list[Path]:
    """One figure per variant of ``model`` with video curves (``video_figure``)."""
    paths = [video_figure(run_dir, r) for r in _cells(records, model)]
    return [path for path in paths if path is not None]
