"""One cell of a sweep: load a model, apply a variant's features, time it, keep its outputs and evidence.

A cell runs wherever its executor puts it (in-process, a fresh worker, a Ray node) and returns a plain dict
that the runner completes with parity and appends to the results log. A cell writes nothing into the run
directory: the files it produces (its float32 outputs as ``.npz``, an engine's log) travel in the record under
``CELL_FILES`` as bytes, and the runner, which owns the run directory, writes them. So a cell on a node that
shares no storage with the sweep loses nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accel.errors import AccelError, ModelUnavailable
from accel.profile import DEFAULT_VIDEO_FRAMES, Measure, ModelSpec, Workload
from accel.results import SCHEMA_VERSION, outputs_path
from accel.targets.registry import Target, engine_targets

BASELINE = "baseline"
# The baseline re-run in a fresh cell: its parity with the baseline is the run-to-run noise floor.
NOISE_FLOOR = "noise-floor"
# In a variant's outputs file: the interleaved reference pipeline's first output, compared with the
# baseline's to prove the reference ran unaccelerated (no process-global state leaked into it).
REFERENCE_OUTPUT_KEY = "__reference__"
INTERLEAVED = "interleaved"
# In the record a cell returns: {path relative to the run directory: bytes}; the runner writes and removes it.
CELL_FILES = "_files"


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to measure one (model, variant) pair; picklable."""

    model: ModelSpec
    workload: Workload
    measure: Measure
    variant: str
    features: dict[str, Any] = field(default_factory=dict)
    run_dir: str = "."  # the driver's run directory (absolute), for messages only: a cell never writes there
    # The CPU peak FLOPs the sweep measured on its host ({"host": ..., "flops": {dtype: ...}}), or None.
    cpu_peaks: dict[str, Any] | None = None
    # ``features`` parsed (feature name -> its config object), from the profile's variant plan; a spec built
    # by hand with raw ``features`` only gets them parsed here, on the driver, once.
    configs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.features and not self.configs:
            from accel.features import validate_variant_features

            configs = validate_variant_features(self.features, f"variant '{self.variant}'.features")
            object.__setattr__(self, "configs", configs)  # frozen: set once, at construction

    @property
    def key(self) -> str:
        return f"{self.model.name}/{self.variant}"


def build_requests(workload: Workload) -> list[Any]:
    """Every prompt x seed of the workload, in a fixed order."""
    from accel.targets.adapter import Request

    return [
        Request(
            prompt=prompt,
            seed=seed,
            steps=workload.steps,
            height=workload.height,
            width=workload.width,
            guidance_scale=workload.guidance_scale,
            negative_prompt=workload.negative_prompt,
            num_frames=workload.num_frames or DEFAULT_VIDEO_FRAMES,
            num_images_per_prompt=workload.num_images_per_prompt,
        )
        for prompt in workload.prompts
        for seed in workload.seeds
    ]


def sample_keys(workload: Workload) -> list[str]:
    """Names of the outputs of one pass: prompt index, seed and image index within the batch."""
    return [
        f"p{p}_s{seed}_n{n}"
        for p in range(len(workload.prompts))
        for seed in workload.seeds
        for n in range(workload.num_images_per_prompt)
    ]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as the bytes of a compressed ``.npz`` file."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **arrays to allow_pickle
    return buffer.getvalue()


