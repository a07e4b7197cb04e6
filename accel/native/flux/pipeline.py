"""The native FLUX.1 pipeline: explicit stages over our transformer and the checkpoint's other components.

The transformer is ours (``NativeFluxTransformer``, filled by a strict ``load_weights``); text encoders,
tokenizers, VAE and scheduler load with their transformers/diffusers classes, as serving engines' native
ports do. The loop is flow-match Euler with FLUX's resolution-dependent shift (the checkpoint's
``FlowMatchEulerDiscreteScheduler``), one transformer call per step, so for the same inputs it gives
the same result as diffusers' ``FluxPipeline``. With true CFG (``true_cfg_scale`` > 1 and a negative
prompt, as ``FluxPipeline``'s ``do_true_cfg``) a step has two branches, conditional and unconditional, which
the contract's ``cfg_branches`` strategy computes and combines as ``uncond + scale * (cond - uncond)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accel.native.contract import NativePipeline, register_native, runs_true_cfg
from accel.native.flux.transformer import NativeFluxTransformer
from accel.native.weights import read_safetensors


def calculate_shift(seq_len: int, base_seq_len: int, max_seq_len: int, base_shift: float, max_shift: float) -> float:
    """FLUX's shift ``mu``, linear in the number of image tokens."""
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return seq_len * slope + base_shift - slope * base_seq_len


