"""``report.md``: a table per model (variant, latency, speedup, cold time, memory, parity, status)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accel.measure.parity import PARITY_DEFINITION
from accel.measure.speedup import (
    EQUIVALENT,
    INCONCLUSIVE,
    NOISE,
    UNVERIFIED,
    floor_first_look,
    format_speedup,
    planned_looks,
    sampling_notice,
    variant_first_look,
)
from accel.measure.video import VIDEO_PARITY_DEFINITION
from accel.profile import Profile
from accel.report.denoisers import denoiser_table
from accel.report.drift import drift_table
from accel.report.format import fmt, percent, table_lines
from accel.report.video import video_table
from accel.results import (
    declared_tag,
    feature_options,
    is_noise_floor,
    not_run,
    parity_of,
    peak_memory_bytes,
    warm_median,
)

REPORT_FILE = "report.md"


# What the report's banner says of each trained zoo model a profile runs.
TRAINED_MODELS = {
    "mini-flux": "mini-flux is a real FLUX pipeline trained by the project on a procedural shapes world.",
    "mini-wan": (
        "mini-wan is a real two-expert Wan 2.2 pipeline (transformer, transformer_2) trained by the project on a "
        "world of moving balls."
    ),
}


def _mib(value: int | None) -> str:
    return "–" if value is None else fmt(float(value) / 2**20, 0)


def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else fmt(float(value) * 1e3, digits)


STAGE_KEYS = ("text_encoding", "prepare", "denoising", "decode_prep", "vae_decode", "post_processing")


def _beside(r: dict[str, Any]) -> str:
    """Cores other processes kept busy while the cell was timed (interleaved window when there was one)."""
    timing = r.get("timing") or {}
    window = timing.get("interleaved") or timing.get("alone")
    return "–" if not window else fmt(float(window["other_cores"]), 2)


def _pairs(r: dict[str, Any]) -> str:
    """How many interleaved pairs the speedup's comparison drew (sequential sampling stops when decided)."""
    paired = r.get("paired") or {}
    drawn = paired.get("pairs_drawn", len(paired.get("reference_s") or []) or None)
    return "–" if not drawn else str(drawn)


def _status(r: dict[str, Any]) -> str:
    status = (r["status"] if not r.get("error") else f"{r['status']}: {r['error']}") + declared_tag(r)
    flags = []
    claim = r.get("speedup_ci") or {}
    if claim.get("verdict") in (EQUIVALENT, NOISE, INCONCLUSIVE, UNVERIFIED):
        flags.append(f"speedup {claim['verdict']}: {claim['reason']}")
    if r.get("noisy"):
        flags.append("noisy (CV above measure.max_cv)")
    if r.get("invalid_measurement"):
        flags.append(f"INVALID: {r['invalid_measurement']}")
    return "; ".join([status, *flags]).replace("|", "/")


def cell_memory(record: dict[str, Any]) -> str:
    """The cell's own memory in MiB (``peak_memory_bytes``); a parallel cell's sum followed by each rank's:
    ``"812 (rank 0: 406, rank 1: 406)"``."""
    text = _mib(peak_memory_bytes(record))
    ranks = record.get("rank_memory") or []
    if ranks:
        text += " (" + ", ".join(f"rank {r['rank']}: {_mib(r.get('cell_memory_bytes'))}" for r in ranks) + ")"
    return text


