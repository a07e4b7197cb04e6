"""A cell on an external engine (vLLM-Omni): the variant's features mapped to the engine's own arguments, the
engine run in its own environment, and the record built from its report and its log.

``ENGINE_TARGETS`` are the targets served here (``accel.targets.registry.engine_targets``); ``run_cell``
(``accel.sweep.cell``) sends their cells to ``measure_engine``, inside the same failure handling and thread
setting as any other cell. The engine's log is the evidence behind a feature's verdict: it travels in the record
under ``CELL_FILES`` to ``engine_log_path``, with the outputs, as every cell's files do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accel.results import outputs_path
from accel.sweep.spec import CELL_FILES, CellSpec, build_requests, npz_bytes, sample_keys
from accel.targets.registry import engine_targets

ENGINE_TARGETS = engine_targets()


def engine_log_path(run_dir: str | Path, model: str, variant: str) -> Path:
    """Where everything an engine printed during a cell is kept (the evidence behind its verdict)."""
    return Path(run_dir) / "engine-logs" / model / f"{variant}.log"


def measure_engine(spec: CellSpec) -> dict[str, Any]:
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
        return {**result, "status": "unsupported", "unsupported_scope": "environment", "refused_by": "device",
                "error": reason}  # fmt: skip
    if spec.workload.num_images_per_prompt != 1:
        reason = "engine targets generate one image per request: set workload.num_images_per_prompt: 1"
        return {**result, "status": "unsupported", "unsupported_scope": "model", "refused_by": "harness",
                "error": reason}  # fmt: skip
    call = map_variant(spec.configs, spec.model.target, device)
    if call.unsupported:
        return {**result, "status": "unsupported", "unsupported_scope": "model", "refused_by": "library",
                "error": call.unsupported, "decided": DECLARED}  # fmt: skip
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
            owner = "device" if outcome.refused_scope == "environment" else "library"  # vLLM-Omni's words
            return {**result, "status": "unsupported", "unsupported_scope": outcome.refused_scope,
                    "refused_by": owner, "error": outcome.refused}  # fmt: skip
        return {**result, "status": "failed", "error": run.failure}
    if outcome.skipped:
        # Accepted, then not applied on this device, in the engine's words: not a measurement of the feature.
        return {**result, "status": "unsupported", "unsupported_scope": "environment", "refused_by": "device",
                "error": outcome.skipped}  # fmt: skip
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
