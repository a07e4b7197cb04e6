"""One cell of a sweep: load a model, apply a variant's features, time it, keep its outputs and evidence.

A cell runs wherever its executor puts it (in-process, a fresh worker, a Ray node) and returns a plain dict
that the runner completes with parity and appends to the results log. A cell writes nothing into the run
directory: the files it produces (its float32 outputs as ``.npz``, an engine's log) travel in the record under
``CELL_FILES`` as bytes, and the runner, which owns the run directory, writes them. So a cell on a node that
shares no storage with the sweep loses nothing.

Here: ``run_cell`` and the order of a cell's phases (each noted for its supervisor: ``note_phase``), the
record's head. What a cell is and its requests: ``accel.sweep.spec``; a cell on an external engine:
``accel.sweep.engine_cell``; its timed calls: ``accel.sweep.timed``; its record from them:
``accel.sweep.collect``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from accel.errors import AccelError, ModelUnavailable
from accel.measure.timing import torch_threads
from accel.raised_in import raised_in
from accel.results import SCHEMA_VERSION, steps_path
from accel.sweep.collect import collect_record
from accel.sweep.engine_cell import ENGINE_TARGETS, measure_engine
from accel.sweep.spec import BASELINE, CELL_FILES, INTERLEAVED, CellSpec, npz_bytes

# Exported as this module's own name: the rank-seeds fault (``accel.sweep.ranks``) replaces it here, where
# ``_timed_runs`` looks it up.
from accel.sweep.spec import build_requests as build_requests
from accel.sweep.timed import (
    measure_alone,
    measure_interleaved,
    midway_after,
    stage_pass,
    stage_pass_requests,
    warm_up,
)


def record_head(spec: CellSpec, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    """The first keys of every cell's record (``accel.results.CellRecord``): which cell it is, its status and
    error, and the schema version it is built for."""
    from accel.features import FEATURES
    from accel.zoo import weights_sha256

    record = {
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
    sha = weights_sha256(spec.model.source)  # a trained zoo model: which weights ran
    if sha is not None:
        record["weights_sha256"] = sha
    return record


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Measure one cell; never raises for a failure of the pipeline or a feature (it is recorded)."""
    started = time.perf_counter()
    wall_start = time.time()
    record = record_head(spec)
    try:
        with torch_threads(spec.measure.threads):
            record.update(_measure(spec))
    except ModelUnavailable as error:  # a family this diffusers lacks, an input the workload cannot give
        record.update(status="unsupported", unsupported_scope=error.scope, refused_by=error.owner, error=str(error))
    except AccelError as error:
        record.update(status="failed", error=str(error))
    except Exception as error:  # a crash inside a pipeline or a feature: recorded, the sweep goes on
        first_line = (str(error).strip().splitlines() or [""])[0]
        record.update(status="failed", error=f"{type(error).__name__}: {first_line}", traceback=traceback.format_exc())
        record["raised_in"] = raised_in(error)  # whose code failed: a library's, the model's or omni-accel's
    record["cell_wall_s"] = time.perf_counter() - started
    # Wall-clock span (epoch seconds): the runner finds the cells that overlapped it on the same node.
    timing = record.setdefault("timing", {})
    timing.update(start=wall_start, end=time.time())
    timing.setdefault("node", socket.gethostname())  # also when it failed before measuring anything
    return record


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


def _measure(spec: CellSpec) -> dict[str, Any]:
    from accel.features import apply, ordered
    from accel.features.applied import FeatureUnavailable
    from accel.features.base import OWNER_OF_SCOPE

    if spec.model.target in ENGINE_TARGETS:
        return measure_engine(spec)
    from accel.env import device_name
    from accel.measure.memory import PeakMemory, module_weight_bytes, resident_at_start
    from accel.measure.timing import timed
    from accel.sweep.settle import settle
    from accel.targets.build import make_target

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
                "refused_by": (support.owner or OWNER_OF_SCOPE["environment"]).value,
                "error": reason,
            }
    load_kwargs: dict[str, Any] = {}
    for feature in features:
        extra = feature.load_kwargs(options[feature.name])
        if extra and spec.model.target == "native":
            reason = f"{feature.name}: load-time options go through diffusers' from_pretrained: adapter target only"
            return {"status": "unsupported", "unsupported_scope": "model", "refused_by": "harness", "error": reason}
        load_kwargs.update(extra)
    settled = settle(spec, target.device, note_phase)  # this family's one-time costs are paid before the cell's start
    start = resident_at_start(target.device)  # what earlier cells in this process left is not this cell's
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
        "memory_settled": settled,
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
            workload=spec.workload.model_dump(include={"height", "width", "num_frames", "guidance_scale"}),
        )
    except FeatureUnavailable as error:
        result.update(
            status="unsupported", unsupported_scope=error.scope, refused_by=error.owner.value, error=str(error)
        )
        return result
    result.update(_timed_runs(spec, target, applied, start))
    result["cold_s"] = result["load_s"] + result["first_call_s"]
    return result


def wants_step_latents(spec: CellSpec) -> bool:
    """Whether the cell captures its per-step latents: the baseline, and every variant with a lossy feature
    (its drift curve against the baseline in the report)."""
    from accel.features import FEATURES
    from accel.features.base import FeatureClass

    if spec.variant == BASELINE:
        return True
    return any(FEATURES[name].feature_class_for(config) == FeatureClass.LOSSY for name, config in spec.configs.items())


def _timed_runs(spec: CellSpec, target: Any, applied: Any, start: Any = None) -> dict[str, Any]:
    """With the features applied: warm up, measure (alone, with a stage pass between the headline passes,
    then interleaved with a reference), verify, remove; collect the record and save the outputs."""
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
        first_call_s = warm_up(spec, target, applied, requests)
        note_phase("the timed calls")

        def stage_pass_midway() -> dict[str, Any] | None:
            note_phase("the stage pass (between the timed passes)")
            stages = stage_pass(target, applied, stage_pass_requests(spec, requests))
            if spec.measure.repeats > midway_after(spec.measure.repeats):
                note_phase("the timed calls (after the stage pass)")
            return stages

        alone = measure_alone(spec, target, applied, requests, midway=stage_pass_midway)
        stages = alone["midway"]
        if spec.variant != BASELINE and spec.measure.timing == INTERLEAVED:
            note_phase("the interleaved pairs with a reference")
            paired = measure_interleaved(spec, target, applied, requests)
        # Judged over every call that produced a number (headline, stage pass, interleaved pairs): a cache that
        # stopped caching or a recompile during the pairs that give the speedup shows here.
        verdicts = applied.verdicts()
        steps = None
        if wants_step_latents(spec):  # after the verdicts: this extra call is neither timed nor judged
            from accel.diverge.curve import step_latents

            note_phase("the per-step latents (one untimed call, for the drift curve)")
            steps = step_latents(target, applied, requests[0])
        note_phase("removing the features")
    note_phase("collecting the record (parity, outputs)")
    result = collect_record(spec, target, first_call_s, alone, stages, verdicts, paired, capture, start)
    if steps is not None:
        path = steps_path("", spec.model.name, spec.variant)
        result["steps_file"] = str(path)
        result[CELL_FILES][str(path)] = npz_bytes(steps)
    result["timing"].update(window)
    return result