def model_table(records: list[dict[str, Any]]) -> str:
    """The main markdown table of one model's cells."""
    header = (
        "variant", "features", "warm median (ms)", "CV", "speedup", "pairs", "cores busy beside", "cold (s)",
        "memory (MiB)", "SSIM ↑", "PSNR (dB) ↑", "max abs diff ↓", "evidence", "status",
    )  # fmt: skip
    align = ("left", "left", *("right",) * 10, "left", "left")
    rows = []
    for r in records:
        warm = r.get("warm") or {}
        parity = parity_of(r)
        evidence = "; ".join(v.get("summary", "") for v in (r.get("evidence") or {}).values()) or "–"
        speedup = "1.00x" if r["variant"] == "baseline" and warm else format_speedup(r.get("speedup_ci"))
        rows.append(
            (
                r["variant"], ", ".join(sorted(feature_options(r))) or "–", _ms(warm.get("median")),
                fmt(warm.get("cv"), 2), speedup, _pairs(r), _beside(r), fmt(r.get("cold_s"), 2),
                cell_memory(r), fmt(parity.get("ssim"), 4), fmt(parity.get("psnr"), 2),
                fmt(parity.get("max_abs_diff"), 4), evidence, _status(r),
            )
        )  # fmt: skip
    return "\n".join(table_lines(header, align, rows)) + "\n"


def stage_table(records: list[dict[str, Any]]) -> str:
    """Per-stage medians (ms) of each measured cell; ``hooks saw`` is the components' share of the call."""
    header = (
        "variant", "text encoding", "prepare", "denoising", "steps x median step", "decode prep", "VAE decode",
        "post-processing", "stages sum / end-to-end", "hooks saw",
    )  # fmt: skip
    rows = []
    for r in records:
        st = r.get("stages") or {}
        if not st:
            continue
        total = sum(st[k] for k in STAGE_KEYS)
        rows.append(
            (
                r["variant"], _ms(st["text_encoding"]), _ms(st["prepare"]), _ms(st["denoising"]),
                f"{st['steps_per_call']} x {_ms(st['step_median_s'])}", _ms(st["decode_prep"]),
                _ms(st["vae_decode"]), _ms(st["post_processing"]), f"{_ms(total)} / {_ms(st['end_to_end_s'])}",
                percent(st["component_share"]),
            )
        )  # fmt: skip
    return "\n".join(table_lines(header, ("left", *("right",) * 9), rows)) + "\n" if rows else ""


def compute_table(records: list[dict[str, Any]]) -> str:
    """FLOPs, the roofline floor and MFU per cell, and the memory split."""
    header = (
        "variant", "GFLOP / step", "floor / step (ms)", "median step (ms)", "MFU", "floor check",
        "load peak RSS (MiB)", "run peak RSS (MiB)", "PSS (MiB)", "device peak alloc / reserved (MiB)",
    )  # fmt: skip
    align = ("left", *("right",) * 4, "left", *("right",) * 4)
    rows = []
    for r in records:
        if r.get("warm") is None:
            continue
        roof = r.get("roofline") or {}
        load = r.get("memory_load") or {}
        mfu = roof.get("mfu")
        check = roof.get("floor_check") or ("BELOW FLOOR" if roof.get("below_floor") else "ok" if roof else "–")
        # A step that skips or changes work (a cached step) did not run the FLOPs the MFU counts: no MFU there.
        mfu_text = percent(mfu, 2) if mfu and not str(check).startswith("not applicable") else "–"
        flops = roof.get("flops_per_step")
        device = (
            f"{_mib(r.get('peak_device_allocated_bytes'))} / {_mib(r.get('peak_device_reserved_bytes'))}"
            if r.get("peak_device_allocated_bytes") is not None
            else "–"
        )
        rows.append(
            (
                r["variant"], fmt(flops / 1e9 if flops else None, 3), _ms(roof.get("floor_step_s"), 4),
                _ms((r.get("stages") or {}).get("step_median_s")), mfu_text, check, _mib(load.get("host_rss_peak")),
                _mib(r.get("peak_host_rss_bytes")), _mib(r.get("host_pss_bytes")), device,
            )
        )  # fmt: skip
    return "\n".join(table_lines(header, align, rows)) + "\n"


