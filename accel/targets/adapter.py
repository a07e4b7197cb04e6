"""The adapter target: any diffusers ``DiffusionPipeline`` driven as a black box.

The source is a zoo name (built on demand), a local checkpoint directory or a hub id. A request maps to
call kwargs by inspecting the pipeline's ``__call__`` signature, so one request drives image and video
pipelines alike; the profile's ``call_kwargs`` cover anything else (the seed PR's
``--diffusers-call-kwargs``). Seeds drive a CPU ``torch.Generator`` so outputs reproduce across devices.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accel import zoo
from accel.errors import ConfigError, ModelUnavailable, UnavailableError, did_you_mean
from accel.profile import ModelSpec
from accel.zoo import synthetic

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@dataclass(frozen=True)
class Request:
    """One generation: the same request goes to the baseline and to every variant."""

    prompt: str
    seed: int
    steps: int
    height: int
    width: int
    guidance_scale: float
    negative_prompt: str | None = None
    num_frames: int = 1
    num_images_per_prompt: int = 1


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is present, else ``cpu``."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UnavailableError("device 'cuda' requested but no CUDA device is present; use device: auto or cpu")
    return device


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or source.count("/") != 1 or Path(source).exists()


def resolve_source(spec: ModelSpec, where: str = "models") -> str:
    """A loadable location for ``spec.source``: a built zoo directory, an existing path or a hub id.

    A ``synthetic:`` source is checked (name and options) and returned as is: it is built in memory.
    """
    if synthetic.is_synthetic(spec.source):
        synthetic.parse(spec.source, f"{where}.source")
        return spec.source
    if zoo.is_zoo_name(spec.source):
        return str(zoo.build(spec.source))
    path = Path(spec.source).expanduser()
    if path.exists():
        if (path / "model_index.json").exists() and not (path / "model_index.json").is_file():
            from accel.yaml_bounds import why_not_a_file

            raise ConfigError(f"{where}.source: {why_not_a_file(path / 'model_index.json', 'model_index.json')}")
        if not (path / "model_index.json").is_file():
            raise ConfigError(f"{where}.source: '{spec.source}' has no model_index.json; not a diffusers checkpoint")
        return str(path.resolve())
    if _looks_like_path(spec.source):
        kind = "path" if "/" in spec.source or spec.source.startswith((".", "~")) else "model"
        raise ConfigError(
            f"{where}.source: {kind} '{spec.source}' is not a zoo name, an existing checkpoint directory "
            f"or a hub id (org/name).{did_you_mean(spec.source, zoo.ZOO)} Zoo names: {', '.join(zoo.ZOO)}"
        )
    return _check_hub_id(spec.source, where)


def _check_hub_id(repo_id: str, where: str) -> str:
    """A hub id that is in the local cache or reachable now; a ConfigError naming it otherwise."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached: ask the hub (fails fast offline or under HF_HUB_OFFLINE=1)
        pass
    try:
        HfApi().model_info(repo_id, timeout=10)
    except Exception as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"{where}.source: hub id '{repo_id}' is not in the local cache and the hub cannot be reached "
            f"({reason[:160]}); use a local checkpoint directory or a zoo name (omni-accel zoo list)"
        ) from error
    return repo_id


def resolution_factor(source_dir: str) -> int | None:
    """Height and width must be multiples of this: VAE downsampling x the 2x2 latent patchify.

    Read from the checkpoint's configs (no weights loaded), or from a ``synthetic:`` source's
    architecture; None when the layout is not recognised.
    """
    if synthetic.is_synthetic(source_dir):
        return synthetic.parse(source_dir).architecture.resolution_factor
    vae_config = Path(source_dir) / "vae" / "config.json"
    if not vae_config.is_file():
        return None
    config = json.loads(vae_config.read_text())
    if "temperal_downsample" in config:
        scale = 2 ** len(config["temperal_downsample"])
    elif "block_out_channels" in config:
        scale = 2 ** (len(config["block_out_channels"]) - 1)
    else:
        return None
    factor: int = scale * 2
    return factor


