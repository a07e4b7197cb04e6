"""The sweep loop: plan cells, check every input before running anything, run, compare, record.

For each model the baseline runs first, then every variant with the same prompts and seeds. Each cell's
record gets its parity against the baseline and its speedup, then is appended to ``results.jsonl``
before the next cell starts. At the end the results table, images and ``report.md`` are written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from accel.errors import ConfigError
from accel.profile import Profile
from accel.results import RESULTS_FILE, ResultsLog, write_table
from accel.sweep.cell import BASELINE, NOISE_FLOOR, CellSpec, outputs_path, sample_keys
from accel.sweep.resume import RESOLVED_PROFILE_FILE, check_same_profile, measured_records

ENVIRONMENT_FILE = "environment.json"


@dataclass
class SweepResult:
    """Where a finished sweep wrote its files, and its records."""

    run_dir: Path
    records: list[dict[str, Any]]
    report_path: Path
    wall_s: float


def plan(profile: Profile, run_dir: Path) -> list[CellSpec]:
    """Every cell in execution order: per model, the baseline, its noise-floor re-run, then each variant."""
    cells = []
    variants = profile.all_variants()
    reference = profile.measure.reference_model
    models = sorted(profile.models, key=lambda m: m.name != reference) if reference else profile.models
    for model in models:
        cells.append(CellSpec(model, profile.workload, profile.measure, BASELINE, {}, str(run_dir)))
        if profile.measure.noise_floor:
            cells.append(CellSpec(model, profile.workload, profile.measure, NOISE_FLOOR, {}, str(run_dir)))
        cells.extend(
            CellSpec(model, profile.workload, profile.measure, v.name, dict(v.features), str(run_dir)) for v in variants
        )
    return cells


def check_inputs(profile: Profile, source: str) -> None:
    """Everything that can be checked without running: sources exist, resolution fits each model."""
    from accel.targets.adapter import resolution_factor, resolve_source

    for index, model in enumerate(profile.models):
        where = f"{source}: models[{index}]"
        location = resolve_source(model, where)
        factor = resolution_factor(location) if Path(location).is_dir() else None
        for key in ("height", "width"):
            value = getattr(profile.workload, key)
            if factor and value % factor:
                raise ConfigError(
                    f"{source}: workload.{key}: {value} is not a multiple of {factor}, the resolution factor "
                    f"of model '{model.name}' (VAE downsampling x 2x2 patches)"
                )


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run directory and prove it is writable before anything is measured."""
    probe = run_dir / ".write-probe"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{run_dir}: output directory is not writable: {error.strerror or error}") from error


def attach_parity(record: dict[str, Any], baseline: dict[str, Any] | None, run_dir: Path, keys: list[str]) -> None:
    """Add parity against the baseline's outputs and the warm speedup to a measured record."""
    from accel.measure.parity import aggregate, compare

    if record["variant"] == BASELINE or record.get("warm") is None:
        return
    if baseline is None or baseline.get("warm") is None:
        record.setdefault("notes", []).append("no baseline measured: parity and speedup unavailable")
        return
    record["speedup"] = baseline["warm"]["median"] / record["warm"]["median"]
    record["memory_reduction"] = _ratio(baseline.get("peak_host_rss_bytes"), record.get("peak_host_rss_bytes"))
    with (
        np.load(outputs_path(run_dir, record["model"], BASELINE)) as reference,
        np.load(outputs_path(run_dir, record["model"], record["variant"])) as candidate,
    ):
        per_sample = [compare(candidate[key], reference[key]) for key in keys]
    record["parity"] = aggregate(per_sample).to_dict()


def check_engine_effect(record: dict[str, Any]) -> None:
    """An engine cell's features engage only on evidence: the engine's own log line, or, for a lossy
    feature, an output that differs from the engine's baseline (an effect its default path cannot produce).
    A lossy feature whose output is identical did not engage whatever the engine logged. Without evidence
    for every feature the cell fails with the reason; acceptance alone is never engagement."""
    from accel.features import FEATURES

    if not record.get("engine") or record["status"] != "ok":
        return
    evidence = record.setdefault("evidence", {})
    parity = record.get("parity") or {}
    missing = []
    for name, raw in (record.get("features") or {}).items():
        entry = evidence.setdefault(name, {"engaged": False, "summary": "accepted by vLLM-Omni"})
        lossy = FEATURES[name].feature_class_for(FEATURES[name].parse_options(raw)).value == "lossy"
        if lossy and parity.get("bit_identical") is False:
            entry["engaged"] = True
            entry["summary"] = "; ".join(
                [*([entry["summary"]] if entry.get("engine_log") else []), "output differs from the engine's baseline"]
            )
        elif lossy and parity.get("bit_identical"):
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; but the output is identical to the engine's baseline"
        elif lossy:
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; no baseline output to show an effect"
        if not entry["engaged"]:
            missing.append(f"{name}: {entry['summary']}")
    if missing:
        record["status"] = "failed"
        record["error"] = "no evidence of engagement: " + "; ".join(missing)


def attach_reference_parity(record: dict[str, Any], reference: str, run_dir: Path, keys: list[str]) -> None:
    """Parity of a model's baseline against the reference model's baseline (same prompts and seeds)."""
    from accel.measure.parity import aggregate, compare

    if record["model"] == reference or not record.get("outputs_file"):
        return
    reference_file = outputs_path(run_dir, reference, BASELINE)
    if not reference_file.is_file():
        record.setdefault("notes", []).append(f"reference model '{reference}' has no baseline outputs")
        return
    with np.load(reference_file) as ref, np.load(run_dir / record["outputs_file"]) as mine:
        record["parity_vs_reference"] = aggregate([compare(mine[k], ref[k]) for k in keys]).to_dict()
    record["reference_model"] = reference


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


