"""The sweep loop: plan cells, check every input before running anything, run, compare, record.

For each model the baseline runs first, then every variant with the same prompts and seeds. Each cell's
record gets its parity against the baseline and its speedup, then is appended to ``results.jsonl``
before the next cell starts. At the end the results table, images and ``report.md`` are written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from accel.errors import ConfigError, did_you_mean
from accel.measure.overlap import attach_overlap, placements, running_spans, shared_reason, span
from accel.profile import ModelSpec, Profile
from accel.results import NOISE_FLOOR_ROLE, RESULTS_FILE, ResultsLog, outputs_path, peak_memory_bytes, write_table
from accel.sweep.adherence import attach_adherence
from accel.sweep.resume import (
    PLANNED_CELLS_FILE,
    RESOLVED_PROFILE_FILE,
    check_same_profile,
    measured_records,
    resolved_profile,
)
from accel.sweep.spec import BASELINE, CELL_FILES, NOISE_FLOOR, CellSpec, sample_keys

ENVIRONMENT_FILE = "environment.json"


@dataclass
class SweepResult:
    """Where a finished sweep wrote its files, and its records."""

    run_dir: Path
    records: list[dict[str, Any]]
    report_path: Path
    wall_s: float


def local_sources_resolved(models: list[Any]) -> list[Any]:
    """``models`` with each checkpoint given as a relative local path made absolute (from the driver's working
    directory): a worker on another node, in another directory, then reads the same path."""
    from accel import zoo
    from accel.zoo import synthetic

    resolved = []
    for model in models:
        source = model.source
        local = not zoo.is_zoo_name(source) and not synthetic.is_synthetic(source)
        if local and not Path(source).expanduser().is_absolute() and Path(source).expanduser().exists():
            model = model.model_copy(update={"source": str(Path(source).expanduser().resolve())})
        resolved.append(model)
    return resolved


def plan(profile: Profile, run_dir: Path) -> list[CellSpec]:
    """Every cell in execution order: per model, the baseline, its noise-floor re-run, then each variant."""
    cells = []
    variants = profile.variant_plan().variants
    reference = profile.measure.reference_model
    models = local_sources_resolved(profile.models)
    models = sorted(models, key=lambda m: m.name != reference) if reference else models
    for model in models:
        cells.append(CellSpec(model, profile.workload, profile.measure, BASELINE, {}, str(run_dir)))
        if profile.measure.noise_floor:
            cells.append(CellSpec(model, profile.workload, profile.measure, NOISE_FLOOR, {}, str(run_dir)))
        cells.extend(
            CellSpec(model, profile.workload, profile.measure, v.name, v.features, str(run_dir), configs=v.configs)
            for v in variants
            if v.models is None or model.name in v.models
        )
    return cells


def unmeasured_cells(run_dir: Path, records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(model, variant) of every cell the run's profile plans that ``records`` lack (an interrupted sweep, a
    lost line); empty when the directory holds no resolved profile (a bare results file)."""
    measured = {(r["model"], r["variant"]) for r in records}
    planned_file = run_dir / PLANNED_CELLS_FILE
    if planned_file.is_file():
        try:
            planned = [tuple(cell) for cell in json.loads(planned_file.read_text())]
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{planned_file}: not a list of [model, variant] pairs ({error})") from error
        if not all(len(cell) == 2 and all(isinstance(part, str) for part in cell) for cell in planned):
            raise ConfigError(f"{planned_file}: not a list of [model, variant] pairs")
    elif (run_dir / RESOLVED_PROFILE_FILE).is_file():  # a run from before the planned cells were written
        planned = [(c.model.name, c.variant) for c in plan(resolved_profile(run_dir), run_dir)]
    else:
        return []
    return [(model, variant) for model, variant in planned if (model, variant) not in measured]


