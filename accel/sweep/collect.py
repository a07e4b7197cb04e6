"""A cell's record from what its timed calls measured, and its outputs as the ``.npz`` the runner writes.

Latency and its spread, stages and steps, FLOPs and the device's peak, memory, whether every pass gave the
same outputs, the features' evidence, the timing method and what ran beside it, and the interleaved pairs;
the outputs file holds the last pass's outputs and the interleaved reference's first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accel.results import outputs_path
from accel.sweep.spec import BASELINE, CELL_FILES, REFERENCE_OUTPUT_KEY, CellSpec, npz_bytes, sample_keys


def outputs_stable(passes: list[list[np.ndarray]]) -> bool:
    """Whether every timed pass gave the first pass's outputs, bit for bit (not only the last one)."""
    first = passes[0]
    return all(np.array_equal(a, b) for later in passes[1:] for a, b in zip(first, later, strict=True))


def collect_record(
    spec: CellSpec,
    target: Any,
    first_call_s: float,
    alone: dict[str, Any],
    stages: dict[str, Any] | None,
    verdicts: dict[str, Any],
    paired: dict[str, Any] | None,
    capture: Any,
    start: Any = None,
) -> dict[str, Any]:
    """The cell's record from what was measured; the outputs saved for parity. ``start``: what the process held
    when the cell started (``accel.measure.memory.Resident``), which the cell's own memory does not count."""
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
        "stage_pass": "between the headline passes" if stages is not None else "native pipeline's own stage timers",
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
    if start is not None:
        from accel.measure.memory import FROM_CELL_START, own_peak

        result["memory_at_start"] = start.to_dict()
        result["cell_memory_bytes"] = own_peak(memory, start)
        result["cell_memory_method"] = FROM_CELL_START
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
