"""Figures of a run: image grids per prompt, speedup-vs-quality scatter with the Pareto front, latency/memory
bars, lossy variants' drift per step (``accel.report.drift``) and videos' parity per frame
(``accel.report.video``). Written under ``RUN_DIR/figures/`` (``accel.report.plot``) and embedded in
``report.md``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from accel.measure.speedup import FASTER, SLOWER, format_speedup
from accel.report.drift import drift_figure
from accel.report.format import fmt
from accel.report.plot import FIGURES, pyplot, save_figure
from accel.report.video import video_figures
from accel.results import is_noise_floor, parity_of, peak_memory_bytes

# Points at or above these are lossless to the eye (the gate's float32 lossless limits) and are left unnamed.
LOSSLESS_LOOK = {"ssim": 0.99999, "psnr": 100.0}
TILE = 128  # pixels per image in a grid (tiny outputs are scaled up with nearest neighbour)
VIDEO_FRAMES = 3


# Candidate label offsets (points) from a marker, tried in turn until one overlaps no label placed before.
_LABEL_OFFSETS = [(4, 3), (4, -10), (4, 12), (4, -19), (4, 21), (-4, 3), (4, -28), (4, 30), (4, -37), (4, 39)]


def annotate_without_overlap(
    axis: Any, points: list[tuple[float, float]], labels: list[str], fontsize: int = 7
) -> None:
    """Label each point, moving a label up or down (never onto another) when its first place is taken.

    Hand-written because matplotlib places annotations only where told, and the well-kept packages for this
    (adjustText) are not in the project's dependencies; a greedy choice among a few offsets, with label sizes
    estimated from the font size, is enough for the tens of variants a sweep has. A label with no free place
    is drawn at the last offset tried.
    """
    figure = axis.figure
    figure.canvas.draw()  # fix the axes' limits and transform before measuring in pixels
    scale = figure.dpi / 72.0
    placed: list[tuple[float, float, float, float]] = []
    order = sorted(range(len(points)), key=lambda i: points[i])
    for i in order:
        x, y = axis.transData.transform(points[i])
        width, height = 0.6 * fontsize * len(labels[i]) * scale, 1.2 * fontsize * scale
        chosen = _LABEL_OFFSETS[-1]
        for dx, dy in _LABEL_OFFSETS:
            left = x + dx * scale - (width if dx < 0 else 0)
            bottom = y + dy * scale
            box = (left, bottom, left + width, bottom + height)
            if all(box[2] <= b[0] or box[0] >= b[2] or box[3] <= b[1] or box[1] >= b[3] for b in placed):
                chosen = (dx, dy)
                break
        placed.append(box)
        axis.annotate(
            labels[i],
            points[i],
            xytext=chosen,
            textcoords="offset points",
            fontsize=fontsize,
            alpha=0.8,
            ha="right" if chosen[0] < 0 else "left",
            arrowprops={"arrowstyle": "-", "alpha": 0.3, "linewidth": 0.5} if abs(chosen[1]) > 5 else None,
        )


def _with_outputs(records: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return [r for r in records if r["model"] == model and r.get("outputs_file") and not is_noise_floor(r)]


def _thumbnail(frames: np.ndarray) -> Any:
    """A column of up to VIDEO_FRAMES frames (one for an image), scaled to TILE wide."""
    from PIL import Image

    picks = np.linspace(0, len(frames) - 1, min(VIDEO_FRAMES, len(frames))).round().astype(int)
    column = np.concatenate([frames[i] for i in picks], axis=0)
    image = Image.fromarray((np.clip(column, 0, 1) * 255 + 0.5).astype(np.uint8))
    scale = TILE / image.width
    return image.resize((TILE, round(image.height * scale)), Image.Resampling.NEAREST)


def image_grids(run_dir: Path, records: list[dict[str, Any]], keys: list[str]) -> list[tuple[str, Path]]:
    """Per model and prompt: the baseline and every variant side by side, labelled."""
    from PIL import Image, ImageDraw

    out = Path(run_dir) / FIGURES
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    prompts = sorted({key.split("_")[0] for key in keys})
    for model in dict.fromkeys(r["model"] for r in records):
        # Only the cells whose outputs are here: a run directory re-measured in part with --resume after its
        # outputs were deleted (a committed report keeps none) holds the re-measured model's outputs alone.
        cells = [r for r in _with_outputs(records, model) if (Path(run_dir) / r["outputs_file"]).is_file()]
        if not cells:
            continue
        for prompt in prompts:
            key = next(k for k in keys if k.startswith(prompt + "_"))
            tiles = []
            for record in cells:
                with np.load(Path(run_dir) / record["outputs_file"]) as outputs:
                    if key in outputs:  # a model with its own workload (ModelSpec.workload) may lack the key
                        tiles.append((record, _thumbnail(outputs[key])))
            if not tiles:
                continue
            label_h = 34
            width = TILE * len(tiles)
            height = max(t.height for _, t in tiles) + label_h
            canvas = Image.new("RGB", (width, height), "white")
            draw = ImageDraw.Draw(canvas)
            for index, (record, tile) in enumerate(tiles):
                x = index * TILE
                canvas.paste(tile, (x, label_h))
                parity = parity_of(record)
                # The speedup as the harness publishes it (1.23x claimed, ~1.0x noise, 1.23x? not a claim), and
                # the cell's recorded status only when it did not run (a gate's verdict is gate.md's to give).
                speed = "1.00x" if record["variant"] == "baseline" else format_speedup(record.get("speedup_ci"))
                speed = speed.split(" [")[0].replace("≈", "~").replace("–", "-")  # a tile has room for the ratio
                draw.text((x + 2, 1), record["variant"][:20], fill="black")
                draw.text((x + 2, 12), f"{speed}  SSIM {fmt(parity.get('ssim'), 3)}".replace("–", "-"), fill="black")
                if record["status"] != "ok":
                    draw.text((x + 2, 23), record["status"][:20], fill="red")
            path = out / f"grid-{model}-{prompt}.png"
            canvas.save(path)
            paths.append((model, path))
    return paths


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (higher is better on both)."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any((a >= x and b >= y) and (a > x or b > y) for j, (a, b) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return front


def _speed_claimed(record: dict[str, Any]) -> bool:
    """Whether the harness claims the record's speedup (its interval clear of the noise band); the baseline is
    the reference point itself."""
    if record["variant"] == "baseline":
        return True
    verdict = (record.get("speedup_ci") or {}).get("verdict")
    return verdict in (FASTER, SLOWER)


def _plottable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cells that ran and were measured validly: a failed cell (not engaged, crashed, rejected by an engine)
    or an INVALID timing has no speed/quality point to show."""
    return [
        r
        for r in records
        if r["status"] == "ok"
        and not r.get("invalid_measurement")
        and r.get("speedup")
        and r.get("parity")
        and not is_noise_floor(r)
    ]