def check_inputs(profile: Profile, source: str, build: bool = True) -> None:
    """Everything that can be checked without running: sources exist, resolution fits each model, and each
    local checkpoint's files, classes, configs and weight shapes and the variants' components agree.

    ``build`` false (``omni-accel plan``): only what is already on this machine is checked; a zoo entry not
    built yet and a hub id are left to the sweep (building or looking up costs time or the network)."""
    from accel.errors import ModelUnavailable
    from accel.targets.adapter import resolution_factor

    image_models: list[str] = []
    indexes: dict[str, dict[str, Any]] = {}
    for index, model in enumerate(profile.models):
        where = f"{source}: models[{index}]"
        try:
            location = _location(model, where, build)
        except ModelUnavailable:  # a zoo family this diffusers lacks: its cells say so, the others run
            continue
        if location is None:
            continue
        if Path(location).is_dir():
            makes_video, indexes[model.name] = check_model_files(profile, index, location, source)
            if makes_video is False:
                image_models.append(model.name)
        factor = resolution_factor(location) if Path(location).is_dir() or location.startswith("synthetic:") else None
        for key in ("height", "width"):
            value = getattr(profile.workload, key)
            if factor and value % factor:
                raise ConfigError(
                    f"{source}: workload.{key}: {value} is not a multiple of {factor}, the resolution factor "
                    f"of model '{model.name}' (VAE downsampling x 2x2 patches)"
                )
    if profile.workload.num_frames is not None and len(image_models) == len(profile.models):
        raise ConfigError(
            f"{source}: workload.num_frames: no model of this profile makes videos ({', '.join(image_models)}: "
            "images); num_frames applies to video models only: remove it, or add a video model"
        )
    check_components(profile, indexes, source)


def _location(model: ModelSpec, where: str, build: bool) -> str | None:
    from accel import zoo
    from accel.targets.adapter import _looks_like_path, resolve_source
    from accel.zoo import synthetic

    if not build and zoo.is_zoo_name(model.source) and not zoo.is_built(model.source):
        return None
    if not build and not synthetic.is_synthetic(model.source) and not _looks_like_path(model.source):
        return None  # a hub id (org/name): the sweep looks it up
    return resolve_source(model, where)


def check_components(profile: Profile, indexes: dict[str, dict[str, Any]], source: str) -> None:
    """Every ``components`` a variant's feature names (quantization's) is a component with weights of each
    local model the variant runs on. A misspelt one used to become an unsupported, skipped cell and a green
    gate."""
    from accel.sweep.checkpoint import WEIGHTLESS_SUFFIXES

    for variant in profile.variant_plan().variants:
        for feature, config in variant.configs.items():
            wanted = getattr(config, "components", None)
            if not wanted:
                continue
            for model_name, index in indexes.items():
                if variant.models is not None and model_name not in variant.models:
                    continue
                present = sorted(
                    name
                    for name, entry in index.items()
                    if not name.startswith("_")
                    and isinstance(entry, list)
                    and len(entry) == 2
                    and isinstance(entry[1], str)
                    and not entry[1].endswith(WEIGHTLESS_SUFFIXES)
                )
                for component in wanted:
                    if component not in present:
                        raise ConfigError(
                            f"{source}: variant '{variant.name}': {feature}.components: model '{model_name}' has "
                            f"no component '{component}'.{did_you_mean(component, present)} Components with "
                            f"weights: {', '.join(present)}"
                        )


def check_model_files(
    profile: Profile, position: int, location: str, source: str
) -> tuple[bool | None, dict[str, Any]]:
    """Model ``position``'s checkpoint is complete, its classes, configs and weights agree, and ``target:
    native`` has a pipeline for it; errors name the model, the component and the file. Returns whether it
    makes videos (None: cannot tell) and its ``model_index.json``."""
    from accel.sweep.checkpoint import check_checkpoint, check_classes, is_video_pipeline

    model = profile.models[position]
    where = f"{source}: models[{position}]"
    index = check_checkpoint(location, f"{where} ('{model.name}')")
    if model.target == "native":
        from accel.native import native_for

        try:
            native_for(location, model.native_pipeline)
        except ConfigError as error:
            raise ConfigError(f"{where}.target: model '{model.name}': {error}") from error
    custom = model.target != "adapter" or "custom_pipeline" in model.load_kwargs
    check_classes(location, index, f"{where} ('{model.name}')", pipeline_class=not custom)
    return (False if model.target != "adapter" else is_video_pipeline(index)), index


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
    record["memory_reduction"] = _ratio(peak_memory_bytes(baseline), peak_memory_bytes(record))  # as the peak column
    with (
        np.load(outputs_path(run_dir, record["model"], BASELINE)) as reference,
        np.load(outputs_path(run_dir, record["model"], record["variant"])) as candidate,
    ):
        per_sample = [compare(candidate[key], reference[key]) for key in keys]
    record["parity"] = aggregate(per_sample).to_dict()


