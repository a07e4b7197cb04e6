"""Prompt adherence in reports: a per-model table and a speed-vs-adherence figure.

Only records that carry ``adherence`` (models whose source declares a world, see
``accel.sweep.adherence``) appear; a sweep without such a model gets neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.measure.adherence import ATTRIBUTES
from accel.measure.speedup import format_speedup
from accel.report.markdown import fmt

ADHERENCE_DEFINITION = (
    "share of the prompt's attributes (background colour, shape colour, shape class, position) that "
    "classical image analysis recovers from each image; [a, b]: 95% Wilson interval over images (prompts x seeds)"
)


def has_adherence(records: list[dict[str, Any]]) -> bool:
    """Whether any record carries an adherence score."""
    return any(r.get("adherence") for r in records)


def adherence_table(records: list[dict[str, Any]]) -> str:
    """One row per cell with an adherence score: speedup, SSIM, each attribute kind, overall and loss."""
    header = (
        "| variant | speedup | SSIM ↑ | " + " | ".join(f"{k} ↑" for k in ATTRIBUTES) + " | overall ↑ [95% CI] "
        "| loss vs baseline ↓ | images |\n|---|--:|--:|" + "--:|" * len(ATTRIBUTES) + ":-:|--:|--:|"
    )
    rows = []
    for r in records:
        score = r.get("adherence")
        if not score or r.get("role") == "noise_floor":
            continue
        speedup = "1.00x" if r["variant"] == "baseline" else format_speedup(r.get("speedup_ci"))
        low, high = score.get("overall_ci") or (None, None)
        ssim = (r.get("parity") or {}).get("ssim")
        rows.append(
            f"| {r['variant']} | {speedup} | {fmt(ssim, 3)} | "
            + " | ".join(fmt(score.get(k), 3) for k in ATTRIBUTES)
            + f" | {fmt(score.get('overall'), 3)} [{fmt(low, 2)}, {fmt(high, 2)}] | {fmt(r.get('adherence_loss'), 3)} "
            f"| {score.get('n')} |"
        )
    return header + "\n" + "\n".join(rows) + f"\n\nAdherence: {ADHERENCE_DEFINITION}.\n"


def speed_adherence_figure(run_dir: Path, records: list[dict[str, Any]]) -> Path | None:
    """Speedup against overall adherence (with its interval), one colour per model; None without scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from accel.report.figures import FIGURES

    cells = [r for r in records if r.get("adherence") and r.get("role") != "noise_floor" and r.get("warm")]
    if not cells:
        return None
    figure, axis = plt.subplots(figsize=(7, 5))
    for model in dict.fromkeys(r["model"] for r in cells):
        mine = [r for r in cells if r["model"] == model]
        xs = [r.get("speedup", 1.0 if r["variant"] == "baseline" else None) or 1.0 for r in mine]
        ys = [r["adherence"]["overall"] for r in mine]
        low = [y - r["adherence"]["overall_ci"][0] for r, y in zip(mine, ys, strict=True)]
        high = [r["adherence"]["overall_ci"][1] - y for r, y in zip(mine, ys, strict=True)]
        axis.errorbar(xs, ys, yerr=[low, high], fmt="o", alpha=0.8, capsize=3, label=model)
        for r, x, y in zip(mine, xs, ys, strict=True):
            axis.annotate(r["variant"], (x, y), fontsize=7, alpha=0.7, xytext=(3, 3), textcoords="offset points")
    axis.axvline(1.0, color="grey", linewidth=0.8)
    axis.set_ylim(-0.02, 1.05)
    axis.set(
        xlabel="speedup vs baseline (x)",
        ylabel="prompt adherence (share of attributes)",
        title="Speed vs prompt adherence (ground truth; bars: 95% interval)",
    )
    axis.grid(alpha=0.3)
    axis.legend()
    path = Path(run_dir) / FIGURES / "speed-vs-adherence.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
