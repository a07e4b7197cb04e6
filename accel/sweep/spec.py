"""What a cell is: ``CellSpec``, and the names every sweep module shares about a cell.

The variant names of a model's references (``BASELINE``, ``NOISE_FLOOR``), the keys of a cell's record and
outputs file (``CELL_FILES``, ``REFERENCE_OUTPUT_KEY``), a cell's requests and the names of one pass's samples,
and the bytes of an ``.npz``. It imports no other module of the sweep, so ``cell``, ``engine_cell``, ``timed``
and ``collect`` can all import it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.profile import DEFAULT_VIDEO_FRAMES, Measure, ModelSpec, Workload

BASELINE = "baseline"
# The baseline re-run in a fresh cell: its parity with the baseline is the run-to-run noise floor.
NOISE_FLOOR = "noise-floor"
# In a variant's outputs file: the interleaved reference pipeline's first output, compared with the
# baseline's to prove the reference ran unaccelerated (no process-global state leaked into it).
REFERENCE_OUTPUT_KEY = "__reference__"
INTERLEAVED = "interleaved"
# In the record a cell returns: {path relative to the run directory: bytes}; the runner writes and removes it.
CELL_FILES = "_files"


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to measure one (model, variant) pair; picklable."""

    model: ModelSpec
    workload: Workload
    measure: Measure
    variant: str
    features: dict[str, Any] = field(default_factory=dict)
    run_dir: str = "."  # the driver's run directory (absolute), for messages only: a cell never writes there
    # The CPU peak FLOPs the sweep measured on its host ({"host": ..., "flops": {dtype: ...}}), or None.
    cpu_peaks: dict[str, Any] | None = None
    # ``features`` parsed (feature name -> its config object), from the profile's variant plan; a spec built
    # by hand with raw ``features`` only gets them parsed here, on the driver, once.
    configs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.features and not self.configs:
            from accel.features import validate_variant_features

            configs = validate_variant_features(self.features, f"variant '{self.variant}'.features")
            object.__setattr__(self, "configs", configs)  # frozen: set once, at construction

    @property
    def key(self) -> str:
        return f"{self.model.name}/{self.variant}"


def sample_keys(workload: Workload) -> list[str]:
    """Names of the outputs of one pass: prompt index, seed and image index within the batch."""
    return [
        f"p{p}_s{seed}_n{n}"
        for p in range(len(workload.prompts))
        for seed in workload.seeds
        for n in range(workload.num_images_per_prompt)
    ]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``arrays`` as the bytes of a compressed ``.npz`` file."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **arrays to allow_pickle
    return buffer.getvalue()


def build_requests(workload: Workload) -> list[Any]:
    """A cell's requests: every prompt x seed of the workload, in the order of ``sample_keys``."""
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
            num_frames=workload.num_frames or DEFAULT_VIDEO_FRAMES,
            num_images_per_prompt=workload.num_images_per_prompt,
        )
        for prompt in workload.prompts
        for seed in workload.seeds
    ]