@register_native("FluxPipeline")
class NativeFluxPipeline(NativePipeline):
    """FLUX.1 text-to-image with explicit stages."""

    _dit_modules = ("transformer",)
    _encoder_modules = ("text_encoder", "text_encoder_2")
    _vae_modules = ("vae",)
    _resident_modules = ("vae",)

    def __init__(
        self,
        checkpoint: str | Path | None,
        dtype: torch.dtype = torch.float32,
        components: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if components is not None:
            self._init_from_components(components, dtype)
            return
        from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler

        # transformers 5 resolves the old name T5TokenizerFast lazily (to T5Tokenizer); its stubs do not list it.
        from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast  # type: ignore[attr-defined]

        if checkpoint is None:
            raise TypeError("NativeFluxPipeline needs a checkpoint directory or components")
        root = Path(checkpoint)
        self.tokenizer = CLIPTokenizer.from_pretrained(root / "tokenizer")
        self.tokenizer_2 = T5TokenizerFast.from_pretrained(root / "tokenizer_2")
        self.text_encoder = CLIPTextModel.from_pretrained(root / "text_encoder", dtype=dtype).eval()
        self.text_encoder_2 = T5EncoderModel.from_pretrained(root / "text_encoder_2", dtype=dtype).eval()
        self.vae = AutoencoderKL.from_pretrained(root / "vae", dtype=dtype).eval()
        self.scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(root / "scheduler")
        config = json.loads((root / "transformer" / "config.json").read_text())
        self.transformer = NativeFluxTransformer(**{k: v for k, v in config.items() if not k.startswith("_")})
        self.transformer.load_weights(read_safetensors(root / "transformer").items())
        self.transformer.to(dtype).eval()
        self.vae_scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.dtype = dtype

    @classmethod
    def from_components(cls, components: dict[str, Any], dtype: torch.dtype = torch.float32) -> NativeFluxPipeline:
        """From in-memory FluxPipeline components (a ``synthetic:`` source): the native transformer takes
        the diffusers transformer's weights through ``load_weights``, on the same device, then the
        diffusers one is dropped, so native and adapter run the same weights."""
        return cls(None, dtype=dtype, components=components)

    def _init_from_components(self, components: dict[str, Any], dtype: torch.dtype) -> None:
        self.tokenizer = components["tokenizer"]
        self.tokenizer_2 = components["tokenizer_2"]
        self.text_encoder = components["text_encoder"].eval()
        self.text_encoder_2 = components["text_encoder_2"].eval()
        self.vae = components["vae"].eval()
        self.scheduler = components["scheduler"]
        library = components.pop("transformer")
        config = {k: v for k, v in dict(library.config).items() if not k.startswith("_")}
        device = next(library.parameters()).device
        from accel.zoo.synthetic import default_dtype

        with torch.device("meta"), default_dtype(dtype):
            transformer = NativeFluxTransformer(**config)
        transformer.to_empty(device=device)
        transformer.load_weights(library.state_dict().items())
        del library
        self.transformer = transformer.to(dtype).eval().requires_grad_(False)
        self.vae_scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.dtype = dtype

    def encode_prompt(self, request: Any) -> dict[str, torch.Tensor]:
        """CLIP pooled embedding and T5 sequence embedding, repeated per image; with true CFG the negative
        prompt's too, encoded the same way (``negative_`` keys), as ``FluxPipeline`` does."""
        embeddings = self._encode(request.prompt, request)
        if runs_true_cfg(request):
            embeddings.update({f"negative_{k}": v for k, v in self._encode(request.negative_prompt, request).items()})
        return embeddings

    def _encode(self, prompt: str, request: Any) -> dict[str, torch.Tensor]:
        device = self.execution_device
        clip_ids = self.tokenizer(
            [prompt], padding="max_length", max_length=self.tokenizer.model_max_length, truncation=True,
            return_tensors="pt",
        ).input_ids  # fmt: skip
        pooled = self.text_encoder(clip_ids.to(device), output_hidden_states=False).pooler_output.to(self.dtype)
        t5_ids = self.tokenizer_2(
            [prompt], padding="max_length", max_length=request.max_sequence_length, truncation=True,
            return_tensors="pt",
        ).input_ids  # fmt: skip
        embeds = self.text_encoder_2(t5_ids.to(device), output_hidden_states=False)[0].to(self.dtype)
        n = request.num_images_per_prompt
        return {
            "pooled_projections": pooled.repeat(1, n).view(n, -1),
            "encoder_hidden_states": embeds.repeat(1, n, 1).view(n, embeds.shape[1], -1),
            "txt_ids": torch.zeros(embeds.shape[1], 3, device=device, dtype=self.dtype),
        }

    def prepare_latents(self, request: Any) -> dict[str, Any]:
        """Packed noise latents from the request's CPU generator, their position ids, and the timesteps."""
        device = self.execution_device
        channels = self.transformer.config["in_channels"] // 4
        height = 2 * (request.height // (self.vae_scale_factor * 2))
        width = 2 * (request.width // (self.vae_scale_factor * 2))
        generator = torch.Generator("cpu").manual_seed(request.seed)
        shape = (request.num_images_per_prompt, channels, height, width)
        latents = torch.randn(shape, generator=generator, dtype=self.dtype).to(device)
        latents = latents.view(shape[0], channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
        latents = latents.reshape(shape[0], (height // 2) * (width // 2), channels * 4)
        ids = torch.zeros(height // 2, width // 2, 3)
        ids[..., 1] += torch.arange(height // 2)[:, None]
        ids[..., 2] += torch.arange(width // 2)[None, :]
        config = self.scheduler.config
        mu = calculate_shift(
            latents.shape[1],
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        sigmas = None if config.get("use_flow_sigmas") else np.linspace(1.0, 1 / request.steps, request.steps)
        self.scheduler.set_timesteps(sigmas=sigmas, mu=mu, device=device)
        return {
            "latents": latents,
            "img_ids": ids.reshape(-1, 3).to(device=device, dtype=self.dtype),
            "height": height,
            "width": width,
        }

    def denoise(self, request: Any, embeddings: dict[str, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
        """One Euler step per timestep: one transformer call, or with true CFG the two branches through
        ``cfg_branches`` (conditional, then unconditional) combined as ``FluxPipeline`` does."""
        latents: torch.Tensor = state["latents"]
        guidance = None
        if self.transformer.config["guidance_embeds"]:
            guidance = torch.full(
                [latents.shape[0]], request.guidance_scale, device=latents.device, dtype=torch.float32
            )
        scale = float(request.true_cfg_scale)

        def combine(cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
            return uncond + scale * (cond - uncond)  # FluxPipeline's formula and order of operations

        def step_inputs(latents: torch.Tensor, t: torch.Tensor) -> dict[str, Any]:
            return {"hidden_states": latents, "timestep": t.expand(latents.shape[0]).to(latents.dtype) / 1000,
                    "guidance": guidance, "img_ids": state["img_ids"]}  # fmt: skip

        def predict(branch: str, inputs: dict[str, Any], prefix: str) -> torch.Tensor:
            """The prompt's embeddings (``prefix`` ``negative_``: the negative prompt's) with this step's inputs."""
            return self.branch_call(
                branch,
                **inputs,
                pooled_projections=embeddings[f"{prefix}pooled_projections"],
                encoder_hidden_states=embeddings[f"{prefix}encoder_hidden_states"],
                txt_ids=embeddings[f"{prefix}txt_ids"],
            )

        return self.euler_loop(request, latents, step_inputs, predict, combine)

    def decode(self, latents: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        """Unpack, de-normalise and decode with the VAE; images in [0, 1], (batch, H, W, 3)."""
        batch, _, packed = latents.shape
        channels, height, width = packed // 4, state["height"], state["width"]
        latents = latents.view(batch, height // 2, width // 2, channels, 2, 2).permute(0, 3, 1, 4, 2, 5)
        latents = latents.reshape(batch, channels, height, width)
        latents = latents / self.vae.config.scaling_factor + self.vae.config.shift_factor
        image = self.vae.decode(latents, return_dict=False)[0]
        images: torch.Tensor = (image / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float()
        return images
