"""The tune's report: ``tune.md`` (the recommendation and the evidence for each constraint, the Pareto frontier
of speed against quality with intervals, the inert and harmful configurations, the apply snippet and engine
arguments), ``pareto.png`` and ``tune.json`` (every outcome, for scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accel.report.format import fmt, table
from accel.tune.search import FULL, VALIDATE, Outcome, SearchResult

TUNE_MD, TUNE_JSON, PARETO_PNG = "tune.md", "tune.json", "pareto.png"


def quality(outcome: Outcome) -> tuple[float | None, tuple[float, float] | None]:
    """SSIM's mean against the round's baseline and its 95% interval over the samples (when known)."""
    parity = outcome.record.get("parity") or {}
    interval = parity.get("ssim_ci")
    return parity.get("ssim"), ((float(interval[0]), float(interval[1])) if interval else None)


def pareto(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes no other beats on both objective value and SSIM (ties kept), best objective first."""
    points = [(o, o.value, quality(o)[0]) for o in outcomes if o.value is not None and quality(o)[0] is not None]
    front = []
    for outcome, value, ssim in points:
        assert value is not None and ssim is not None
        beaten = any(
            v is not None and s is not None and v >= value and s >= ssim and (v > value or s > ssim)
            for _, v, s in points
        )
        if not beaten:
            front.append(outcome)
    return sorted(front, key=lambda o: (-(o.value or 0.0), o.candidate.name))


def _interval(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    return f"{fmt(value)} [{fmt(interval[0])}–{fmt(interval[1])}]" if interval else fmt(value)


def _lost(record: dict[str, Any]) -> str:
    """The attributes lost with the 95% interval over the images the constraint and the gate hold it by."""
    from accel.measure.adherence import loss_images, loss_interval

    lost = record.get("adherence_loss")
    if lost is None:
        return "-"
    images = loss_images(record)
    if images is None:
        return fmt(lost)
    return _interval(float(lost), loss_interval(float(lost), images))


def _row(outcome: Outcome) -> list[str]:
    ssim, ssim_ci = quality(outcome)
    labels = [x for x, on in (("inert", outcome.judgement.inert), ("harmful", outcome.judgement.harmful)) if on]
    held = "yes" if outcome.judgement.passed else "no"
    return [
        f"`{outcome.candidate.name}`",
        outcome.round,
        _interval(outcome.value, outcome.interval),
        _interval(ssim, ssim_ci),
        _lost(outcome.record),
        held + (f" ({', '.join(labels)})" if labels else ""),
    ]


HEADER = ["configuration", "round", "objective [95% CI]", "SSIM [95% CI]", "attributes lost [95% CI]", "holds"]
ALIGNS = ["left", "left", "right", "right", "right", "left"]


def named_problems(result: SearchResult) -> list[str]:
    """Every inert and harmful configuration, in words: timed ones and the ones a calibration ruled out."""
    lines = [f"- inert, not timed: {line}" for line in result.untimed_inert]
    for o in result.outcomes:
        if o.judgement.inert:
            lines.append(f"- inert: `{o.candidate.name}` ({o.round}): {o.judgement.inert_reason}")
        if o.judgement.harmful and o.interval is not None:
            lines.append(
                f"- harmful: `{o.candidate.name}` ({o.round}): speed interval [{fmt(o.interval[0])}–"
                f"{fmt(o.interval[1])}] entirely below 1: the hooks cost more than they save"
            )
    return lines


def write_markdown(out: Path, result: SearchResult, objective: str, extras: dict[str, Any]) -> Path:
    """Write ``tune.md``."""
    rec = result.recommended
    lines = ["# omni-accel tune", ""]
    lines += [f"Objective: {objective} ({'speedup' if objective == 'latency' else 'memory reduction'}, higher is "
              f"better). Constraints: {extras['constraints']}.", ""]  # fmt: skip
    if result.split is not None:
        lines += [
            f"Search prompts: {len(result.split.search)}; validation on {len(result.split.validation)} held-out "
            f"prompt(s) and unseen seed(s) {result.split.validation_seeds}.",
            "",
        ]
    lines += ["## Recommendation", ""]
    if rec is None:
        lines += ["None: " + ("; ".join(result.notes) or "no configuration held the constraints") + ".", ""]
    else:
        lines += [
            f"`{rec.candidate.name}`: `{json.dumps(rec.candidate.features)}`, validated in {rec.round}: "
            f"{_interval(rec.value, rec.interval)} on prompts and seeds the search never ran.",
            "",
            "Evidence for each constraint (validation round):",
            "",
            *[f"- {line}" for line in rec.judgement.evidence],
            "",
            f"Profile: `{extras['recommended_file']}` (`omni-accel sweep {extras['recommended_file']}`).",
            "",
            "```python",
            extras["apply"],
            "```",
            "",
            "Serving-engine arguments (`accel/engines/mapping.py`):",
            "",
            "```json",
            json.dumps(extras["engines"], indent=2),
            "```",
            "",
        ]
    front = pareto([o for o in result.outcomes if o.stage == FULL])
    lines += ["## Pareto frontier (full fidelity)", "", f"![speed against quality]({PARETO_PNG})", ""]
    lines += [table(HEADER, ALIGNS, [_row(o) for o in front]), ""]
    problems = named_problems(result)
    lines += ["## Inert and harmful configurations", "", *(problems or ["None found."]), ""]
    lines += ["## Every evaluated configuration", ""]
    lines += [table(HEADER, ALIGNS, [_row(o) for o in result.outcomes]), ""]
    if result.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in result.notes], ""]
    path = out / TUNE_MD
    path.write_text("\n".join(lines))
    return path


