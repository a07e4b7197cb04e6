"""A lossy variant's per-step error against its baseline, with the steps a cache skipped: the sweep report's
drift curves.

``step_latents(target, applied, request)`` runs one extra, untimed call under an evidence window with
``accel.diverge.capture.Capture`` around it and returns the latents after every scheduler step and the steps
the applied caches skipped on that call (read from their evidence: TeaCache's and the diffusers caches'
denoiser-call indices, mapped to steps through the captured calls; Cache-DiT's step lists). ``error_curve``
compares two such captures step by step with ``accel.diverge.compare.metrics`` (the sweep runner's
``accel.sweep.compare.attach_step_error`` puts it into a variant's record from the two run files).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from accel.diverge.capture import Capture, Trace, denoisers
from accel.diverge.compare import metrics

LATENTS_KEY = "latents"
SKIPPED_KEY = "skipped_steps"


def skipped_steps(runs: list[dict[str, Any]], trace: Trace, denoiser: str) -> list[int]:
    """The denoising steps a cache skipped on one call, from each handle's evidence of that call (``runs``).

    ``skipped_calls`` and TeaCache's ``cached_steps`` (a flat list) count calls of ``denoiser``: call ``i``
    belongs to the step of its ``i``-th captured call. Cache-DiT's ``cached_steps`` (one list per cached
    module) are steps already."""
    order = [call.step for call in trace.calls if call.denoiser == denoiser]
    steps: set[int] = set()
    for run in runs:
        calls = list(run.get("skipped_calls", []))
        cached = run.get("cached_steps", [])
        if cached and all(isinstance(item, list) for item in cached):
            steps.update(int(s) for item in cached for s in item)
        else:
            calls += cached
        steps.update(order[i] for i in calls if 0 <= i < len(order))
    return sorted(steps)


def _work_skips(applied: Any, name: str, module: torch.nn.Module) -> tuple[list[int], list[Any]]:
    """Hooks on denoiser ``name`` (``module``) that list the calls on which a work-counting cache (``WorkCounter``:
    the diffusers caches) computed fewer work units (attention, feed-forward inside its blocks) than a full
    forward makes; the list fills during the call."""
    from accel.features.cache import WorkCounter

    counters = [h for h in applied.handles if isinstance(h, WorkCounter)]
    skipped: list[int] = []
    before: list[list[float]] = []
    calls = [0]

    def pre(*_: Any) -> None:
        before.append([h.computed_total(name) for h in counters])

    def post(*_: Any) -> None:
        start = before.pop()
        if any(
            h.computed_total(name) - s < h.units_per_call(name) - 1e-6 for h, s in zip(counters, start, strict=True)
        ):
            skipped.append(calls[0])
        calls[0] += 1

    if not counters:
        return skipped, []
    return skipped, [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


def step_latents(target: Any, applied: Any, request: Any) -> dict[str, np.ndarray]:
    """One extra call of ``request`` (never a timed one), captured: the float32 latents after every scheduler
    step (``LATENTS_KEY``, stacked) and the steps the applied caches skipped on it (``SKIPPED_KEY``)."""
    found = denoisers(target.pipeline)
    name = next(iter(found), "")
    work_skipped, hooks = _work_skips(applied, name, found[name]) if found else ([], [])
    try:
        with applied.window(), Capture(target.pipeline) as trace:
            target.generate(request)
    finally:
        for hook in hooks:
            hook.remove()
    runs = [handle.runs[-1] for handle in applied.handles if handle.runs] + [{"skipped_calls": work_skipped}]
    latents = [step.prev_sample.to(torch.float32).cpu().numpy() for step in trace.steps]
    return {
        LATENTS_KEY: np.stack(latents) if latents else np.zeros((0,), np.float32),
        SKIPPED_KEY: np.asarray(skipped_steps(runs, trace, name), dtype=np.int64),
    }


def error_curve(reference: np.ndarray, candidate: np.ndarray) -> list[float]:
    """Per step: the relative L2 distance of ``candidate``'s latents from ``reference``'s (0.0 where they are
    equal); ``inf`` where the shapes differ or a side has fewer steps."""
    curve = []
    for step in range(max(len(reference), len(candidate))):
        if step >= len(reference) or step >= len(candidate):
            curve.append(float("inf"))
            continue
        curve.append(metrics(torch.from_numpy(reference[step]), torch.from_numpy(candidate[step])).rel_l2)
    return curve
