"""Helpers shared by the feature tests: a loaded tiny pipeline, one generation (with explicit begin_run/end_run
for tests of a handle itself), and a round trip through the public ``apply``."""

from __future__ import annotations

import numpy as np

from accel.features.base import RunContext
from accel.profile import ModelSpec
from accel.targets.adapter import AdapterTarget, Request

CONTEXT = RunContext(device="cpu", steps=2)
REQUEST = Request(prompt="a red fox", seed=0, steps=2, height=64, width=64, guidance_scale=3.5, num_frames=5)


def loaded(name: str = "tiny-flux") -> AdapterTarget:
    target = AdapterTarget(ModelSpec(name=name, source=name))
    target.load()
    return target


def applied_runs(target: AdapterTarget, name: str, raw, runs: int = 1, **changes):
    """The public path: ``apply`` the feature's config, call the pipeline ``runs`` times (each call one evidence
    window), judge, remove. Returns (verdict, outputs of each call)."""
    from accel import apply
    from accel.features import FEATURES

    config = FEATURES[name].parse_options(raw)
    steps = changes.get("steps", REQUEST.steps)
    with apply(target.pipeline, config, num_inference_steps=steps) as applied:
        outputs = [generate(target, **changes) for _ in range(runs)]
        verdict = applied.verdicts()[name]
    return verdict, outputs


def generate(target: AdapterTarget, handles=(), **changes) -> list[np.ndarray]:
    import dataclasses

    for handle in handles:
        handle.begin_run()
    outputs = target.generate(dataclasses.replace(REQUEST, **changes))
    for handle in handles:
        handle.end_run()
    return outputs