def speed_quality_scatter(run_dir: Path, records: list[dict[str, Any]]) -> Path | None:
    """Speedup against SSIM and PSNR, one colour per model, Pareto front (per model) marked."""
    plt = pyplot()

    cells = _plottable(records)
    if not cells:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(12, 5))
    labels: dict[Any, list[tuple[str, tuple[float, float]]]] = {axis: [] for axis in axes}
    finite_psnr = [r["parity"]["psnr"] for r in cells if math.isfinite(r["parity"]["psnr"])]
    psnr_cap = (max(finite_psnr) if finite_psnr else 60.0) + 5  # identical outputs (inf) drawn at the top
    for model in dict.fromkeys(r["model"] for r in cells):
        mine = [r for r in cells if r["model"] == model]
        for axis, metric in zip(axes, ("ssim", "psnr"), strict=True):
            xs = [r["speedup"] for r in mine]
            ys = [min(r["parity"][metric], psnr_cap) for r in mine]
            dots = axis.scatter(xs, ys, label=model, alpha=0.75)
            claims = [r.get("speedup_ci") or {} for r in mine]
            spans = [
                (x - c.get("low", x), c.get("high", x) - x) for x, c in zip(xs, claims, strict=True)
            ]  # the speedup's interval as a horizontal bar: a bar across 1.0 is noise
            axis.errorbar(
                xs, ys, xerr=list(zip(*spans, strict=True)), fmt="none", ecolor=dots.get_facecolor()[0], alpha=0.5
            )
            front = sorted(pareto_front(list(zip(xs, ys, strict=True))), key=lambda i: xs[i])
            axis.plot([xs[i] for i in front], [ys[i] for i in front], "--", color=dots.get_facecolor()[0])
            # Lossless variants pile up at the top (SSIM 1, identical PSNR): only the lossy ones are named.
            lossless = LOSSLESS_LOOK[metric]
            labels[axis].extend((r["variant"], (x, y)) for r, x, y in zip(mine, xs, ys, strict=True) if y < lossless)
    axes[0].set(xlabel="speedup vs baseline (x)", ylabel="SSIM vs baseline", title="Speed vs SSIM")
    axes[1].set(xlabel="speedup vs baseline (x)", ylabel="PSNR (dB; identical = top)", title="Speed vs PSNR")
    for axis in axes:
        axis.axvline(1.0, color="grey", linewidth=0.8)
        axis.grid(alpha=0.3)
    axes[0].legend()
    for axis, named in labels.items():
        annotate_without_overlap(axis, [point for _, point in named], [name for name, _ in named])
    figure.suptitle(
        "Higher and further right is better; bars: each speedup's interval; dashed: each model's Pareto front; "
        "named: the variants below lossless parity"
    )
    return save_figure(figure, run_dir, "speed-vs-quality.png", dpi=110)