def write_json(out: Path, result: SearchResult, extras: dict[str, Any]) -> Path:
    """Write ``tune.json``: every outcome and the recommendation."""

    def entry(o: Outcome) -> dict[str, Any]:
        return {
            "name": o.candidate.name, "features": o.candidate.features, "kind": o.candidate.kind, "round": o.round,
            "stage": o.stage, "value": o.value, "interval": o.interval, "axis": o.axis, "threshold": o.threshold,
            **o.judgement.to_dict(),
        }  # fmt: skip

    data = {
        "recommended": entry(result.recommended) if result.recommended else None,
        "outcomes": [entry(o) for o in result.outcomes],
        "untimed_inert": result.untimed_inert,
        "notes": result.notes,
        **extras,
    }
    path = out / TUNE_JSON
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def write_pareto_png(out: Path, result: SearchResult, objective: str) -> Path | None:
    """Speed (or memory) against SSIM with both intervals, the frontier joined, the recommendation ringed."""
    shown = [o for o in result.outcomes if o.stage in (FULL, VALIDATE) and o.value is not None and quality(o)[0]]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    for o in shown:
        ssim, ssim_ci = quality(o)
        assert ssim is not None and o.value is not None
        xerr = [[o.value - o.interval[0]], [o.interval[1] - o.value]] if o.interval else None
        yerr = [[ssim - ssim_ci[0]], [ssim_ci[1] - ssim]] if ssim_ci else None
        colour = "tab:green" if o.usable else "tab:red"
        marker = "s" if o.stage == VALIDATE else "o"
        axis.errorbar(o.value, ssim, xerr=xerr, yerr=yerr, fmt=marker, color=colour, capsize=2, ms=4)
        axis.annotate(o.candidate.name, (o.value, ssim), fontsize=6, xytext=(3, 3), textcoords="offset points")
    front = pareto([o for o in shown if o.stage == FULL])
    axis.plot([o.value or 0.0 for o in front], [quality(o)[0] or 0.0 for o in front], "--", color="grey", lw=1)
    if result.recommended is not None and result.recommended in shown:
        rec = result.recommended
        axis.plot([rec.value or 0.0], [quality(rec)[0] or 0.0], "o", ms=12, mfc="none", color="black")
    axis.set_xlabel("speedup vs baseline" if objective == "latency" else "memory reduction vs baseline")
    axis.set_ylabel("SSIM vs baseline")
    axis.set_title("tune: full fidelity (circles) and validation (squares); red: fails a constraint", fontsize=8)
    path = out / PARETO_PNG
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
