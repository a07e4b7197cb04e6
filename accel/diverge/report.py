"""A divergence result as a markdown table, a per-step plot (matplotlib, PNG) and JSON files."""

from __future__ import annotations

import json
import math
from pathlib import Path

from accel.diverge.result import DivergeResult, Row

STEP_STAGES = {"denoiser": "denoiser output", "prediction": "prediction", "step_latents": "latents after step"}


def _number(value: float) -> str:
    if math.isnan(value):
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value:.3g}"


def _row(row: Row) -> str:
    m = row.metrics
    held = "exact" if row.exact else "rel-L2"
    mark = "ok" if row.within else "**beyond**"
    step = "–" if row.step is None else str(row.step)
    cosine = "–" if math.isnan(m.cosine) else f"{m.cosine:.6f}"
    cells = [row.stage, step, row.what, _number(m.max_abs), _number(m.rel_l2), cosine, held, mark]
    return "| " + " | ".join(cells) + " |"


def markdown(result: DivergeResult) -> str:
    """The whole comparison: sides, tolerance, the first divergence and every row in order."""
    lines = [
        f"# Divergence: {result.side_b} against {result.side_a}",
        "",
        f"Tolerance ({result.dtype}): relative L2 <= {result.tolerance:g} per step; the inputs of the loop "
        "(prompt embeddings, initial latents, timesteps, sigmas) exact where both sides compute in one dtype.",
        "",
        f"**{result.summary()}**",
        "",
    ]
    first = result.first
    if first is not None:
        lines += [
            f"- component: `{first.component}`",
            f"- step: {first.step if first.step is not None else '– (after the loop)'}",
            f"- block: {f'`{first.block}`' if first.block else '–'}",
            f"- submodule: {f'`{first.submodule}`' if first.submodule else '–'}"
            + (
                f" (first module: `{first.operation}`)"
                if first.operation and first.operation != first.submodule
                else ""
            ),
            f"- how: {first.evidence}",
            f"- first step beyond tolerance: {result.first_step if result.first_step is not None else '–'}",
            "",
        ]
    lines += [
        "| stage | step | what | max-abs | rel-L2 | cosine | held to | |",
        "|---|---:|---|---:|---:|---:|---|---|",
        *(_row(row) for row in result.rows),
    ]
    lines += [f"\n{note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def plot(result: DivergeResult, path: Path) -> Path:
    """Relative L2 per denoising step (denoiser output, prediction, latents after the step), log scale, with
    the tolerance and the first step beyond it marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    floor = result.tolerance * 1e-4  # exact agreement drawn on the floor of a log axis
    for stage, label in STEP_STAGES.items():
        rows = [r for r in result.rows if r.stage == stage and r.step is not None and r.metrics.comparable]
        best: dict[int, float] = {}
        for row in rows:
            best[row.step or 0] = max(best.get(row.step or 0, 0.0), row.metrics.rel_l2)
        if best:
            steps = sorted(best)
            axis.plot(steps, [max(best[s], floor) for s in steps], marker="o", label=label)
    axis.axhline(result.tolerance, color="red", linestyle="--", linewidth=1, label=f"tolerance {result.tolerance:g}")
    if result.first_step is not None:
        axis.axvline(result.first_step, color="grey", linestyle=":", label=f"first step beyond: {result.first_step}")
    axis.set_yscale("log")
    axis.set_xlabel("denoising step")
    axis.set_ylabel("relative L2 (B vs A)")
    axis.set_title(f"{result.side_b} vs {result.side_a}", fontsize=9)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write(result: DivergeResult, directory: Path) -> dict[str, Path]:
    """``diverge.md``, ``diverge.png`` and ``diverge.json`` under ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": directory / "diverge.md",
        "plot": directory / "diverge.png",
        "json": directory / "diverge.json",
    }
    text = markdown(result) + "\n![relative L2 per step](diverge.png)\n"
    paths["markdown"].write_text(text)
    plot(result, paths["plot"])
    paths["json"].write_text(json.dumps(result.to_dict(), indent=2))
    return paths