# The interleaved reference must reproduce the baseline: 8-bit rounding of its output is the tolerance.
REFERENCE_TOLERANCE = 2 / 255


def attach_speedup(
    record: dict[str, Any],
    baseline: dict[str, Any] | None,
    noise_floor: dict[str, Any] | None,
    run_dir: Path,
    keys: list[str],
    measure: Any,
) -> None:
    """The speedup with its interval, and what it may be published as (``speedup_ci``; ``speedup`` = its ratio).

    Interleaved cells carry their own paired timings (drawn until decided: ``accel.measure.speedup``); others
    (engines, ``measure.timing: sequential``) are compared with the baseline cell's samples and stay unverified.
    Every interval is judged against the same noise threshold (``1 ± measure.min_effect``); a variant's claim
    stands only when its model's noise-floor cell landed inside that band (never widened to fit).
    """
    from accel.measure.speedup import (
        SpeedupClaim,
        SpeedupEstimate,
        against_noise_floor,
        classify,
        noise_band,
        sequential_speedup,
    )

    if record["variant"] == BASELINE or record.get("warm") is None or not baseline or baseline.get("warm") is None:
        return
    paired = record.get("paired")
    if paired:
        estimate = SpeedupEstimate(**paired["estimate"])
    else:
        estimate = sequential_speedup(baseline["warm_samples"], record["warm_samples"], measure.confidence)
    why_unverified = (_reference_problem(record, run_dir, keys) if paired else None) or shared_reason(record)
    band: tuple[float, float] | None = noise_band(measure.min_effect)
    floor_claim: SpeedupClaim | None = None
    if record["variant"] != NOISE_FLOOR:
        floor_ci = (noise_floor or {}).get("speedup_ci") or {}
        floor_usable = (noise_floor or {}).get("paired") and floor_ci and not floor_ci.get("reference_problem")
        if not floor_usable:
            band = None
        else:
            floor_claim = SpeedupClaim(floor_ci["verdict"], floor_ci["reason"], band)
        if floor_usable and shared_reason(noise_floor):  # its band is contaminated: no claim against it
            why_unverified = why_unverified or f"the noise floor was {shared_reason(noise_floor)}"
    claim = against_noise_floor(classify(estimate, band, measure.confidence, why_unverified), floor_claim)
    record["speedup"] = estimate.ratio
    record["speedup_ci"] = {
        **estimate.to_dict(),
        "overall_confidence": estimate.overall_confidence,
        "verdict": claim.verdict,
        "reason": claim.reason,
        "band": list(claim.band) if claim.band else None,
        "reference_problem": why_unverified,
    }


def _reference_problem(record: dict[str, Any], run_dir: Path, keys: list[str]) -> str | None:
    """Why the interleaved reference cannot stand for the baseline (its output differs), or None."""
    from accel.sweep.spec import REFERENCE_OUTPUT_KEY

    baseline_file = outputs_path(run_dir, record["model"], BASELINE)
    with np.load(baseline_file) as reference, np.load(run_dir / record["outputs_file"]) as candidate:
        if REFERENCE_OUTPUT_KEY not in candidate.files:
            return "the interleaved reference's output was not kept"
        mine = candidate[REFERENCE_OUTPUT_KEY]
        theirs = reference[keys[0]][: mine.shape[0]]
        if mine.shape != theirs.shape:
            return f"the interleaved reference's output has shape {mine.shape}, the baseline's {theirs.shape}"
        difference = float(np.abs(mine.astype(np.float64) - theirs).max())
    if difference > REFERENCE_TOLERANCE:
        return (
            f"the interleaved reference's output differs from the baseline's (max abs diff {difference:.4f}): "
            "a process-global setting of this variant reached the unaccelerated reference"
        )
    return None


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