def latency_memory_bars(run_dir: Path, records: list[dict[str, Any]], model: str) -> Path | None:
    """Warm latency and peak memory of every measured cell of one model."""
    plt = pyplot()

    cells = [r for r in records if r["model"] == model and r.get("warm") and not is_noise_floor(r)]
    if not cells:
        return None
    names = [r["variant"] for r in cells]
    latency = [r["warm"]["median"] * 1e3 for r in cells]
    memory = [(peak_memory_bytes(r) or 0) / 2**20 for r in cells]
    figure, axes = plt.subplots(1, 2, figsize=(12, max(3, 0.3 * len(cells) + 1)))
    axes[0].barh(names, latency, color="tab:blue")
    axes[0].set(xlabel="warm median latency (ms)", title=f"{model}: latency")
    axes[1].barh(names, memory, color="tab:orange")
    memory_kind = "device allocated" if cells[0].get("peak_device_allocated_bytes") else "host RSS"
    axes[1].set(xlabel=f"peak memory, {memory_kind} (MiB)", title=f"{model}: memory")
    for axis in axes:
        axis.invert_yaxis()
        axis.grid(axis="x", alpha=0.3)
    return save_figure(figure, run_dir, f"bars-{model}.png", dpi=100)


def speed_adherence_figure(run_dir: Path, records: list[dict[str, Any]]) -> Path | None:
    """Speedup against overall adherence (with its interval), one colour per model; None without scores."""
    plt = pyplot()

    cells = [r for r in records if r.get("adherence") and not is_noise_floor(r) and r.get("warm")]
    if not cells:
        return None
    figure, axis = plt.subplots(figsize=(8, 5.5))
    named: list[tuple[str, tuple[float, float]]] = []
    for model in dict.fromkeys(r["model"] for r in cells):
        mine = [r for r in cells if r["model"] == model]
        xs = [r.get("speedup", 1.0 if r["variant"] == "baseline" else None) or 1.0 for r in mine]
        ys = [r["adherence"]["overall"] for r in mine]
        low = [y - r["adherence"]["overall_ci"][0] for r, y in zip(mine, ys, strict=True)]
        high = [r["adherence"]["overall_ci"][1] - y for r, y in zip(mine, ys, strict=True)]
        bars = axis.errorbar(xs, ys, yerr=[low, high], fmt="none", alpha=0.8, capsize=3)
        colour = bars.lines[2][0].get_color()
        claimed = [_speed_claimed(r) for r in mine]
        for hollow in (False, True):
            picked = [(x, y) for x, y, c in zip(xs, ys, claimed, strict=True) if c != hollow]
            if picked:
                axis.plot(
                    *zip(*picked, strict=True),
                    "o",
                    color=colour,
                    markerfacecolor="none" if hollow else colour,
                    label=f"{model}{' (speedup not a claim)' if hollow else ''}",
                )
        named.extend((r["variant"], (x, y)) for r, x, y in zip(mine, xs, ys, strict=True))
    axis.axvline(1.0, color="grey", linewidth=0.8)
    axis.set_ylim(-0.02, 1.05)
    axis.set(
        xlabel="speedup vs baseline (x)",
        ylabel="prompt adherence (share of attributes)",
        title="Speed vs prompt adherence (ground truth; bars: 95% interval over images)",
    )
    axis.grid(alpha=0.3)
    axis.legend(loc="lower left")
    annotate_without_overlap(axis, [point for _, point in named], [name for name, _ in named])
    return save_figure(figure, run_dir, "speed-vs-adherence.png", dpi=110)


def write_figures(run_dir: Path, records: list[dict[str, Any]], keys: list[str]) -> dict[str, list[str]]:
    """All figures; returns, per model (and ``_all``), the paths relative to ``run_dir``."""
    run_dir = Path(run_dir)
    figures: dict[str, list[str]] = {"_all": []}
    scatter = speed_quality_scatter(run_dir, records)
    if scatter:
        figures["_all"].append(str(scatter.relative_to(run_dir)))
    adherence = speed_adherence_figure(run_dir, records)
    if adherence:
        figures["_all"].append(str(adherence.relative_to(run_dir)))
    for model in dict.fromkeys(r["model"] for r in records):
        figures[model] = []
        bars = latency_memory_bars(run_dir, records, model)
        if bars:
            figures[model].append(str(bars.relative_to(run_dir)))
        drift = drift_figure(run_dir, records, model)
        if drift:
            figures[model].append(str(drift.relative_to(run_dir)))
        figures[model] += [str(path.relative_to(run_dir)) for path in video_figures(run_dir, records, model)]
    drawn = image_grids(run_dir, records, keys) if (run_dir / "outputs").is_dir() else []
    for model, grid in drawn:
        figures[model].append(str(grid.relative_to(run_dir)))
    for model in figures:  # outputs gone (a copied or committed run): the grids drawn from them before stay
        if not any(Path(f).name.startswith("grid-") for f in figures[model]):
            figures[model] += [str(path.relative_to(run_dir)) for path in _grids_drawn_before(run_dir, model)]
    return figures


def _grids_drawn_before(run_dir: Path, model: str) -> list[Path]:
    """The image grids an earlier sweep of this folder drew for ``model`` (a folder holds one run: a fresh sweep
    refuses old results, and --resume keeps the records they were drawn from). ``grid-<model>-<prompt>.png``: a
    model's name may hold dashes, a prompt key (``p0``) none, so ``flux.1``'s are not ``flux.1-kontext``'s."""
    prefix = f"grid-{model}-"
    paths = (Path(run_dir) / FIGURES).glob(prefix + "*.png")
    return sorted(path for path in paths if "-" not in path.name[len(prefix) : -len(".png")])
