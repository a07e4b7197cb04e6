"""``report.md``: a table per model (variant, latency, speedup, cold time, memory, parity, status)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from accel.measure.parity import PARITY_DEFINITION
from accel.profile import Profile

REPORT_FILE = "report.md"


def fmt(value: Any, digits: int = 3) -> str:
    """Fixed decimals; ``inf`` for infinity and an en dash for a missing value."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}f}"
    return str(value)


def _mib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**20:.0f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:.1f}"


def model_table(records: list[dict[str, Any]]) -> str:
    """The markdown table of one model's cells."""
    header = (
        "| variant | features | warm median (ms) | CV | speedup | cold (s) | peak RSS (MiB) "
        "| SSIM ↑ | PSNR (dB) ↑ | max abs diff ↓ | evidence | status |\n"
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n"
    )
    rows = []
    for r in records:
        warm = r.get("warm") or {}
        parity = r.get("parity") or {}
        evidence = "; ".join(v.get("summary", "") for v in (r.get("evidence") or {}).values()) or "–"
        status = r["status"] if not r.get("error") else f"{r['status']}: {r['error']}"
        speedup = r.get("speedup", 1.0 if r["variant"] == "baseline" and warm else None)
        rows.append(
            f"| {r['variant']} | {', '.join(sorted(r.get('features') or {})) or '–'} | {_ms(warm.get('median'))} "
            f"| {fmt(warm.get('cv'), 2)} | {fmt(speedup, 2)}{'x' if speedup else ''} | {fmt(r.get('cold_s'), 2)} "
            f"| {_mib(r.get('peak_host_rss_bytes'))} | {fmt(parity.get('ssim'), 4)} | {fmt(parity.get('psnr'), 2)} "
            f"| {fmt(parity.get('max_abs_diff'), 4)} | {evidence} | {status.replace('|', '/')} |"
        )
    return header + "\n".join(rows) + "\n"


def render(profile: Profile, records: list[dict[str, Any]], environment: dict[str, Any], wall_s: float) -> str:
    """The whole report as markdown."""
    packages = environment.get("packages", {})
    devices = ", ".join(environment.get("devices") or []) or f"CPU: {environment.get('cpu')}"
    w = profile.workload
    lines = [
        f"# omni-accel report: {profile.name}",
        "",
        profile.description.strip(),
        "",
        f"- Device: {devices} ({environment.get('torch_threads')} torch threads)",
        f"- Packages: torch {packages.get('torch')}, diffusers {packages.get('diffusers')}, "
        f"transformers {packages.get('transformers')}; omni-accel commit {environment.get('git_commit') or '–'}",
        f"- Workload: {len(w.prompts)} prompt(s) x {len(w.seeds)} seed(s), {w.steps} steps, {w.height}x{w.width}, "
        f"guidance {w.guidance_scale}, {w.num_images_per_prompt} image(s) per prompt, {w.num_frames} frames (video)",
        f"- Timing: {profile.measure.warmup} warmup call(s) after the cold one, {profile.measure.repeats} timed "
        f"pass(es); warm = median per call; cold = load + first call; speedup = baseline warm / variant warm",
        f"- Parity against the baseline: {PARITY_DEFINITION}",
        f"- Sweep wall time: {wall_s:.1f} s for {len(records)} cells ({wall_s / max(1, len(records)):.1f} s per cell)",
        "",
    ]
    for model in dict.fromkeys(r["model"] for r in records):
        model_records = [r for r in records if r["model"] == model]
        lines += [f"## {model}", "", f"Source: `{model_records[0]['source']}`", "", model_table(model_records)]
    lines += [
        "Units: ms and s of wall time, synchronised with the device; RSS: peak resident memory of the process",
        "tree during the timed runs; ↑ higher is better, ↓ lower is better.",
        "",
    ]
    return "\n".join(lines)


def write_report(
    run_dir: Path, profile: Profile, records: list[dict[str, Any]], environment: dict[str, Any], wall_s: float
) -> Path:
    """Write ``report.md`` into the run directory."""
    path = Path(run_dir) / REPORT_FILE
    path.write_text(render(profile, records, environment, wall_s))
    return path