def weights_line(records: list[dict[str, Any]]) -> str:
    """`` · weights SHA-256 `…` `` for a trained zoo model's cells (``weights_sha256``), every hash when the cells
    ran different weights (a resumed run across a retraining); empty when no record carries one."""
    hashes = list(dict.fromkeys(str(r["weights_sha256"]) for r in records if r.get("weights_sha256")))
    if not hashes:
        return ""
    if len(hashes) == 1:
        return f" · weights SHA-256 `{hashes[0]}`"
    return " · cells ran different weights, SHA-256 " + ", ".join(f"`{h}`" for h in hashes)


def noise_floor_line(records: list[dict[str, Any]]) -> str:
    """The baseline measured against itself: in a fresh cell (parity) and interleaved with a copy (speed)."""
    rerun = next((r for r in records if is_noise_floor(r)), None)
    baseline = next((r for r in records if r["variant"] == "baseline"), None)
    if rerun is not None and (baseline is None or not_run(baseline)):
        if baseline is None:
            why = "no baseline in these results"
        else:
            why = f"the baseline {baseline['status']}" if baseline["status"] != "ok" else "the baseline has no timings"
        return (
            f"Noise floor: not measured ({why}: nothing to compare the re-run with): no parity and no speedup of "
            "this model could be measured."
        )
    if rerun is None or not rerun.get("parity"):
        return (
            "Noise floor: not measured (measure.noise_floor: false, or the re-run failed): every speedup of this "
            "model is unverified."
        )
    p = rerun["parity"]
    claim = rerun.get("speedup_ci") or {}
    parity = (
        f"Noise floor (the baseline re-run in a fresh cell): against the baseline SSIM {fmt(p['ssim'], 4)}, "
        f"PSNR {fmt(p['psnr'], 2)} dB, max abs diff {fmt(p['max_abs_diff'], 4)}."
    )
    if claim.get("method") != "interleaved":
        return parity + " Its speed was not timed interleaved: every speedup of this model is unverified."
    band = claim.get("band") or [None, None]
    if claim["verdict"] == "equivalent":
        verdict = "inside the noise threshold, as identical configurations should be: this model's claims stand"
    else:
        verdict = (
            "NOT inside the noise threshold: the machine was too noisy for it, so no equivalence of this model is "
            "published, and a faster/slower claim only where its interval clears the band even divided by every "
            "bias this interval allows (when it includes 1.0; otherwise none: they show as unverified)"
        )
    stopped = f"; {claim['stopped']}" if claim.get("stopped") else ""
    return (
        f"{parity} Interleaved with a second copy of itself ({claim['n']} ABBA pairs{stopped}): "
        f"{fmt(claim['ratio'], 3)}x, interval [{fmt(claim['low'], 3)}, {fmt(claim['high'], 3)}] against the "
        f"noise threshold [{fmt(band[0], 3)}, {fmt(band[1], 3)}] ({verdict}). A variant's speedup is claimed "
        "only when its whole interval lies outside that band, and shown as ≈1.0x when it lies inside it."
    )


def _frames(workload: Any, records: list[dict[str, Any]]) -> str:
    """``, 5 frames per video (wan)`` when a video model was measured; nothing for image-only sweeps."""
    from accel.profile import DEFAULT_VIDEO_FRAMES

    video = list(dict.fromkeys(r["model"] for r in records if r.get("modality") == "video"))
    if not video:
        return ""
    return f", {workload.num_frames or DEFAULT_VIDEO_FRAMES} frames per video ({', '.join(video)})"


def where_cells_ran(records: list[dict[str, Any]]) -> list[str]:
    """Report lines: the nodes the cells ran on (executor, torch threads, device, how many cells), and which
    were timed while another cell ran on their node."""
    from accel.measure.overlap import placements

    places = placements(records)
    if not places:
        return []
    where = "; ".join(
        f"{p['node']} ({p['executor']}, {p['threads'] if p['threads'] is not None else '?'} thread(s), "
        f"{p['device'] or '?'}): {p['cells']} cell(s)"
        for p in places
    )
    shared = [f"{r['model']}/{r['variant']}" for r in records if (r.get("timing") or {}).get("shared_node")]
    lines = [f"- Cells ran on: {where}"]
    if shared:
        lines.append(
            f"- Timed beside another cell on their node (speedups unverified; measure.exclusive serialises "
            f"timing per node): {', '.join(shared)}"
        )
    return lines


