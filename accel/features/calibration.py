"""What a cache feature's ``check`` asks of its ``calibration`` option: the file fits the pipeline, and the
threshold is not inert on it (refused before anything is timed, with the verdict saying why).

The range judged is the calibration workload's: where the run's workload differs (``current_workload`` of
``accel.calibration.workload``, set by ``apply``), nothing is refused as inert."""

from __future__ import annotations

from typing import Any

from accel.features.base import Owner, Support, denoisers


def calibration_refusal(feature: str, pipeline: Any, options: Any) -> Support | None:
    """None when ``options.calibration`` is unset or fits; otherwise the refusal (a wrong model, an inert
    threshold)."""
    from accel.calibration.inert import THRESHOLD_OPTIONS, threshold_status
    from accel.calibration.store import load_calibration
    from accel.calibration.workload import current_workload

    path = getattr(options, "calibration", None)
    if path is None:
        return None
    calibration = load_calibration(path)
    present = {name: type(model).__name__ for name, model in denoisers(pipeline).items()}
    calibrated = {name: section.transformer_class for name, section in calibration.denoisers.items()}
    if present != calibrated:
        return Support.no(
            f"calibration {path} is of {calibration.model} ({calibrated}); this pipeline's denoisers are {present}: "
            "calibrate this model (omni-accel calibrate PROFILE --model MODEL) and name its file",
            Owner.MODEL,
        )
    mag = {key: getattr(options, key) for key in ("max_skip_steps", "retention_ratio") if hasattr(options, key)}
    threshold = float(getattr(options, THRESHOLD_OPTIONS[feature]))
    status = threshold_status(calibration, feature, threshold, **mag, workload=current_workload())
    if status.inert:
        return Support.no(f"{status.verdict} (calibration {path})", Owner.MODEL)
    return None


def calibration_workload_note(feature: str, options: Any) -> str | None:
    """Where ``options.calibration`` was made for another workload than the run's (``current_workload``), the
    sentence that says so, for the feature's evidence (its threshold was not judged inert from that file)."""
    from accel.calibration.inert import THRESHOLD_OPTIONS
    from accel.calibration.store import load_calibration
    from accel.calibration.workload import current_workload, workload_difference

    path = getattr(options, "calibration", None)
    if path is None or feature not in THRESHOLD_OPTIONS:
        return None
    return workload_difference(load_calibration(path), current_workload())
