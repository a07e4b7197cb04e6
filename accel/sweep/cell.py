"""One cell of a sweep: load a model, apply a variant's features, time it, keep its outputs and evidence.

A cell runs wherever its executor puts it (in-process or a fresh worker) and returns a plain dict that the
runner completes with parity and appends to the results log. Outputs are saved as float32 arrays (for
parity, computed by the runner against the baseline's) and as PNG images for people.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accel.errors import AccelError
from accel.profile import Measure, ModelSpec, Workload

BASELINE = "baseline"


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to measure one (model, variant) pair; picklable."""

    model: ModelSpec
    workload: Workload
    measure: Measure
    variant: str
    features: dict[str, Any] = field(default_factory=dict)
    run_dir: str = "."

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
            num_frames=workload.num_frames,
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


def outputs_path(run_dir: str | Path, model: str, variant: str) -> Path:
    """Where a cell's float32 outputs are kept (``.npz``, one array per sample key)."""
    return Path(run_dir) / "outputs" / model / f"{variant}.npz"


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Measure one cell; never raises for a failure of the pipeline or a feature (it is recorded)."""
    started = time.perf_counter()
    record: dict[str, Any] = {
        "model": spec.model.name,
        "source": spec.model.source,
        "target": spec.model.target,
        "variant": spec.variant,
        "features": spec.features,
        "status": "ok",
        "error": None,
    }
    try:
        record.update(_measure(spec))
    except AccelError as error:
        record.update(status="failed", error=str(error))
    except Exception as error:  # a crash inside a pipeline or a feature: recorded, the sweep goes on
        first_line = (str(error).strip().splitlines() or [""])[0]
        record.update(status="failed", error=f"{type(error).__name__}: {first_line}", traceback=traceback.format_exc())
    record["cell_wall_s"] = time.perf_counter() - started
    return record


def _measure(spec: CellSpec) -> dict[str, Any]:
    from accel.features import ordered, validate_variant_features
    from accel.features.base import Handle, RunContext
    from accel.measure.memory import PeakMemory, module_weight_bytes
    from accel.measure.timing import summarize, timed
    from accel.targets.adapter import AdapterTarget

    options = validate_variant_features(spec.features, f"variant '{spec.variant}'.features")
    features = ordered(list(options))
    target = AdapterTarget(spec.model)
    load_kwargs: dict[str, Any] = {}
    for feature in features:
        load_kwargs.update(feature.load_kwargs(options[feature.name]))
    load_times: list[float] = []
    with timed(target.device, load_times):
        pipeline = target.load(load_kwargs)
    result: dict[str, Any] = {"device": target.device, "dtype": spec.model.dtype, "load_s": load_times[0]}
    result["weight_bytes"] = {
        name: module_weight_bytes(module)
        for name, module in pipeline.components.items()
        if hasattr(module, "parameters")
    }

    for feature in features:
        support = feature.check(pipeline, target.device, options[feature.name])
        if not support.supported:
            result.update(status="unsupported", error=f"{feature.name}: {support.reason}")
            return result

    context = RunContext(device=target.device, steps=spec.workload.steps)
    handles: list[tuple[Any, Handle]] = []
    requests = build_requests(spec.workload)
    keys = sample_keys(spec.workload)

    def generate(request: Any) -> list[np.ndarray]:
        for _, handle in handles:
            handle.begin_run()
        outputs = target.generate(request)
        for _, handle in handles:
            handle.end_run()
        return outputs

    try:
        for feature in features:  # appended one by one: a failing apply still removes the earlier ones
            handles.append((feature, feature.apply(pipeline, options[feature.name], context)))
        first_call: list[float] = []
        with timed(target.device, first_call):
            generate(requests[0])
        for _ in range(spec.measure.warmup):
            generate(requests[0])
        for _, handle in handles:
            handle.runs.clear()  # evidence counts only the timed runs

        samples: list[float] = []
        first_pass: list[np.ndarray] = []
        last_pass: list[np.ndarray] = []
        with PeakMemory(target.device) as memory:
            for repeat in range(spec.measure.repeats):
                outputs: list[np.ndarray] = []
                for request in requests:
                    with timed(target.device, samples):
                        outputs.extend(generate(request))
                if repeat == 0:
                    first_pass = outputs
                last_pass = outputs
        verdicts = {feature.name: feature.verify(handle) for feature, handle in handles}
    finally:
        for _, handle in reversed(handles):
            handle.remove()

    result.update(
        first_call_s=first_call[0],
        cold_s=load_times[0] + first_call[0],
        warm=summarize(samples).to_dict(),
        warm_samples=samples,
        peak_host_rss_bytes=memory.peaks.host_rss_peak,
        peak_device_allocated_bytes=memory.peaks.device_allocated_peak,
        peak_device_reserved_bytes=memory.peaks.device_reserved_peak,
        outputs_stable=all(np.array_equal(a, b) for a, b in zip(first_pass, last_pass, strict=True)),
        evidence={name: {"engaged": v.engaged, "summary": v.summary, **v.evidence} for name, v in verdicts.items()},
    )
    not_engaged = [f"{name}: {v.summary}" for name, v in verdicts.items() if not v.engaged]
    if not_engaged:
        result.update(status="failed", error="; ".join(not_engaged))
    path = outputs_path(spec.run_dir, spec.model.name, spec.variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **dict(zip(keys, last_pass, strict=True)))
    result["outputs_file"] = str(path.relative_to(spec.run_dir))
    return result