def render(
    profile: Profile,
    records: list[dict[str, Any]],
    environment: dict[str, Any],
    wall_s: float,
    figures: dict[str, list[str]] | None = None,
    resumed: int = 0,
) -> str:
    """The whole report as markdown (``resumed``: cells whose records came from an earlier run of the folder)."""
    packages = environment.get("packages", {})
    devices = ", ".join(environment.get("devices") or []) or f"CPU: {environment.get('cpu')}"
    w = profile.workload
    from accel import zoo

    lines = [f"# omni-accel report: {profile.name}", ""]
    trained = {m.source for m in profile.models if zoo.is_zoo_name(m.source) and zoo.ZOO[m.source].trained}
    if trained:
        lines += [
            "> **Miniature models on a CPU.** "
            + " ".join(TRAINED_MODELS.get(name, f"{name} was trained by the project.") for name in sorted(trained)),
            "> Their outputs have a ground truth, scored as prompt adherence. The other zoo pipelines have random",
            "> weights (mechanics only). None of the speeds is a real model's on a real accelerator.",
            "",
        ]
    elif any(zoo.is_zoo_name(m.source) for m in profile.models):
        lines += [
            "> **Tiny random-weight models on a CPU.** These pipelines come from omni-accel's offline zoo: the",
            "> numbers show the mechanics (does each feature engage, does it keep parity, what the harness",
            "> measures), not model quality and not the speed of a real model on a real accelerator.",
            "",
        ]
    synthetic = [m for m in profile.models if m.source.startswith("synthetic:")]
    if synthetic:
        sources = ", ".join(sorted({f"`{m.source}`" for m in synthetic}))
        lines += [
            f"> **Synthetic models** ({sources}): the published architectures with random weights made on the",
            "> device. Speed, memory and FLOPs are those of the real shapes (reduced where the source says",
            "> `depth` or `width`); the images are noise, so parity against the baseline is meaningful for",
            "> lossless features only.",
            "",
        ]
    lines += [
        profile.description.strip(),
        "",
        f"- Driver: {devices} ({environment.get('torch_threads')} torch threads)",
        *where_cells_ran(records),
        f"- Packages: torch {packages.get('torch')}, diffusers {packages.get('diffusers')}, "
        f"transformers {packages.get('transformers')}; omni-accel commit {environment.get('git_commit') or '–'}",
        f"- Workload: {len(w.prompts)} prompt(s) x {len(w.seeds)} seed(s), {w.steps} steps, {w.height}x{w.width}, "
        f"guidance {w.guidance_scale}, {w.num_images_per_prompt} image(s) per prompt{_frames(w, records)}",
        *[
            f"- Workload of {m.name}: the profile's, with "
            + ", ".join(f"{key} {value}" for key, value in sorted(m.workload.items()))
            for m in profile.models
            if m.workload
        ],
        f"- Timing: {profile.measure.warmup} warmup call(s) after the cold one, {profile.measure.repeats} timed "
        "pass(es) with the pipeline alone (warm = median per call, no stage hooks inside) and one pass with the "
        "stage hooks between them (after the first half: drift moves both alike); cold = load + first call",
        f"- Speedup: {_speedup_method(profile)}",
        f"- Parity against the baseline: {PARITY_DEFINITION}",
        *([f"- Video parity: {VIDEO_PARITY_DEFINITION}"] if any(r.get("video_parity") for r in records) else []),
        _wall_line(wall_s, len(records), resumed),
        "",
    ]
    lines += reference_table(records)
    lines += _support_section(records)
    lines += [f"![{Path(f).stem}]({f})\n" for f in (figures or {}).get("_all", [])]
    for model in dict.fromkeys(r["model"] for r in records):
        model_records = [r for r in records if r["model"] == model]
        measured = [r for r in model_records if not is_noise_floor(r)]
        lines += [
            f"## {model}",
            "",
            f"Source: `{model_records[0]['source']}`{weights_line(model_records)}",
            "",
            model_table(measured),
            noise_floor_line(model_records),
            "",
            *_adherence_section(measured),
            "### Stages (median per call, ms)",
            "",
            stage_table(measured),
            "### Compute and memory",
            "",
            compute_table(measured),
            *drift_table(measured, model),
            *denoiser_table(measured, model),
            *video_table(measured, model),
            *[f"![{Path(f).stem}]({f})\n" for f in (figures or {}).get(model, [])],
        ]
    lines += [
        "Units: ms and s of wall time, synchronised with the device at both ends of a call; cores busy beside:",
        "CPU time other processes (and a virtual machine's host, as steal time) used during the timed window /",
        "its wall time; memory: the cell's own peak (device allocated on a GPU, host RSS on a CPU) minus what the",
        "process held at the cell's start (cell_memory_bytes), a parallel cell's summed over its ranks, each rank's",
        "in brackets; RSS: peak resident",
        "memory of the process tree (the kernel's high-water mark: memory_method) while loading and during the",
        "timed runs; PSS:",
        "proportional set size at the end of the run; GFLOP / step: FlopCounterMode on the baseline's",
        "denoiser calls of one step; floor: GFLOP / peak (peak: "
        + (records[0].get("peak_flops_source") or "–")
        + "); MFU: GFLOP / median step / peak. A step below its floor is physically impossible and marks the",
        "measurement INVALID. ↑ higher is better, ↓ lower is better.",
        "",
    ]
    return "\n".join(lines)


