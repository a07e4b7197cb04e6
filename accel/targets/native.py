"""The native target: the project's own pipeline for the checkpoint (``accel.native``), same interface as
the adapter target, with stage times from the pipeline's explicit stages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.errors import UnavailableError
from accel.profile import ModelSpec
from accel.targets.adapter import DTYPES, Request, default_call_kwargs, resolve_device, resolve_source
from accel.zoo import synthetic


@dataclass(frozen=True)
class NativeRequest:
    """What a native pipeline's stages read."""

    prompt: str
    seed: int
    steps: int
    height: int
    width: int
    guidance_scale: float
    num_images_per_prompt: int = 1
    max_sequence_length: int = 512
    negative_prompt: str | None = None
    # True CFG (FluxPipeline's, QwenImagePipeline's): a second, unconditional branch per step when > 1
    # with a negative prompt.
    true_cfg_scale: float = 1.0


class NativeTarget:
    """Loads the native pipeline registered for the checkpoint's ``_class_name`` and runs requests."""

    explicit_stages = True

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.device = resolve_device(spec.device)
        self.pipeline: Any = None
        self.call_defaults = {**default_call_kwargs(spec.source), **spec.call_kwargs}

    def load(self, extra_kwargs: dict[str, Any] | None = None) -> Any:
        import torch

        from accel.native.registry import native_for, native_for_class

        if extra_kwargs:
            raise UnavailableError(f"native target: load-time options {sorted(extra_kwargs)} are adapter-only")
        source = resolve_source(self.spec, f"model '{self.spec.name}'")
        dtype = getattr(torch, DTYPES[self.spec.dtype])
        if synthetic.is_synthetic(source):
            parsed = synthetic.parse(source)
            cls = native_for_class(parsed.architecture.pipeline_class, self.spec.native_pipeline)
            components = synthetic.build_components(parsed, self.device, DTYPES[self.spec.dtype])
            pipeline = cls.from_components(components, dtype=dtype)
        else:
            cls = native_for(source, self.spec.native_pipeline)
            # Every native pipeline loads from (checkpoint, dtype=...): NativePipeline declares it.
            pipeline = cls(source, dtype=dtype)
        pipeline.set_progress_bar_config(disable=True)
        self.pipeline = pipeline.to(self.device)
        return self.pipeline

    def native_request(self, request: Request) -> NativeRequest:
        return NativeRequest(
            prompt=request.prompt,
            seed=request.seed,
            steps=request.steps,
            height=request.height,
            width=request.width,
            guidance_scale=request.guidance_scale,
            num_images_per_prompt=request.num_images_per_prompt,
            max_sequence_length=int(self.call_defaults.get("max_sequence_length", 512)),
            negative_prompt=request.negative_prompt,
            # The pipeline's own default where the call gives none (QwenImagePipeline's is 4.0, FLUX's 1.0).
            true_cfg_scale=float(
                self.call_defaults.get("true_cfg_scale", getattr(self.pipeline, "default_true_cfg_scale", 1.0))
            ),
        )

    def generate(self, request: Request) -> list[np.ndarray]:
        """One float32 (1, H, W, 3) array in [0, 1] per image."""
        images = self.pipeline(self.native_request(request)).numpy().astype(np.float32)
        return [np.clip(image[None], 0.0, 1.0) for image in images]

    def stage_report(self) -> dict[str, Any]:
        """The last call's stages in the shape the stage recorder gives for the adapter."""
        times = dict(self.pipeline.stage_times)
        steps = times.pop("steps", [])
        stages = {k: float(v) for k, v in times.items()}
        return {
            "stages": stages,
            "steps": steps,
            # One per step, two with true CFG (unless cfg_parallel gave a branch to another rank).
            "denoiser_calls": getattr(self.pipeline, "denoiser_calls", 0) or len(steps),
            "end_to_end_s": sum(stages.values()),
            "component_s": stages["text_encoding"] + stages["denoising"] + stages["vae_decode"],
        }