# Features whose steps may legitimately beat the full-step floor (they skip or change the work).
NO_FLOOR_FAMILIES = {"cache": "a cache skips work on cached steps", "quant": "the peak depends on the quantized kernel"}


def attach_roofline(record: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    """FLOPs per step from the baseline, floor time per step and MFU; flag steps faster than the floor."""
    from accel.features import FEATURES
    from accel.measure.flops import roofline

    if not baseline or not baseline.get("flops_per_denoiser_call") or not record.get("step_times"):
        return
    steps = (baseline.get("stages") or {}).get("steps_per_call") or 0
    calls = baseline.get("denoiser_calls_per_call") or 0
    if not steps or not calls:
        return
    flops_per_step = baseline["flops_per_denoiser_call"] * calls / steps
    result = roofline(flops_per_step, record.get("peak_flops"), record["step_times"])
    result["flops_per_step"] = flops_per_step
    result["flops_per_call"] = flops_per_step * steps
    exempt = [
        NO_FLOOR_FAMILIES[FEATURES[n].family]
        for n in record.get("features") or {}
        if FEATURES[n].family in NO_FLOOR_FAMILIES
    ]
    if exempt:
        result["below_floor"] = False
        result["floor_check"] = f"not applicable: {exempt[0]}"
    record["roofline"] = result
    if result["below_floor"]:
        record["invalid_measurement"] = (
            f"a step took {result['fastest_step_s'] * 1e3:.3f} ms, below the {result['floor_step_s'] * 1e3:.3f} ms "
            "floor (FLOPs / peak): the timer cannot be trusted"
        )


def run_sweep(
    profile: Profile,
    source: str,
    run_dir: Path,
    executor: str | None = None,
    show_progress: bool = True,
    resume: bool = False,
    ray_address: str | None = None,
) -> SweepResult:
    """Run every cell of ``profile`` and write results, images and the report under ``run_dir``.

    With ``resume``, cells already in ``run_dir``'s results are kept and skipped; a profile that changed
    since the run started is refused. Without it, a run directory that already holds results is refused.
    """
    from accel import env
    from accel.report.figures import write_figures
    from accel.report.images import save_images
    from accel.report.markdown import write_report
    from accel.sweep.executors import get_executor

    started = time.perf_counter()
    previous: list[dict[str, Any]] = []
    if resume:
        check_same_profile(run_dir, profile)
        previous = measured_records(run_dir)
    elif (run_dir / RESULTS_FILE).is_file() and (run_dir / RESULTS_FILE).stat().st_size:
        raise ConfigError(
            f"{run_dir}: already holds results; continue it with 'omni-accel sweep --resume {run_dir}' "
            "or choose another --out"
        )
    prepare_run_dir(run_dir)
    check_inputs(profile, source)
    measure = profile.measure
    submit = get_executor(
        executor or measure.executor, measure.timeout_s, measure.cpus_per_cell, measure.gpus_per_cell, ray_address
    )
    log = ResultsLog(run_dir / RESULTS_FILE)
    if not resume:
        (run_dir / RESOLVED_PROFILE_FILE).write_text(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
    environment = env.capture(profile.fingerprint())
    (run_dir / ENVIRONMENT_FILE).write_text(json.dumps(environment, indent=2))

    cells = plan(profile, run_dir)
    keys = sample_keys(profile.workload)
    done = {(r["model"], r["variant"]): r for r in previous}
    records: list[dict[str, Any]] = []
    baselines: dict[str, dict[str, Any]] = {r["model"]: r for r in previous if r["variant"] == BASELINE}
    todo = [cell for cell in cells if (cell.model.name, cell.variant) not in done]
    if todo and measure.sweep_warmup and (executor or measure.executor) != "inline":
        submit(todo[0]).result()  # unrecorded: its outputs file is overwritten when the cell runs for real
    pending = {cell.key: submit(cell) for cell in todo}
    with _progress(show_progress, len(cells)) as advance:
        for cell in cells:
            advance(cell.key)
            if (cell.model.name, cell.variant) in done:
                records.append(done[(cell.model.name, cell.variant)])
                continue
            record = pending[cell.key].result()
            if cell.variant == BASELINE:
                baselines[cell.model.name] = record
            if cell.variant == NOISE_FLOOR:
                record["role"] = "noise_floor"
            attach_parity(record, baselines.get(cell.model.name), run_dir, keys)
            attach_roofline(record, baselines.get(cell.model.name))
            check_engine_effect(record)
            if cell.variant == BASELINE and profile.measure.reference_model:
                attach_reference_parity(record, profile.measure.reference_model, run_dir, keys)
            if record.get("outputs_file"):
                record["images"] = save_images(run_dir, record, keys)
            record["profile_fingerprint"] = profile.fingerprint()
            record["timestamp"] = time.time()
            log.append(record)
            records.append(record)
        advance(None)

    write_table(records, run_dir)
    figures = write_figures(run_dir, records, keys)
    wall_s = time.perf_counter() - started
    report_path = write_report(run_dir, profile, records, environment, wall_s, figures)
    return SweepResult(run_dir, records, report_path, wall_s)


class _progress:
    """A rich progress bar over cells (or nothing), used as ``with _progress(on, n) as advance``."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self.bar: Any = None
        self.task: Any = None
        self.done = -1

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
            )
            self.bar.start()
            self.task = self.bar.add_task("cells", total=self.total)
        return self.advance

    def advance(self, label: str | None) -> None:
        if self.bar is None:
            return
        self.done += 1
        self.bar.update(self.task, completed=self.done, description=label or "done")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
