"""What the native flow-match text-to-image pipelines share (FLUX, Qwen-Image): loading, packed latents, shift.

``FlowMatchPipeline`` is a ``NativePipeline`` over a native transformer (``transformer_class``, an
``accel.native.blocks.NativeTransformer``) and the checkpoint's other components, with the checkpoint's
``FlowMatchEulerDiscreteScheduler``. Construction dispatches on where the components come from: a checkpoint
directory (``load_components`` loads the text encoders, tokenizers and VAE with their transformers/diffusers
classes, the scheduler is loaded here, the transformer through its strict ``load_weights``) or in-memory
components (a ``synthetic:`` source: the native transformer takes the diffusers transformer's weights, which is
then dropped). Either way the declared components (``_tokenizers``, ``_encoder_modules``, ``_vae_modules``,
``scheduler``) become attributes of the same names, in that order.

The stages' common parts: the latent grid and the request's initial noise (a CPU generator seeded with the
request's seed, as diffusers' pipelines draw it), 2x2 patch packing and unpacking, and the resolution-dependent
shift ``mu`` of the timesteps. Prompt encoding with a negative prompt, the denoising loop and the CFG combination
are the contract's (``NativePipeline.encode_prompt``, ``denoise``, ``combine_cfg``). What each model does its own
way (its prompt encoding, noise shape, position inputs, sigmas, VAE de-normalisation) stays in its pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from accel.native.blocks import NativeTransformer
from accel.native.contract import NativePipeline


def calculate_shift(seq_len: int, base_seq_len: int, max_seq_len: int, base_shift: float, max_shift: float) -> float:
    """The shift ``mu``, linear in the number of image tokens (diffusers' ``calculate_shift``)."""
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return seq_len * slope + base_shift - slope * base_seq_len


def flow_sigmas(steps: int) -> Any:
    """The sigmas FluxPipeline and QwenImagePipeline pass the scheduler: ``steps`` from 1 down to 1 / steps."""
    return np.linspace(1.0, 1 / steps, steps)


def pack_latents(latents: torch.Tensor, batch: int, channels: int, height: int, width: int) -> torch.Tensor:
    """(batch, channels, height, width) latents (any view of them) as (batch, tokens, channels * 4) 2x2 patches."""
    latents = latents.view(batch, channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return latents.reshape(batch, (height // 2) * (width // 2), channels * 4)


def unpack_latents(latents: torch.Tensor, height: int, width: int, *frames: int) -> torch.Tensor:
    """``pack_latents`` undone: (batch, channels, *frames, height, width) (``frames``: e.g. 1 for a video VAE)."""
    batch, _, packed = latents.shape
    channels = packed // 4
    latents = latents.view(batch, height // 2, width // 2, channels, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return latents.reshape(batch, channels, *frames, height, width)


class FlowMatchPipeline(NativePipeline):
    """A native flow-match text-to-image pipeline: component loading, latent grid, noise, packing and shift."""

    # The native transformer class the pipeline runs (its weights from the checkpoint or the library's).
    transformer_class: ClassVar[type[NativeTransformer]]
    # The tokenizers among the components, loaded and adopted before the encoders.
    _tokenizers: ClassVar[tuple[str, ...]] = ("tokenizer",)
    # Set by the constructor (``_adopt``; the transformer from ``transformer_class``).
    tokenizer: Any
    text_encoder: Any
    vae: Any
    scheduler: Any
    transformer: Any

    def __init__(
        self,
        checkpoint: str | Path | None,
        dtype: torch.dtype = torch.float32,
        components: dict[str, Any] | None = None,
    ) -> None:
        """From a checkpoint directory, or (``from_components``) from in-memory components; in ``dtype``."""
        super().__init__()
        self.dtype = dtype
        if components is None:
            if checkpoint is None:
                raise TypeError(f"{type(self).__name__} needs a checkpoint directory or components")
            root = Path(checkpoint)
            from diffusers import FlowMatchEulerDiscreteScheduler

            loaded = self.load_components(root, dtype)
            self._adopt({**loaded, "scheduler": FlowMatchEulerDiscreteScheduler.from_pretrained(root / "scheduler")})
            self.transformer = self.transformer_class.from_checkpoint(root / "transformer", dtype)
        else:
            self._adopt(components)
            self.transformer = self.transformer_class.from_library(components.pop("transformer"), dtype)
        self.vae_scale_factor = self.vae_scale()

    @classmethod
    def from_components(cls, components: dict[str, Any], dtype: torch.dtype = torch.float32) -> NativePipeline:
        """From in-memory components (a ``synthetic:`` source): the native transformer takes the diffusers
        transformer's weights through ``load_weights``, on the same device, then the diffusers one is dropped, so
        native and adapter run the same weights."""
        return cls(None, dtype=dtype, components=components)

    def _adopt(self, components: dict[str, Any]) -> None:
        for name in (*self._tokenizers, *self._encoder_modules, *self._vae_modules, "scheduler"):
            component = components[name]
            setattr(self, name, component.eval() if isinstance(component, torch.nn.Module) else component)

    def load_components(self, root: Path, dtype: torch.dtype) -> dict[str, Any]:
        """The checkpoint's tokenizers, text encoders and VAE by component name, loaded in ``dtype`` (the scheduler
        and the transformer are loaded here)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to load its components")

    def vae_scale(self) -> int:
        """How many pixels one latent covers along each side (the VAE's downsampling factor)."""
        raise NotImplementedError(f"{type(self).__name__} does not say its VAE's scale factor")

    # --- latents --------------------------------------------------------------------------------------
    def latent_grid(self, request: Any) -> tuple[int, int, int]:
        """The unpacked latents' channels (the transformer's input channels / 4: 2x2 patches), height and width
        (even, so they pack)."""
        channels = self.transformer.config["in_channels"] // 4
        height = 2 * (request.height // (self.vae_scale_factor * 2))
        width = 2 * (request.width // (self.vae_scale_factor * 2))
        return channels, height, width

    def initial_noise(self, request: Any, shape: tuple[int, ...]) -> torch.Tensor:
        """The request's noise of ``shape``: drawn on the CPU from a generator seeded with ``request.seed``, in the
        pipeline's dtype, then moved to the execution device."""
        generator = torch.Generator("cpu").manual_seed(request.seed)
        return torch.randn(shape, generator=generator, dtype=self.dtype).to(self.execution_device)

    def set_shifted_timesteps(self, image_tokens: int, sigmas: Any) -> None:
        """The scheduler's timesteps from ``sigmas`` (None: its own), shifted by ``mu`` for ``image_tokens``
        (the scheduler config's base/max sequence length and shift, diffusers' defaults where absent)."""
        config = self.scheduler.config
        mu = calculate_shift(
            image_tokens,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        self.scheduler.set_timesteps(sigmas=sigmas, mu=mu, device=self.execution_device)
