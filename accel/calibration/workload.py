"""The workload a calibration was made on against the one a threshold will run on.

A calibration observes each cache's decision signal on ITS workload: the step count sets how far the latents move
between steps, the resolution and frames set what the residuals average over, the guidance what the CFG branches
differ by. On another workload the observed range does not apply, so no threshold is called inert from it. The run's
workload reaches a feature's ``check`` through ``run_workload`` (``apply`` sets it around the checks).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from accel.calibration.store import Calibration

# The workload keys that change a cache's decision signal, as a Calibration and a profile's Workload name them.
SIGNAL_KEYS = ("steps", "height", "width", "num_frames", "guidance_scale")

_RUN_WORKLOAD: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("run_workload", default=None)


@contextlib.contextmanager
def run_workload(workload: Mapping[str, Any] | None) -> Iterator[None]:
    """Within the block, ``current_workload()`` is ``workload`` (the calls the checked features will run)."""
    token = _RUN_WORKLOAD.set(dict(workload) if workload is not None else None)
    try:
        yield
    finally:
        _RUN_WORKLOAD.reset(token)


def current_workload() -> dict[str, Any] | None:
    """The workload ``run_workload`` set (None: outside, not known)."""
    return _RUN_WORKLOAD.get()


def workload_difference(calibration: Calibration, workload: Mapping[str, Any] | None) -> str | None:
    """How ``workload`` differs from the one ``calibration`` was made on in what changes the signal, as a sentence
    naming both; None when they agree (a key the workload leaves out, or None in either, is not compared)."""
    if not workload:
        return None
    differing = []
    for key in SIGNAL_KEYS:
        ours, theirs = workload.get(key), getattr(calibration, key)
        if ours is None or theirs is None or float(ours) == float(theirs):
            continue
        differing.append(f"{key} {theirs:g} there, {ours:g} here")
    if not differing:
        return None
    return (
        f"calibration of {calibration.model} made for another workload ({'; '.join(differing)}): its observed "
        "signal range does not apply here, so no threshold is called inert from it; calibrate on this workload "
        f"(omni-accel calibrate PROFILE --model {calibration.model}) to judge it"
    )
