"""Drift of lossy variants: each one's per-step error against the baseline (``step_error``, from
``accel.diverge.curve``) as a table and a figure, with the steps a cache skipped marked, so a reader sees the
step a feature starts to drift at and whether its error recovers or accumulates afterwards."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accel.report.plot import pyplot, save_figure


def _curves(records: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return [r for r in records if r["model"] == model and r.get("step_error")]


def trend(curve: list[float]) -> str:
    """``accumulates`` when the last step's error is the largest, ``recovers`` when it ends below its peak by
    half or more, ``holds`` otherwise; ``none`` for a curve that is zero throughout."""
    finite = [e for e in curve if math.isfinite(e)]
    if not finite or max(finite) == 0.0:
        return "none"
    peak, last = max(finite), finite[-1]
    if last >= peak:
        return "accumulates"
    return "recovers" if last <= peak / 2 else "holds"


def drift_table(records: list[dict[str, Any]], model: str) -> list[str]:
    """Markdown lines: per lossy variant, the first step its latents differ at, its first skipped step, the
    error's peak and last value and its trend; no lines when no cell has a curve."""
    cells = _curves(records, model)
    if not cells:
        return []
    lines = [
        "### Drift per step (latents vs the baseline's, relative L2; one untimed call)",
        "",
        "| variant | first differing step | first skipped step | peak | last step | trend |",
        "|---|---|---|---|---|---|",
    ]
    for r in cells:
        error = r["step_error"]
        curve, skipped = error["rel_l2"], error["skipped_steps"]
        first = error["first_differing_step"]
        lines.append(
            f"| {r['variant']} | {'-' if first is None else first} | {skipped[0] if skipped else '-'} "
            f"| {max(curve, default=0.0):.3g} | {curve[-1] if curve else 0.0:.3g} | {trend(curve)} |"
        )
    return [*lines, ""]


def drift_figure(run_dir: Path, records: list[dict[str, Any]], model: str) -> Path | None:
    """One curve per lossy variant of ``model`` (error per step, log scale), its skipped steps as crosses."""
    cells = _curves(records, model)
    if not cells:
        return None
    figure, axis = pyplot().subplots(figsize=(8, 4.5))
    floor = min((e for r in cells for e in r["step_error"]["rel_l2"] if 0 < e < math.inf), default=1e-12) / 10
    for r in cells:
        curve = [max(e, floor) if math.isfinite(e) else math.nan for e in r["step_error"]["rel_l2"]]
        (line,) = axis.plot(range(len(curve)), curve, "o-", markersize=3, label=r["variant"])
        skipped = [s for s in r["step_error"]["skipped_steps"] if s < len(curve)]
        if skipped:
            axis.plot(skipped, [curve[s] for s in skipped], "x", color=line.get_color(), markersize=8)
    axis.set_yscale("log")
    axis.set(
        xlabel="denoising step",
        ylabel="relative L2 vs baseline latents",
        title=f"{model}: drift per step (x: a step a cache skipped; {floor:.0e}: equal)",
    )
    axis.grid(alpha=0.3)
    axis.legend(loc="best", fontsize="small")
    return save_figure(figure, run_dir, f"drift-{model}.png")