def attach_roofline(record: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    """FLOPs per step from the baseline, floor time per step and MFU, and whether a step beat the floor (a
    fact: what it means for the cell, a feature's exemption included, is ``gate.judge_timing_validity``'s)."""
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
    record["roofline"] = result


def cpu_peaks(profile: Profile, run_dir: Path, resume: bool) -> dict[str, Any] | None:
    """The CPU peak per dtype of the models that run on the CPU, measured once for the sweep (kept when a
    resumed sweep runs on the same host), so every cell's floor and MFU use the same number."""
    import socket

    import torch

    from accel import env
    from accel.targets.registry import is_engine

    on_cpu = ("cpu", "auto") if not torch.cuda.is_available() else ("cpu",)
    dtypes = [m.dtype for m in profile.models if not is_engine(m.target) and m.device in on_cpu]
    if not dtypes:
        return None
    if resume:
        try:
            kept = json.loads((run_dir / ENVIRONMENT_FILE).read_text()).get(env.CPU_PEAKS_KEY) or {}
        except (OSError, ValueError):
            kept = {}
        if kept.get("host") == socket.gethostname() and set(dtypes) <= set(kept.get("flops") or {}):
            return kept
    return env.measure_cpu_peaks(dtypes)


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
    The run directory is locked for the whole sweep (``accel.sweep.lock``): a second sweep or resume on it
    is refused while this one lives. Ctrl-C stops the running cell's worker and raises ``Interrupted``
    naming the ``--resume`` command; every cell recorded so far is kept.
    """
    from accel.errors import Interrupted
    from accel.sweep.executors import cancel_pending
    from accel.sweep.lock import RunLock, describe_owner

    if resume:
        check_same_profile(run_dir, profile)  # "not a run directory" before anything is created
    created = not run_dir.exists()
    prepare_run_dir(run_dir)
    try:
        with RunLock(run_dir) as lock:
            if lock.stale_owner:
                print(f"note: {run_dir}: taking over the lock of a sweep that is no longer running: "
                      f"{describe_owner(lock.stale_owner)}", file=sys.stderr)  # fmt: skip
            try:
                with _sigterm_as_interrupt():
                    return _run_sweep(profile, source, run_dir, executor, show_progress, resume, ray_address)
            except KeyboardInterrupt:
                cancel_pending()
                from accel.sweep.workers import stop_helper_processes

                stop_helper_processes()  # what they print on stopping comes before the --resume line
                raise Interrupted(interrupted_message(run_dir)) from None
    except BaseException:
        from accel.sweep.workers import stop_helper_processes

        stop_helper_processes()  # a refused input: the forkserver started for the cells is not left importing
        if created:
            _remove_if_empty(run_dir)  # refused or stopped before anything was written: no empty --out left
        raise


def _remove_if_empty(run_dir: Path) -> None:
    """Remove a run directory this sweep created when nothing was written into it."""
    with contextlib.suppress(OSError):
        run_dir.rmdir()  # fails, leaving it, when it holds anything


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, ``timeout``, a cancelled CI job) ends the sweep as Ctrl-C does: workers stopped,
    every recorded cell kept. Unlike Ctrl-C it reaches only the sweep, so the sweep must stop its workers
    (without this they outlived it, still measuring). Only the main thread can install a handler."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_message(run_dir: Path) -> str:
    """What a Ctrl-C leaves: how many cells are kept, and the command that continues the run."""
    from accel.results import load_results

    results = run_dir / RESULTS_FILE
    if not (run_dir / RESOLVED_PROFILE_FILE).is_file():
        return f"interrupted before the first cell; {run_dir} holds no results"
    try:
        kept: int | str = len(load_results(results).records) if results.is_file() else 0
    except ConfigError:  # the reader will say what is wrong on --resume
        kept = "the"
    resume = f"continue with 'omni-accel sweep --resume {run_dir}'"
    return f"interrupted: {kept} cell(s) recorded in {results} are kept; {resume}"


def warmup_spec(cell: CellSpec) -> CellSpec:
    """The first cell as the sweep's warm-up runs it: loaded, called once cold and timed over one pass, with no
    extra warm-up call. What it warms (the file cache, the forkserver's first fork, the allocator) is warm after
    that; the cell's full measurement ran three times as many calls for nothing."""
    return replace(cell, measure=cell.measure.model_copy(update={"warmup": 0, "repeats": 1}))


def sweep_warmup(submit: Any, todo: list[CellSpec]) -> dict[str, Any]:
    """Run the first cell once, shortened (``warmup_spec``) and unrecorded, before the sweep (see
    ``measure.sweep_warmup``).

    Returns the warm-up's pending result keyed by its cell when that cell did not succeed: a cell that
    failed or timed out is recorded from its warm-up, never run a second time (a timeout would cost its
    full ``timeout_s`` again).
    """
    if not todo:
        return {}
    warm = submit(warmup_spec(todo[0]))
    return {} if warm.result().get("status") == "ok" else {todo[0].key: warm}


def failed_models(records: list[dict[str, Any]]) -> dict[str, str]:
    """Models every cell of which failed, with the first error of each: the sweep measured nothing there."""
    models: dict[str, str] = {}
    for model in dict.fromkeys(r["model"] for r in records):
        cells = [r for r in records if r["model"] == model]
        if all(r["status"] == "failed" for r in cells):
            models[model] = str(cells[0].get("error"))
    return models


def _run_sweep(
    profile: Profile,
    source: str,
    run_dir: Path,
    executor: str | None,
    show_progress: bool,
    resume: bool,
    ray_address: str | None,
) -> SweepResult:
    from accel import env
    from accel.gate import judge_measured_cell
    from accel.report.figures import write_figures
    from accel.report.images import save_images
    from accel.report.markdown import write_report
    from accel.sweep.executors import get_executor
    from accel.sweep.quiet import import_libraries_quietly

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
    measure = profile.measure
    executor = executor or measure.executor
    # The CPU's peak first, while nothing else runs: the forkserver's imports, started next, would slow its GEMM.
    peaks = cpu_peaks(profile, run_dir, resume)
    # The process executor's forkserver imports torch and diffusers while this process does the same and
    # checks the inputs (building zoo entries); Ray starts only once the inputs have passed.
    submit = get_executor(executor, measure.timeout_s, ray_address) if executor == "process" else None
    import_libraries_quietly()
    check_inputs(profile, source)
    submit = submit or get_executor(executor, measure.timeout_s, ray_address)
    if hasattr(submit, "check_sources"):  # checkpoints the workers read must be on every node
        submit.check_sources(local_sources_resolved(profile.models), source)
    log = ResultsLog(run_dir / RESULTS_FILE)
    if not resume:
        (run_dir / RESOLVED_PROFILE_FILE).write_text(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
    environment = env.capture(profile.fingerprint(), run_dir)
    environment[env.CPU_PEAKS_KEY] = peaks
    (run_dir / ENVIRONMENT_FILE).write_text(json.dumps(environment, indent=2))

    # Cells get the run directory as an absolute path (they never write there: their files come back in the
    # record) and the CPU peak measured here, instead of reading environment.json on a node that may lack it.
    cells = [replace(cell, cpu_peaks=peaks) for cell in plan(profile, Path(os.path.abspath(run_dir)))]
    (run_dir / PLANNED_CELLS_FILE).write_text(json.dumps([[cell.model.name, cell.variant] for cell in cells]) + "\n")
    keys = sample_keys(profile.workload)
    done = {(r["model"], r["variant"]): r for r in previous}
    records: list[dict[str, Any]] = []
    baselines: dict[str, dict[str, Any]] = {r["model"]: r for r in previous if r["variant"] == BASELINE}
    noise_floors: dict[str, dict[str, Any]] = {r["model"]: r for r in previous if r["variant"] == NOISE_FLOOR}
    todo = [cell for cell in cells if (cell.model.name, cell.variant) not in done]
    # Ray: a warm-up would warm one worker on one node, then be thrown away; cells there start cold alike.
    warm_up = measure.sweep_warmup and executor == "process"
    warmed = sweep_warmup(submit, todo) if warm_up else {}  # a successful warm-up's files are never written
    pending = {cell.key: warmed.get(cell.key) or submit(cell) for cell in todo}
    started_cells = getattr(submit, "started", None)
    with _progress(show_progress, len(cells)) as advance:
        for cell in cells:
            advance(cell.key)
            if (cell.model.name, cell.variant) in done:
                records.append(done[(cell.model.name, cell.variant)])
                continue
            record = pending[cell.key].result()
            write_cell_files(run_dir, record)
            record.setdefault("timing", {})["executor"] = executor
            attach_overlap(record, _other_spans(previous, records, pending, started_cells))
            if cell.variant == BASELINE:
                baselines[cell.model.name] = record
            if cell.variant == NOISE_FLOOR:
                record["role"] = NOISE_FLOOR_ROLE
                noise_floors[cell.model.name] = record
            if record.get("device") and not record.get("device_name"):  # engine cells: the device they ran on here
                record["device_name"] = env.device_name(record["device"])
            attach_parity(record, baselines.get(cell.model.name), run_dir, keys)
            attach_speedup(
                record, baselines.get(cell.model.name), noise_floors.get(cell.model.name), run_dir, keys, measure
            )
            attach_adherence(record, cell.model, profile.workload, baselines.get(cell.model.name), run_dir, keys)
            attach_roofline(record, baselines.get(cell.model.name))
            judge_measured_cell(record)  # the gate's judgements, made once, before the record is written
            if cell.variant == BASELINE and profile.measure.reference_model:
                attach_reference_parity(record, profile.measure.reference_model, run_dir, keys)
            if record.get("outputs_file"):
                record["images"] = save_images(run_dir, record, keys)
            record["profile_fingerprint"] = profile.fingerprint()
            record["timestamp"] = time.time()
            log.append(record)
            records.append(record)
        advance(None)

    environment["cells_ran_on"] = placements(records)  # the driver's environment above; the cells' here
    (run_dir / ENVIRONMENT_FILE).write_text(json.dumps(environment, indent=2))
    write_table(records, run_dir)
    figures = write_figures(run_dir, records, keys)
    wall_s = time.perf_counter() - started
    report_path = write_report(run_dir, profile, records, environment, wall_s, figures)
    return SweepResult(run_dir, records, report_path, wall_s)


def write_cell_files(run_dir: Path, record: dict[str, Any]) -> None:
    """Write the files a cell returned in its record (``CELL_FILES``: relative path -> bytes) under the run
    directory, each atomically (a temporary file renamed into place), and drop them from the record."""
    files = record.pop(CELL_FILES, None) or {}
    root = Path(os.path.abspath(run_dir))
    for relative, content in files.items():
        path = Path(os.path.abspath(root / relative))
        if root not in path.parents:  # a cell names files inside the run directory only
            record.setdefault("notes", []).append(f"file '{relative}' is outside the run directory: not written")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(content)
        os.replace(partial, path)


def _other_spans(
    previous: list[dict[str, Any]], records: list[dict[str, Any]], pending: dict[str, Any], started: Any
) -> list[dict[str, Any]]:
    """The spans of every other cell of the run: recorded, finished but not yet recorded (results arrive in
    plan order), and still running (their start, reported by the executor; no end yet)."""
    spans = [s for r in [*previous, *records] if (s := span(r)) is not None]
    known = {s["key"] for s in spans}
    reported = started() if started is not None else {}
    for key, waiting in pending.items():
        if key not in known and waiting.done() and (s := span(waiting.result())) is not None:
            spans.append(s)
            known.add(key)
    return spans + running_spans(reported, known)


class _progress:
    """A rich progress bar over cells (or nothing), used as ``with _progress(on, n) as advance``."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self.bar: Any = None
        self.task: Any = None
        self.done = -1

    def __enter__(self) -> Callable[[str | None], None]:
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