def _speedup_method(profile: Profile) -> str:
    m = profile.measure
    if m.timing != "interleaved":
        return (
            "baseline cell's warm median / variant's, cells timed one after the other (measure.timing: "
            "sequential): drift between cells is not controlled, so no speedup is published (shown `–`; the warm "
            "medians are in the table and each ratio in the record)"
        )
    first = variant_first_look(m.pairs, m.max_pairs, m.confidence) if m.noise_floor else m.pairs
    looks, per_look = planned_looks(first, m.max_pairs, m.confidence)
    budget = "" if m.pair_budget_s is None else f" or {m.pair_budget_s:g} s"
    floor_first, cannot = "", ""
    if m.noise_floor:
        floor_looks, _ = planned_looks(floor_first_look(m.pairs, m.max_pairs, m.confidence), m.max_pairs, m.confidence)
        notice = sampling_notice(m.pairs, m.max_pairs, m.confidence)
        floor_first = f" (the noise floor {floor_looks[0]} first" + (
            ")" if notice else ", enough to bound the arms' bias)"
        )
        cannot = f" Note: {notice}." if notice else ""
    more = f", then more at looks {', '.join(map(str, looks[1:]))} while undecided" if len(looks) > 1 else ""
    return (
        "median of the ratios reference / variant, each from two adjacent calls of the variant and a freshly "
        "loaded unaccelerated reference in the same process (ABBA order, so drift and background load hit both "
        f"alike), drawn until decided: {looks[0]} pairs first{floor_first}{more} "
        f"(at most {m.max_pairs} pairs{budget} per cell; the `pairs` column says how many a cell "
        "drew). Its order-statistic interval has "
        f"{percent(per_look, 2)} confidence at each of the {len(looks)} planned looks (at least "
        f"{percent(m.confidence)} overall, Bonferroni). Against the noise threshold ±{m.min_effect:.0%} "
        f"([{1 / (1 + m.min_effect):.3f}, {1 + m.min_effect:.2f}]): `1.82x [1.61–2.03]` when the interval lies "
        "outside it (faster or slower), `≈1.0x` when it lies inside it (equivalent), `≈1.0x?` when, undecided, "
        "it includes 1.0 (noise), `1.82x?` when it excludes 1.0 but reaches into the band (inconclusive) or is "
        "unverified (the noise floor did not land inside the band, too few pairs, engine or sequential timing)" + cannot
    )


