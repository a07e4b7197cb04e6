"""The sweep loop: plan cells, check every input before running anything, run, compare, record.

For each model the baseline runs first, then every variant with the same prompts and seeds. Each cell's
record gets its parity against the baseline and its speedup, then is appended to ``results.jsonl``
before the next cell starts. At the end the results table, images and ``report.md`` are written. The input
checks are in ``accel.sweep.checks``, the comparisons with the baseline in ``accel.sweep.compare``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from accel.errors import ConfigError
from accel.measure.overlap import attach_overlap, placements, running_spans, span
from accel.profile import Profile
from accel.results import NOISE_FLOOR_ROLE, RESULTS_FILE, ResultsLog, not_run, write_table
from accel.sweep.adherence import attach_adherence
from accel.sweep.checks import check_inputs, local_sources_resolved, prepare_run_dir
from accel.sweep.compare import (
    attach_parity,
    attach_reference_parity,
    attach_roofline,
    attach_speedup,
    attach_step_error,
)
from accel.sweep.resume import (
    PLANNED_CELLS_FILE,
    RESOLVED_PROFILE_FILE,
    check_same_profile,
    measured_records,
    resolved_profile,
)
from accel.sweep.spec import BASELINE, CELL_FILES, NOISE_FLOOR, CellSpec, sample_keys

if TYPE_CHECKING:
    from accel.gate.judge import RunMeasure

ENVIRONMENT_FILE = "environment.json"


@dataclass
class SweepResult:
    """Where a finished sweep wrote its files, and its records."""

    run_dir: Path
    records: list[dict[str, Any]]
    report_path: Path
    wall_s: float
    resumed: int = 0  # cells whose records an earlier run of the folder wrote (--resume)


def plan(profile: Profile, run_dir: Path) -> list[CellSpec]:
    """Every cell in execution order: per model, the baseline, its noise-floor re-run, then each variant."""
    cells = []
    variants = profile.variant_plan().variants
    reference = profile.measure.reference_model
    models = local_sources_resolved(profile.models)
    models = sorted(models, key=lambda m: m.name != reference) if reference else models
    for model in models:
        workload = profile.workload_for(model)
        cells.append(CellSpec(model, workload, profile.measure, BASELINE, {}, str(run_dir)))
        if profile.measure.noise_floor:
            cells.append(CellSpec(model, workload, profile.measure, NOISE_FLOOR, {}, str(run_dir)))
        cells.extend(
            CellSpec(model, workload, profile.measure, v.name, v.features, str(run_dir), configs=v.configs)
            for v in variants
            if v.models is None or model.name in v.models
        )
    return cells


def unmeasured_cells(run_dir: Path, records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(model, variant) of every cell the run's profile plans that ``records`` lack (an interrupted sweep, a
    lost line); empty when the directory holds no resolved profile (a bare results file)."""
    measured = {(r["model"], r["variant"]) for r in records}
    return [(model, variant) for model, variant in planned_cells(run_dir) if (model, variant) not in measured]


