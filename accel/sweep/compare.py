"""A measured cell compared with its model's baseline, after it ran: parity, speedup, memory and roofline.

Each ``attach_*`` adds its keys to the record: parity of the outputs and the memory reduction, the speedup with
its interval and verdict (judged against the model's noise floor; an interleaved reference that differs from
the baseline leaves it unverified), parity of a model's baseline with the reference model's, and the roofline
from the baseline's FLOPs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accel.measure.overlap import shared_reason
from accel.results import outputs_path, peak_memory_bytes
from accel.sweep.spec import BASELINE, NOISE_FLOOR, REFERENCE_OUTPUT_KEY

# The interleaved reference must reproduce the baseline: 8-bit rounding of its output is the tolerance.
REFERENCE_TOLERANCE = 2 / 255


def attach_parity(record: dict[str, Any], baseline: dict[str, Any] | None, run_dir: Path, keys: list[str]) -> None:
    """Add parity against the baseline's outputs to a measured record, and for a video its curves per frame and
    its temporal consistency (``video_parity``, ``accel.measure.video``), and the memory reduction."""
    from accel.measure.parity import aggregate, compare
    from accel.measure.video import video_curves, video_parity

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
        if candidate[keys[0]].shape[0] > 1:  # a video: the curves per frame and over time as well
            measured = {key: video_curves(candidate[key], reference[key]) for key in keys}
            per_sample = [parity for parity, _ in measured.values()]
            record["video_parity"] = video_parity({key: curves for key, (_, curves) in measured.items()})
        else:
            per_sample = [compare(candidate[key], reference[key]) for key in keys]
    record["parity"] = aggregate(per_sample).to_dict()


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
        EQUIVALENT,
        FASTER,
        NOISE,
        SLOWER,
        SpeedupClaim,
        SpeedupEstimate,
        against_noise_floor,
        classify,
        floor_bias_of,
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
    claim = classify(estimate, band, measure.confidence, why_unverified)
    floor_bias = None
    if floor_claim is not None and floor_claim.verdict in (EQUIVALENT, NOISE) and claim.verdict in (FASTER, SLOWER):
        assert band is not None and noise_floor is not None  # a usable floor gives both
        floor_bias = floor_bias_of(paired, noise_floor["paired"], band, measure.confidence)
    claim = against_noise_floor(claim, floor_claim, floor_bias)
    record["speedup"] = estimate.ratio
    record["speedup_ci"] = {
        **estimate.to_dict(),
        "overall_confidence": estimate.overall_confidence,
        "verdict": claim.verdict,
        "reason": claim.reason,
        "band": list(claim.band) if claim.band else None,
        "reference_problem": why_unverified,
        "requested_confidence": measure.confidence,
    }


def _reference_problem(record: dict[str, Any], run_dir: Path, keys: list[str]) -> str | None:
    """Why the interleaved reference cannot stand for the baseline (its output differs), or None."""
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


def attach_step_error(record: dict[str, Any], baseline: dict[str, Any] | None, run_dir: Path) -> None:
    """Add ``step_error`` (per-step relative L2 against the baseline's latents, the skipped steps, the first
    step beyond zero) to a variant's record that has a ``steps_file``; a note when the baseline has none."""
    if not record.get("steps_file") or record.get("variant") == (baseline or {}).get("variant"):
        return
    if baseline is None or not baseline.get("steps_file"):
        record.setdefault("notes", []).append("no baseline step latents: the per-step error curve is unavailable")
        return
    from accel.diverge.curve import LATENTS_KEY, SKIPPED_KEY, error_curve

    with np.load(Path(run_dir) / baseline["steps_file"]) as ref, np.load(Path(run_dir) / record["steps_file"]) as own:
        curve = error_curve(ref[LATENTS_KEY], own[LATENTS_KEY])
        skipped = [int(s) for s in own[SKIPPED_KEY]]
        exact = [bool(np.array_equal(a, b)) for a, b in zip(ref[LATENTS_KEY], own[LATENTS_KEY], strict=False)]
    first = next((i for i, same in enumerate(exact) if not same), None)
    record["step_error"] = {"rel_l2": curve, "skipped_steps": skipped, "first_differing_step": first}