def record_head(spec: CellSpec, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    """The first keys of every cell's record (``accel.results.CellRecord``): which cell it is, its status and
    error, and the schema version it is built for."""
    from accel.features import FEATURES

    return {
        "schema_version": SCHEMA_VERSION,
        "model": spec.model.name,
        "source": spec.model.source,
        "target": spec.model.target,
        "variant": spec.variant,
        "features": spec.features,
        "feature_classes": {
            name: FEATURES[name].feature_class_for(config).value for name, config in spec.configs.items()
        },
        "status": status,
        "error": error,
    }


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Measure one cell; never raises for a failure of the pipeline or a feature (it is recorded)."""
    started = time.perf_counter()
    wall_start = time.time()
    record = record_head(spec)
    try:
        record.update(_measure(spec))
    except ModelUnavailable as error:  # a family this diffusers lacks, an input the workload cannot give
        record.update(status="unsupported", unsupported_scope=error.scope, error=str(error))
    except AccelError as error:
        record.update(status="failed", error=str(error))
    except Exception as error:  # a crash inside a pipeline or a feature: recorded, the sweep goes on
        first_line = (str(error).strip().splitlines() or [""])[0]
        record.update(status="failed", error=f"{type(error).__name__}: {first_line}", traceback=traceback.format_exc())
    record["cell_wall_s"] = time.perf_counter() - started
    # Wall-clock span (epoch seconds): the runner finds the cells that overlapped it on the same node.
    timing = record.setdefault("timing", {})
    timing.update(start=wall_start, end=time.time())
    timing.setdefault("node", socket.gethostname())  # also when it failed before measuring anything
    return record


ENGINE_TARGETS = engine_targets()
PHASE_FILE_ENV = "OMNI_ACCEL_PHASE_FILE"


def note_phase(phase: str) -> None:
    """Write what the cell is doing now to the file its supervisor names (``OMNI_ACCEL_PHASE_FILE``, set in
    worker processes): a cell killed at its timeout or by a signal is recorded with the phase it was in."""
    path = os.environ.get(PHASE_FILE_ENV)
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(json.dumps({"phase": phase, "since": time.time()}))


def describe_phase(path: str | Path) -> str:
    """``" during <phase> (its last N s)"`` from a phase file written by ``note_phase``; "" without one."""
    try:
        noted = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ""
    return f" during {noted['phase']} (its last {time.time() - noted['since']:.0f} s)"


def engine_log_path(run_dir: str | Path, model: str, variant: str) -> Path:
    """Where everything an engine printed during a cell is kept (the evidence behind its verdict)."""
    return Path(run_dir) / "engine-logs" / model / f"{variant}.log"


def _measure_engine(spec: CellSpec) -> dict[str, Any]:
    """A cell on an external engine: features become its kwargs; it runs in its own environment.

    ``decided`` says how the cell's outcome was reached: ``declared`` from the mapping alone (vLLM-Omni never
    ran), ``measured`` from a run of vLLM-Omni. A feature engages only on evidence from the engine's own
    output (or, for a lossy feature, an effect on the image: ``gate.judge_engine_engagement``).
    """
    from accel import zoo
    from accel.engines.mapping import DECLARED, MEASURED, map_variant, read_engine_log
    from accel.engines.vllm_omni import CREATE_COMMAND, environment_info, run_engine_cell
    from accel.measure.timing import summarize
    from accel.targets.adapter import resolve_device, resolve_source

    device = resolve_device(spec.model.device)
    result: dict[str, Any] = {"device": device, "dtype": spec.model.dtype, "engine": "vllm-omni"}
    if environment_info() is None:
        reason = f"the vLLM-Omni environment is not installed: run '{CREATE_COMMAND}'"
        return {**result, "status": "unsupported", "unsupported_scope": "environment", "error": reason}
    if spec.workload.num_images_per_prompt != 1:
        reason = "engine targets generate one image per request: set workload.num_images_per_prompt: 1"
        return {**result, "status": "unsupported", "unsupported_scope": "model", "error": reason}
    call = map_variant(spec.configs, spec.model.target, device)
    if call.unsupported:
        return {**result, "status": "unsupported", "unsupported_scope": "model", "error": call.unsupported,
                "decided": DECLARED}  # fmt: skip
    defaults = dict(zoo.ZOO[spec.model.source].call_kwargs) if zoo.is_zoo_name(spec.model.source) else {}
    max_sequence_length = {**defaults, **spec.model.call_kwargs}.get("max_sequence_length", 512)
    requests = [
        {
            "prompt": r.prompt, "seed": r.seed, "steps": r.steps, "height": r.height, "width": r.width,
            "guidance_scale": r.guidance_scale, "max_sequence_length": max_sequence_length,
        }
        for r in build_requests(spec.workload)
    ]  # fmt: skip
    run = run_engine_cell(
        resolve_source(spec.model), spec.model.dtype, call.kwargs, requests, spec.measure.warmup,
        spec.measure.repeats, spec.measure.timeout_s,
    )  # fmt: skip
    log_path = engine_log_path("", spec.model.name, spec.variant)
    files = {str(log_path): run.log.encode()}
    result.update(engine_kwargs=call.kwargs, decided=MEASURED, engine_log=str(log_path), **{CELL_FILES: files})
    outcome = read_engine_log(spec.features, spec.model.target, device, run.log, failed=run.report is None)
    if run.report is None or run.outputs is None:
        if outcome.refused:
            return {**result, "status": "unsupported", "unsupported_scope": outcome.refused_scope,
                    "error": outcome.refused}  # fmt: skip
        return {**result, "status": "failed", "error": run.failure}
    if outcome.skipped:
        # Accepted, then not applied on this device, in the engine's words: not a measurement of the feature.
        return {**result, "status": "unsupported", "unsupported_scope": "environment", "error": outcome.skipped}
    report = run.report
    samples = report["warm_samples"]
    warm = summarize(samples)
    path = outputs_path("", spec.model.name, spec.variant)
    with np.load(run.outputs) as produced:
        files[str(path)] = npz_bytes({key: produced[f"r{i}"] for i, key in enumerate(sample_keys(spec.workload))})
    return {
        **result,
        "load_s": report["init_s"],
        "first_call_s": report["first_call_s"],
        # From outside: process start (imports, engine start with its fixed warm-up) to the first image.
        "cold_s": report["process_wall_s"]
        - sum(samples)
        - (report["first_call_s"] if spec.measure.warmup else 0)
        + report["first_call_s"],
        "process_wall_s": report["process_wall_s"],
        "warm": warm.to_dict(),
        "warm_samples": samples,
        "noisy": warm.cv > spec.measure.max_cv,
        "modality": "image",
        "evidence": outcome.evidence,
        "outputs_file": str(path),
    }


def _measure(spec: CellSpec) -> dict[str, Any]:
    from accel.features import apply, ordered
    from accel.features.applied import FeatureUnavailable

    if spec.model.target in ENGINE_TARGETS:
        return _measure_engine(spec)
    from accel.env import device_name
    from accel.measure.memory import PeakMemory, module_weight_bytes
    from accel.measure.timing import timed
    from accel.targets.native import make_target

    options = spec.configs  # parsed and checked when the profile was loaded
    features = ordered(list(options))
    note_phase("building the target")
    target = make_target(spec.model)
    for feature in features:  # what this device, installation or dtype cannot run: said before loading
        support = feature.probe(target.device, options[feature.name], dtype=spec.model.dtype)
        if not support.supported:
            reason = f"{feature.name}: {support.reason}"
            return {
                "device": target.device,
                "dtype": spec.model.dtype,
                "status": "unsupported",
                "unsupported_scope": "environment",
                "error": reason,
            }
    load_kwargs: dict[str, Any] = {}
    for feature in features:
        extra = feature.load_kwargs(options[feature.name])
        if extra and spec.model.target == "native":
            reason = f"{feature.name}: load-time options go through diffusers' from_pretrained: adapter target only"
            return {"status": "unsupported", "unsupported_scope": "model", "error": reason}
        load_kwargs.update(extra)
    load_times: list[float] = []
    note_phase("loading the pipeline")
    with PeakMemory(target.device) as load_memory, timed(target.device, load_times):
        pipeline = target.load(load_kwargs)
    result: dict[str, Any] = {
        "device": target.device,
        "device_name": device_name(target.device),  # what performance baselines match on
        "dtype": spec.model.dtype,
        "load_s": load_times[0],
        "memory_load": load_memory.peaks.to_dict(),
        "weight_bytes": {
            name: module_weight_bytes(module)
            for name, module in pipeline.components.items()
            if hasattr(module, "parameters")
        },
    }
    note_phase(f"applying {', '.join(options) or 'no features'}")
    try:  # "environment": this device or installation cannot run a feature; "model": this pipeline cannot
        applied = apply(
            pipeline,
            *(options[feature.name] for feature in features),
            num_inference_steps=spec.workload.steps,
            device=target.device,
            windows_on_calls=False,  # the cell opens the evidence windows itself, outside its timer
        )
    except FeatureUnavailable as error:
        result.update(status="unsupported", unsupported_scope=error.scope, error=str(error))
        return result
    result.update(_timed_runs(spec, target, applied))
    result["cold_s"] = result["load_s"] + result["first_call_s"]
    return result


def _timed_runs(spec: CellSpec, target: Any, applied: Any) -> dict[str, Any]:
    """With the features applied: warm up, measure (alone, then a stage pass, then interleaved with a
    reference), verify, remove; collect the record and save the outputs."""
    from accel.measure.contention import timing_window
    from accel.measure.flops import InputCapture

    pipeline = target.pipeline
    requests = build_requests(spec.workload)
    capture = (
        InputCapture(pipeline.transformer) if spec.variant == BASELINE and hasattr(pipeline, "transformer") else None
    )
    paired: dict[str, Any] | None = None
    window: dict[str, Any] = {}
    # Leaving `applied` removes every feature in reverse order, also on an error. The timing phase runs alone
    # on its node with measure.exclusive (loading, before it, may overlap other cells).
    with applied, timing_window(spec.measure.exclusive, window):
        note_phase("the cold call (compilation and warm-up included)")
        first_call_s = _warm_up(spec, target, applied, requests)
        note_phase("the timed calls")
        alone = _measure_alone(spec, target, applied, requests)
        note_phase("the stage pass")
        stages = _stage_pass(target, applied, stage_pass_requests(spec, requests))
        if spec.variant != BASELINE and spec.measure.timing == INTERLEAVED:
            note_phase("the interleaved pairs with a reference")
            paired = _measure_interleaved(spec, target, applied, requests)
        # Judged over every call that produced a number (headline, stage pass, interleaved pairs): a cache that
        # stopped caching or a recompile during the pairs that give the speedup shows here.
        verdicts = applied.verdicts()
        note_phase("removing the features")
    note_phase("collecting the record (parity, outputs)")
    result = _collect(spec, target, first_call_s, alone, stages, verdicts, paired, capture)
    result["timing"].update(window)
    return result


def _generate(target: Target, applied: Any, request: Any, sink: list[float] | None = None) -> list[np.ndarray]:
    """One call with every feature's evidence window around it; with ``sink``, the call alone is timed (the
    evidence reads stay outside the timer)."""
    from accel.measure.timing import timed

    with applied.window():
        if sink is None:
            return target.generate(request)
        with timed(target.device, sink):
            return target.generate(request)


def _warm_up(spec: CellSpec, target: Any, applied: Any, requests: list[Any]) -> float:
    """The cold call (compilation, cache warm-up) and ``measure.warmup`` untimed calls; evidence is reset after."""

    first_call: list[float] = []
    _generate(target, applied, requests[0], first_call)
    for _ in range(spec.measure.warmup):
        _generate(target, applied, requests[0])
    applied.reset_evidence()  # evidence counts only the measured runs
    return first_call[0]


def headline_meters(device: str, memory_in_region: bool) -> list[Any]:
    """The context managers around a cell's headline (timed) calls, in order: what runs beside the pipeline
    while it is timed. Each reads counters at the region's two ends only (no thread, no sampling):
    ``PeakMemory`` with the kernel's high-water mark (only when ``memory_in_region``: without a kernel
    high-water mark the memory is taken in an untimed call instead) and ``ContentionMeter``.
    ``benchmarks/harness_overhead.py`` times calls inside exactly these (it calls ``_measure_alone``)."""
    from accel.measure.contention import ContentionMeter
    from accel.measure.memory import PeakMemory

    return [PeakMemory(device), ContentionMeter()] if memory_in_region else [ContentionMeter()]


def _measure_alone(spec: CellSpec, target: Any, applied: Any, requests: list[Any]) -> dict[str, Any]:
    """``measure.repeats`` passes over every request, the pipeline alone in its process: the headline latency
    (no stage hooks synchronising inside the call, nothing sampling beside it), peak memory and the outputs."""
    from accel.measure.memory import PeakMemory, process_pss, region_peak_available

    samples: list[float] = []
    passes: list[list[np.ndarray]] = []
    native_calls: list[dict[str, Any]] = []
    explicit = getattr(target, "explicit_stages", False)  # native pipelines time their own stages
    meters = headline_meters(target.device, memory_in_region=region_peak_available())
    with contextlib.ExitStack() as stack:
        for meter in meters:
            stack.enter_context(meter)
        for _ in range(spec.measure.repeats):
            outputs: list[np.ndarray] = []
            for request in requests:
                outputs.extend(_generate(target, applied, request, samples))
                if explicit:
                    native_calls.append(target.stage_report())
            passes.append(outputs)
    memory = next((m for m in meters if isinstance(m, PeakMemory)), None)
    if memory is None:  # no kernel high-water mark here: a sampled, untimed call of its own gives the peak
        with PeakMemory(target.device, sample=True) as memory:
            _generate(target, applied, requests[0])
    contention = next(m for m in meters if not isinstance(m, PeakMemory))
    return {
        "samples": samples,
        "passes": passes,
        "native_calls": native_calls,
        "memory": memory.peaks,
        "pss": process_pss(),
        "contention": contention.result,
    }


def stage_pass_requests(spec: CellSpec, requests: list[Any]) -> list[Any]:
    """The requests the stage pass runs: every one for the baseline (its per-stage medians are what the
    report's stage breakdown and the roofline compare against, and its end-to-end time is checked against the
    headline), the first one for a variant (a variant's stages are read beside the baseline's; three more
    synchronised calls per cell were a tenth of the quickstart's time)."""
    return requests if spec.variant == BASELINE else requests[:1]


def _stage_pass(target: Any, applied: Any, requests: list[Any]) -> dict[str, Any] | None:
    """One pass over the requests with the stage recorder (adapter): its hooks synchronise the device at every
    component boundary, so these calls are timed apart from the headline ones. Native pipelines time their
    stages themselves (None here)."""
    from accel.measure.stages import StageRecorder
    from accel.measure.timing import timed

    if getattr(target, "explicit_stages", False):
        return None
    recorder = StageRecorder(target.pipeline, target.device)
    calls: list[dict[str, Any]] = []
    outer: list[float] = []
    try:
        for request in requests:
            with timed(target.device, outer):
                recorder.start()
                _generate(target, applied, request)
                calls.append(recorder.stop())
    finally:
        recorder.remove()
    return {"calls": calls, "outer_s": outer}


def draw_pair(index: int, reference_call: Any, variant_call: Any) -> tuple[float, float]:
    """Pair ``index`` of an interleaved comparison in ABBA order (reference first on even pairs): each call
    appends its seconds to the list it is given. Returns (reference seconds, variant seconds)."""
    reference_s: list[float] = []
    variant_s: list[float] = []
    if index % 2 == 0:
        reference_call(reference_s)
    variant_call(variant_s)
    if index % 2 == 1:
        reference_call(reference_s)
    return reference_s[0], variant_s[0]


def run_reference(reference: Target, applied: Any, request: Any, sink: list[float] | None) -> list[np.ndarray]:
    """One call of the unaccelerated reference, with the variant's process-global state paused around it;
    with ``sink``, the call is timed into it."""
    from accel.measure.timing import timed

    with applied.global_state_paused():
        if sink is None:
            return reference.generate(request)
        with timed(reference.device, sink):
            return reference.generate(request)


def pair_drawer(target: Any, reference: Any, applied: Any, requests: list[Any]) -> Any:
    """``draw(index)`` for ``SequentialPairs``: pair ``index`` of the reference and the variant on the
    ``index``-th request (cycling), in ABBA order. ``benchmarks/harness_overhead.py`` times these very calls."""

    def draw(index: int) -> tuple[float, float]:
        request = requests[index % len(requests)]
        return draw_pair(
            index,
            lambda sink: run_reference(reference, applied, request, sink),
            lambda sink: _generate(target, applied, request, sink),
        )

    return draw


def interleaved_meters() -> list[Any]:
    """The context managers around the interleaved pairs (read at the two ends only): ``ContentionMeter``."""
    from accel.measure.contention import ContentionMeter

    return [ContentionMeter()]


def _measure_interleaved(spec: CellSpec, target: Any, applied: Any, requests: list[Any]) -> dict[str, Any]:
    """The variant's speedup measured side by side with a freshly loaded, unaccelerated reference pipeline in
    this process: pairs of calls in ABBA order (``draw_pair``), so drift and background load hit both alike,
    drawn until the comparison is decided against the noise threshold or its budget is spent
    (``accel.measure.speedup.SequentialPairs``: ``measure.pairs`` first, at most ``measure.max_pairs``, within
    ``measure.pair_budget_s``). The variant's calls keep their evidence windows (a cache resets its per-call
    state in ``begin_run``: without it TeaCache computed every step); features that set process-global state
    pause it around reference calls."""
    import gc

    from accel.measure.speedup import SequentialPairs, noise_band
    from accel.measure.timing import timed
    from accel.targets.native import make_target

    reference = make_target(spec.model)
    load: list[float] = []
    # The reference's load and warm-up see no accelerated global state either.
    with applied.global_state_paused(), timed(target.device, load):
        reference.load({})
    reference_output = run_reference(reference, applied, requests[0], None)[0]
    for _ in range(spec.measure.warmup):
        run_reference(reference, applied, requests[0], None)
    measure = spec.measure
    sampler = SequentialPairs(
        noise_band(measure.min_effect), measure.confidence, measure.pairs, measure.max_pairs, measure.pair_budget_s
    )
    meters = interleaved_meters()
    with contextlib.ExitStack() as stack:
        for meter in meters:
            stack.enter_context(meter)
        estimate = sampler.run(pair_drawer(target, reference, applied, requests))
    reference.pipeline = None  # free the reference's weights before the cell returns
    gc.collect()
    return {
        "reference_s": sampler.reference_s,
        "variant_s": sampler.variant_s,
        "estimate": estimate,
        "reference_load_s": load[0],
        "reference_output": reference_output,
        "contention": meters[0].result,
    }


def outputs_stable(passes: list[list[np.ndarray]]) -> bool:
    """Whether every timed pass gave the first pass's outputs, bit for bit (not only the last one)."""
    first = passes[0]
    return all(np.array_equal(a, b) for later in passes[1:] for a, b in zip(first, later, strict=True))


def _collect(
    spec: CellSpec,
    target: Any,
    first_call_s: float,
    alone: dict[str, Any],
    stages: dict[str, Any] | None,
    verdicts: dict[str, Any],
    paired: dict[str, Any] | None,
    capture: Any,
) -> dict[str, Any]:
    """The cell's record from what was measured; the outputs saved for parity."""
    from accel.env import recorded_cpu_peak
    from accel.measure.contention import execution_context
    from accel.measure.flops import device_peak
    from accel.measure.timing import summarize

    samples = alone["samples"]
    passes = alone["passes"]
    calls = alone["native_calls"] if stages is None else stages["calls"]
    stage_outer = samples if stages is None else stages["outer_s"]
    warm = summarize(samples)
    recorded = recorded_cpu_peak(spec.cpu_peaks, spec.model.dtype)
    peak, peak_source = device_peak(target.device, spec.model.dtype, recorded)
    memory = alone["memory"]
    timing: dict[str, Any] = {
        "method": spec.measure.timing if spec.variant != BASELINE else "alone",
        **execution_context(target.device),
        "alone": alone["contention"].to_dict(),
        "stage_pass": "separate" if stages is not None else "native pipeline's own stage timers",
    }
    result: dict[str, Any] = {
        "first_call_s": first_call_s,
        "cold_s": None,  # filled by the caller's load time below
        "warm": warm.to_dict(),
        "warm_samples": samples,
        "noisy": warm.cv > spec.measure.max_cv,
        "stages": summarize_stages(calls),
        "step_times": [s for call in calls for s in call["steps"]],
        # Per stage-pass call: the stages' sum and the call's outer time (an independent timer around it).
        "stage_sums": [sum(call["stages"].values()) for call in calls],
        "stage_outer_s": stage_outer,
        "denoiser_calls_per_call": calls[0]["denoiser_calls"] if calls else None,
        "flops_per_denoiser_call": capture.flops() if capture is not None else None,
        "peak_flops": peak,
        "peak_flops_source": peak_source,
        "peak_host_rss_bytes": memory.host_rss_peak,
        "peak_device_allocated_bytes": memory.device_allocated_peak,
        "peak_device_reserved_bytes": memory.device_reserved_peak,
        "memory_method": memory.method,
        "host_pss_bytes": alone["pss"],
        "modality": "video" if passes[-1][0].shape[0] > 1 else "image",
        "outputs_stable": outputs_stable(passes),
        "evidence": {name: {"engaged": v.engaged, "summary": v.summary, **v.evidence} for name, v in verdicts.items()},
        "timing": timing,
    }
    arrays = dict(zip(sample_keys(spec.workload), passes[-1], strict=True))
    if paired is not None:
        estimate = paired["estimate"]
        timing["interleaved"] = paired["contention"].to_dict()
        result["paired"] = {
            "reference_s": paired["reference_s"],
            "variant_s": paired["variant_s"],
            "order": "ABBA",
            "reference_load_s": paired["reference_load_s"],
            "pairs_drawn": estimate.n,
            "stopped": estimate.stopped,
            "estimate": estimate.to_dict(),
        }
        arrays[REFERENCE_OUTPUT_KEY] = paired["reference_output"]
    path = outputs_path("", spec.model.name, spec.variant)
    result["outputs_file"] = str(path)
    result[CELL_FILES] = {str(path): npz_bytes(arrays)}
    return result


def summarize_stages(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each stage over the timed calls, with the median end-to-end and component coverage."""
    import statistics

    from accel.measure.stages import STAGES

    if not calls:
        return {}
    medians = {name: statistics.median(c["stages"][name] for c in calls) for name in STAGES}
    end_to_end = statistics.median(c["end_to_end_s"] for c in calls)
    steps = [s for c in calls for s in c["steps"]]
    return {
        **medians,
        "end_to_end_s": end_to_end,
        "step_median_s": statistics.median(steps) if steps else None,
        "steps_per_call": len(calls[0]["steps"]),
        "component_share": statistics.median(c["component_s"] / c["end_to_end_s"] for c in calls),
    }