def in_planned_order(run_dir: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` in the order the run's profile plans its cells (``cells.planned.json``), as the sweep's report
    lists them: a resumed run appends the cells it measured to results.jsonl, and the tables and the gate listed
    them last. Records of no planned cell keep their order, after the rest. Without a readable plan the records
    keep the file's order: the plan's own problems are the gate's to report (``unmeasured_cells``), after the
    inputs it checks first."""
    try:
        planned = json.loads((run_dir / PLANNED_CELLS_FILE).read_text())
        index = {(str(model), str(variant)): number for number, (model, variant) in enumerate(planned)}
    except (OSError, ValueError, TypeError):
        return records
    return sorted(records, key=lambda r: index.get((r["model"], r["variant"]), len(index)))


def planned_cells(run_dir: Path) -> list[tuple[str, str]]:
    """(model, variant) of every cell the run's profile plans, in its order; empty for a bare results file."""
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
    return [(str(model), str(variant)) for model, variant in planned]


def run_measure(run_dir: Path) -> RunMeasure | None:
    """What the run's profile (``profile.resolved.yaml``) asked of every speed claim (its noise band and
    confidence), for the gate to hold each record to; None for a bare results file. Only the ``measure``
    section is read and checked: the gate never plans the run again (``unmeasured_cells``)."""
    from pydantic import ValidationError

    from accel.gate.judge import RunMeasure
    from accel.measure.speedup import noise_band
    from accel.profile import Measure, format_validation_error
    from accel.yaml_bounds import load_yaml_file

    path = run_dir / RESOLVED_PROFILE_FILE
    if not path.is_file():
        return None
    section = load_yaml_file(path, "profile", advice="save the profile as UTF-8").get("measure") or {}
    try:
        measure = Measure.model_validate(section)
    except ValidationError as error:
        raise ConfigError(format_validation_error(f"{path}: measure", error, Measure)) from error
    return RunMeasure(noise_band(measure.min_effect), measure.confidence)


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
        threads = profile.measure.threads or torch.get_num_threads()
        same_host = kept.get("host") == socket.gethostname() and kept.get("threads") == threads
        if same_host and set(dtypes) <= set(kept.get("flops") or {}):
            return kept
    return env.measure_cpu_peaks(dtypes, profile.measure.threads)


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
    """Remove a run directory this sweep created when nothing was written into it but its log file."""
    from accel.sweep.runlog import LOG_FILE, stop_run_log

    with contextlib.suppress(OSError):
        if [path.name for path in run_dir.iterdir()] == [LOG_FILE]:
            stop_run_log()
            (run_dir / LOG_FILE).unlink()
        run_dir.rmdir()  # fails, leaving it, when it holds anything


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, ``timeout``, a cancelled CI job) ends the sweep as Ctrl-C does: workers stopped,
    every recorded cell kept. Unlike Ctrl-C it reaches only the sweep, so the sweep must stop its workers
    (without this they outlived it, still measuring). Only the main thread can install a handler."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    default_hook = sys.unraisablehook

    def redeliver(unraisable: Any) -> None:
        # Python runs a signal's handler at the next bytecode, which can be inside a finaliser (a __del__ the
        # garbage collector called): the KeyboardInterrupt raised there cannot propagate, Python prints
        # "Exception ignored ... Traceback" and the interrupt is lost. Deliver it again, quietly, as SIGTERM
        # (its handler above raises it) from a helper thread, so that it arrives after this hook returned:
        # raised here, the handler would run inside the hook.
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Thread(target=_signal_self_soon, args=(signal.SIGTERM,), daemon=True).start()
            return
        default_hook(unraisable)

    previous = signal.signal(signal.SIGTERM, interrupt)
    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        sys.unraisablehook = default_hook
        signal.signal(signal.SIGTERM, previous)


def _signal_self_soon(signum: int) -> None:
    """Send ``signum`` to this process after a moment (from a helper thread; the main thread handles it)."""
    time.sleep(0.01)
    os.kill(os.getpid(), signum)


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


def sweep_warmup(submit: Any, todo: list[CellSpec], meanwhile: Any = None) -> dict[str, Any]:
    """Run the first cell once, shortened (``warmup_spec``) and unrecorded, before the sweep (see
    ``measure.sweep_warmup``); ``meanwhile()``, if given, runs in a thread of this process while the warm-up
    runs (a process cell starts when its result is asked for) and has ended before this returns, so it never
    runs beside a measured cell. An exception in it is dropped: what it imports is imported again where needed.

    Returns the warm-up's pending result keyed by its cell when that cell did not succeed: a cell that
    failed or timed out is recorded from its warm-up, never run a second time (a timeout would cost its
    full ``timeout_s`` again).
    """
    if not todo:
        return {}
    warm = submit(warmup_spec(todo[0]))
    beside = threading.Thread(target=_suppressed(meanwhile), name="omni-accel-meanwhile") if meanwhile else None
    if beside is not None:
        beside.start()
    try:
        status = warm.result().get("status")
    finally:
        if beside is not None:
            beside.join()
    return {} if status == "ok" else {todo[0].key: warm}


def _suppressed(function: Any) -> Any:
    def run() -> None:
        with contextlib.suppress(Exception):
            function()

    return run


def failed_models(records: list[dict[str, Any]]) -> dict[str, str]:
    """Models every cell of which failed, with the first error of each: the sweep measured nothing there."""
    models: dict[str, str] = {}
    for model in dict.fromkeys(r["model"] for r in records):
        cells = [r for r in records if r["model"] == model]
        if all(r["status"] == "failed" for r in cells):
            models[model] = str(cells[0].get("error"))
    return models


def failed_baselines(records: list[dict[str, Any]]) -> dict[str, str]:
    """Models whose baseline did not run (failed, crashed, timed out; one unsupported in this environment is
    skipped, as the gate skips it): their variants have no parity and no speedup, and the gate fails the
    run. Each with the baseline's status and error."""
    models: dict[str, str] = {}
    for record in records:
        here = record["status"] == "unsupported" and record.get("unsupported_scope") == "environment"
        lost = not_run(record)
        if record["variant"] == "baseline" and lost and not here:
            models[record["model"]] = lost
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
    from accel.sweep.quiet import import_comparison_libraries, import_libraries_quietly
    from accel.sweep.runlog import start_run_log

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
    measure = profile.measure
    executor = executor or measure.executor
    cores = os.cpu_count() or 1
    if executor != "ray" and measure.threads and measure.threads > cores:
        raise ConfigError(
            f"{source}: measure.threads: {measure.threads} is more than this machine's {cores} core(s); "
            f"choose 1 to {cores}, or leave it unset (one thread per core)"
        )
    prepare_run_dir(run_dir)
    start_run_log(run_dir)  # the warnings the quiet start kept off the terminal, and every later one
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
    done = {(r["model"], r["variant"]): r for r in previous}
    records: list[dict[str, Any]] = []
    baselines: dict[str, dict[str, Any]] = {r["model"]: r for r in previous if r["variant"] == BASELINE}
    noise_floors: dict[str, dict[str, Any]] = {r["model"]: r for r in previous if r["variant"] == NOISE_FLOOR}
    todo = [cell for cell in cells if (cell.model.name, cell.variant) not in done]
    # Ray: a warm-up would warm one worker on one node, then be thrown away; cells there start cold alike.
    warm_up = measure.sweep_warmup and executor == "process"
    warmed = (
        sweep_warmup(submit, todo, import_comparison_libraries) if warm_up else {}
    )  # a successful warm-up's files are never written
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
            keys = sample_keys(cell.workload)  # the model's own workload (ModelSpec.workload) where it has one
            attach_parity(record, baselines.get(cell.model.name), run_dir, keys)
            attach_speedup(
                record, baselines.get(cell.model.name), noise_floors.get(cell.model.name), run_dir, keys, measure
            )
            attach_adherence(record, cell.model, cell.workload, baselines.get(cell.model.name), run_dir, keys)
            attach_roofline(record, baselines.get(cell.model.name))
            attach_step_error(record, baselines.get(cell.model.name), run_dir)
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
    figures = write_figures(run_dir, records, sample_keys(profile.workload))
    wall_s = time.perf_counter() - started
    resumed = sum(1 for cell in cells if (cell.model.name, cell.variant) in done)
    report_path = write_report(run_dir, profile, records, environment, wall_s, figures, resumed)
    return SweepResult(run_dir, records, report_path, wall_s, resumed)


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
