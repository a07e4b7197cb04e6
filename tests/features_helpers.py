"""Helpers shared by the feature tests: a loaded tiny pipeline and one generation (begin_run/end_run as a cell)."""

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


def generate(target: AdapterTarget, handles=(), **changes) -> list[np.ndarray]:
    import dataclasses

    for handle in handles:
        handle.begin_run()
    outputs = target.generate(dataclasses.replace(REQUEST, **changes))
    for handle in handles:
        handle.end_run()
    return outputs