class AdapterTarget:
    """Loads a pipeline with ``DiffusionPipeline.from_pretrained`` and generates normalised outputs."""

    explicit_stages = False  # the stage recorder hooks the components

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.device = resolve_device(spec.device)
        self.pipeline: Any = None
        self.default_call_kwargs = default_call_kwargs(spec.source)
        entry = zoo.ZOO.get(spec.source) if zoo.is_zoo_name(spec.source) else None
        # What the call needs beyond a prompt: the zoo entry says; for other sources, the signature does.
        self.inputs: tuple[str, ...] = entry.inputs if entry is not None else ()
        self.pipeline_attributes: dict[str, Any] = dict(entry.pipeline_attributes) if entry is not None else {}

    def load(self, extra_kwargs: dict[str, Any] | None = None) -> Any:
        """Load the pipeline onto its device; errors name the model and say what to do.

        ``extra_kwargs`` are features' load-time kwargs (e.g. a quantization config), merged over the
        profile's ``load_kwargs``.
        """
        import torch
        from diffusers import DiffusionPipeline

        source = resolve_source(self.spec, f"model '{self.spec.name}'")
        if synthetic.is_synthetic(source):
            if extra_kwargs or self.spec.load_kwargs:
                keys = sorted({**self.spec.load_kwargs, **(extra_kwargs or {})})
                raise UnavailableError(
                    f"model '{self.spec.name}': load-time options {keys} need a checkpoint; "
                    f"'{source}' is built in memory (apply the feature after loading instead)"
                )
            pipeline = synthetic.build_pipeline(source, self.device, DTYPES[self.spec.dtype])
            pipeline.set_progress_bar_config(disable=True)
            self.pipeline = pipeline
            return pipeline
        try:
            pipeline = DiffusionPipeline.from_pretrained(
                source,
                dtype=getattr(torch, DTYPES[self.spec.dtype]),
                **{**self.spec.load_kwargs, **(extra_kwargs or {})},
            )
        except (OSError, ValueError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            hint = (
                ". Without network access use a local checkpoint directory or a zoo name (omni-accel zoo list)"
                if not Path(source).is_dir()  # a hub id: the download is what failed
                else f"; check the checkpoint's files under {source}"
            )
            raise UnavailableError(
                f"model '{self.spec.name}': cannot load '{self.spec.source}': {first_line}{hint}"
            ) from error
        pipeline.set_progress_bar_config(disable=True)
        for attribute, value in self.pipeline_attributes.items():
            setattr(pipeline, attribute, value)
        self.pipeline = pipeline.to(self.device)
        if self.device == "cpu":
            _own_cpu_weights(self.pipeline)
        return self.pipeline

    def call_kwargs(self, request: Request) -> dict[str, Any]:
        """Map a request to the pipeline's ``__call__`` parameters, then apply the pass-throughs."""
        import torch

        parameters = inspect.signature(self.pipeline.__call__).parameters
        candidates: dict[str, Any] = {
            "prompt": request.prompt,
            "negative_prompt": request.negative_prompt,
            "num_inference_steps": request.steps,
            "guidance_scale": request.guidance_scale,
            "height": request.height,
            "width": request.width,
            "num_frames": request.num_frames,
            "num_images_per_prompt": request.num_images_per_prompt,
            "num_videos_per_prompt": request.num_images_per_prompt,
            # FLUX.1 Kontext rescales to max_area (1024^2 by default): keep the requested size.
            "max_area": request.height * request.width,
            "output_type": "np",
        }
        kwargs = {k: v for k, v in candidates.items() if k in parameters and v is not None}
        image = parameters.get("image")
        if "image" in self.inputs or (image is not None and image.default is inspect.Parameter.empty):
            kwargs["image"] = input_image(request.height, request.width)
        given = {*kwargs, *self.default_call_kwargs, *self.spec.call_kwargs}
        needed = [
            name
            for name, parameter in parameters.items()
            if parameter.default is inspect.Parameter.empty
            and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and name not in given
        ]
        if needed:
            raise ModelUnavailable(
                "model",
                f"model '{self.spec.name}': {type(self.pipeline).__name__} needs {', '.join(map(repr, needed))}, "
                f"which the workload cannot give (it gives a prompt, sizes, steps, seeds and an input image); "
                f"pass it under the model's call_kwargs",
                "harness",
            )
        kwargs["generator"] = torch.Generator("cpu").manual_seed(request.seed)
        kwargs.update(self.default_call_kwargs)
        kwargs.update(self.spec.call_kwargs)
        return kwargs

    def generate(self, request: Request) -> list[np.ndarray]:
        """Run one request; one float32 array (frames, H, W, 3) in [0, 1] per generated image or video."""
        output = normalise_output(self.pipeline(**self.call_kwargs(request)))
        if len(output) != request.num_images_per_prompt:
            # CogVideoXPipeline sets num_videos_per_prompt = 1 inside its __call__, whatever it is given.
            raise ModelUnavailable(
                "model",
                f"model '{self.spec.name}': {type(self.pipeline).__name__} gave {len(output)} output(s) for "
                f"{request.num_images_per_prompt} asked (workload.num_images_per_prompt): the pipeline does not "
                "honour it; run it with num_images_per_prompt: 1",
                "library",
            )
        return output


def input_image(height: int, width: int) -> Any:
    """The deterministic input image of edit and image-to-video calls (``accel.zoo.pipelines``), at the
    request's size: the same for the baseline and every variant."""
    from accel.zoo.pipelines import input_image as make

    return make(height, width)


def default_call_kwargs(source: str) -> dict[str, Any]:
    """Call kwargs a source needs by default (a zoo entry's short sequences, an architecture's published
    ``max_sequence_length``); a profile's ``call_kwargs`` win."""
    if zoo.is_zoo_name(source):
        return dict(zoo.ZOO[source].call_kwargs)
    if synthetic.is_synthetic(source):
        return dict(synthetic.parse(source).architecture.call_kwargs)
    return {}


def _own_cpu_weights(pipeline: Any) -> None:
    """Copy CPU weights out of the memory-mapped checkpoint into freshly allocated tensors.

    Tensors mapped from a safetensors file sit at arbitrary offsets, and CPU matmul kernels choose their
    path by alignment: the same weights then give outputs that differ in the last bits (seen on tiny-flux)
    from one load to another. Fresh allocations make CPU outputs reproducible across processes and equal
    to a pipeline built in memory. On a GPU the copy to the device already does this.
    """
    import torch

    with torch.no_grad():
        for module in pipeline.components.values():
            if isinstance(module, torch.nn.Module):
                for tensor in [*module.parameters(), *module.buffers()]:
                    tensor.data = tensor.data.clone()


def normalise_output(output: Any) -> list[np.ndarray]:
    """Pipeline output (images or frames; numpy, PIL or torch) -> list of (frames, H, W, 3) float32."""
    import torch
    from PIL import Image

    data = getattr(output, "frames", None)
    is_video = data is not None
    if data is None:
        data = getattr(output, "images", None)
    if data is None:  # Kandinsky 5's KandinskyImagePipelineOutput names it ``image``
        data = getattr(output, "image", output)
    if isinstance(data, torch.Tensor):
        data = data.detach().float().cpu().numpy()
    if isinstance(data, list) and data and isinstance(data[0], Image.Image):
        data = np.stack([np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0 for image in data])
    array = np.asarray(data, dtype=np.float32)
    if not is_video:
        array = array[:, None]  # (N, H, W, 3) -> (N, 1, H, W, 3)
    if array.ndim != 5 or array.shape[-1] != 3:
        raise ValueError(f"unexpected pipeline output shape {array.shape}; expected images or video frames in RGB")
    return [np.clip(sample, 0.0, 1.0) for sample in array]