def _adherence_section(records: list[dict[str, Any]]) -> list[str]:
    from accel.report.adherence import adherence_table, has_adherence

    if not has_adherence(records):
        return []
    return ["### Prompt adherence (ground truth)", "", adherence_table(records)]


def reference_table(records: list[dict[str, Any]]) -> list[str]:
    """The seed reviewers' table: every target's baseline against the reference model's baseline."""
    baselines = [r for r in records if r["variant"] == "baseline"]
    reference = next((r.get("reference_model") for r in baselines if r.get("reference_model")), None)
    if reference is None:
        return []
    header = (
        "model",
        "target",
        "SSIM ↑",
        "PSNR (dB) ↑",
        "max abs diff ↓",
        "warm median (ms)",
        "cold start (s)",
        "status",
    )
    cells = []
    for r in baselines:
        parity = r.get("parity_vs_reference") or ({"ssim": 1.0, "psnr": math.inf, "max_abs_diff": 0.0}
                                                 if r["model"] == reference else {})  # fmt: skip
        warm = warm_median(r)
        status = (r["status"] if not r.get("error") else f"{r['status']}: {r['error']}") + declared_tag(r)
        status = status.replace("|", "/")
        cells.append(
            (
                r["model"], r.get("target"), fmt(parity.get("ssim"), 4), fmt(parity.get("psnr"), 2),
                fmt(parity.get("max_abs_diff"), 4), _ms(warm), fmt(r.get("cold_s"), 2), status,
            )
        )  # fmt: skip
    rows = [
        f"## Targets against `{reference}`",
        "",
        "Each target's unaccelerated baseline against the reference's, same checkpoint, prompts and seeds.",
        "",
        *table_lines(header, ("left", "left", *("center",) * 5, "left"), cells),
        "",
        "Cold start: load (for engines, process start including their fixed warm-up, measured from outside) plus",
        "the first call. Engines return 8-bit images: their parity includes up to 1/255 of rounding.",
        "",
    ]
    return rows


def _support_section(records: list[dict[str, Any]]) -> list[str]:
    from accel.gate import load_gate_data
    from accel.report.tables import support_matrix

    return [
        "## Support matrix",
        "",
        "Generated from the cells below and feature_matrix/ (claims, thresholds); `omni-accel table RUN_DIR` prints",
        "it with the compatibility matrix and the performance tables, ready to paste or inject into docs.",
        "",
        support_matrix(records, load_gate_data()),
    ]


def write_report(
    run_dir: Path,
    profile: Profile,
    records: list[dict[str, Any]],
    environment: dict[str, Any],
    wall_s: float,
    figures: dict[str, list[str]] | None = None,
    resumed: int = 0,
) -> Path:
    """Write ``report.md`` into the run directory."""
    path = Path(run_dir) / REPORT_FILE
    path.write_text(render(profile, records, environment, wall_s, figures, resumed))
    return path


def _wall_line(wall_s: float, cells: int, resumed: int) -> str:
    """The sweep's wall time per cell it measured; a resumed run's earlier cells are not in its wall time."""
    measured = cells - resumed
    line = f"- Sweep wall time: {fmt(float(wall_s), 1)} s for {measured} cells"
    line += f" ({fmt(wall_s / measured, 1)} s per cell)" if measured else " (the report only)"
    if resumed:
        line += f"; {resumed} more cells came from an earlier run of this folder (--resume), not timed in it"
    return line
