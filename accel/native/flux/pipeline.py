"""The native FLUX.1 pipeline: explicit stages over our transformer and the checkpoint's other components.

The transformer is ours (``NativeFluxTransformer``, filled by a strict ``load_weights``); text encoders,
tokenizers, VAE and scheduler load with their transformers/diffusers classes, as serving engines' native
ports do (``accel.native.flow_match.FlowMatchPipeline``: loading, latent grid, noise, packing, shift). The loop
is flow-match Euler with FLUX's resolution-dependent shift (the checkpoint's ``FlowMatchEulerDiscreteScheduler``),
one transformer call per step (the contract's ``denoise``), so for the same inputs it gives the same result as
diffusers' ``FluxPipeline``. With true CFG (``true_cfg_scale`` > 1 and a negative prompt, as ``FluxPipeline``'s
``do_true_cfg``) a step has two branches, conditional and unconditional, which the contract's ``cfg_branches``
strategy computes and ``combine_cfg`` combines as ``uncond + scale * (cond - uncond)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from accel.native.contract import register_native
from accel.native.flow_match import FlowMatchPipeline, flow_sigmas, pack_latents, unpack_latents
from accel.native.flux.transformer import NativeFluxTransformer


@register_native("FluxPipeline")
class NativeFluxPipeline(FlowMatchPipeline):
    """FLUX.1 text-to-image with explicit stages."""

    transformer_class = NativeFluxTransformer
    _tokenizers = ("tokenizer", "tokenizer_2")
    _dit_modules = ("transformer",)
    _encoder_modules = ("text_encoder", "text_encoder_2")
    _vae_modules = ("vae",)
    _resident_modules = ("vae",)
    tokenizer_2: Any
    text_encoder_2: Any

    def load_components(self, root: Path, dtype: torch.dtype) -> dict[str, Any]:
        """CLIP and T5 tokenizers and encoders, the VAE."""
        from diffusers import AutoencoderKL

        # transformers 5 resolves the old name T5TokenizerFast lazily (to T5Tokenizer); its stubs do not list it.
        from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast  # type: ignore[attr-defined]

        return {
            "tokenizer": CLIPTokenizer.from_pretrained(root / "tokenizer"),
            "tokenizer_2": T5TokenizerFast.from_pretrained(root / "tokenizer_2"),
            "text_encoder": CLIPTextModel.from_pretrained(root / "text_encoder", dtype=dtype),
            "text_encoder_2": T5EncoderModel.from_pretrained(root / "text_encoder_2", dtype=dtype),
            "vae": AutoencoderKL.from_pretrained(root / "vae", dtype=dtype),
        }

    def vae_scale(self) -> int:
        """2 per down block of the VAE."""
        return int(2 ** (len(self.vae.config.block_out_channels) - 1))

    def encode_text(self, prompt: str, request: Any) -> dict[str, torch.Tensor]:
        """CLIP pooled embedding and T5 sequence embedding, repeated per image, and the text position ids."""
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
        channels, height, width = self.latent_grid(request)
        batch = request.num_images_per_prompt
        latents = pack_latents(self.initial_noise(request, (batch, channels, height, width)), batch, channels,
                               height, width)  # fmt: skip
        ids = torch.zeros(height // 2, width // 2, 3)
        ids[..., 1] += torch.arange(height // 2)[:, None]
        ids[..., 2] += torch.arange(width // 2)[None, :]
        sigmas = None if self.scheduler.config.get("use_flow_sigmas") else flow_sigmas(request.steps)
        self.set_shifted_timesteps(latents.shape[1], sigmas)
        return {
            "latents": latents,
            "img_ids": ids.reshape(-1, 3).to(device=self.execution_device, dtype=self.dtype),
            "height": height,
            "width": width,
        }

    def denoiser_inputs(self, request: Any, state: dict[str, Any]) -> dict[str, Any]:
        """The image position ids and, for a guidance-distilled checkpoint, the guidance scale per image."""
        latents: torch.Tensor = state["latents"]
        guidance = None
        if self.transformer.config["guidance_embeds"]:
            guidance = torch.full(
                [latents.shape[0]], request.guidance_scale, device=latents.device, dtype=torch.float32
            )
        return {"guidance": guidance, "img_ids": state["img_ids"]}

    def decode(self, latents: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        """Unpack, de-normalise and decode with the VAE; images in [0, 1], (batch, H, W, 3)."""
        latents = unpack_latents(latents, state["height"], state["width"])
        latents = latents / self.vae.config.scaling_factor + self.vae.config.shift_factor
        image = self.vae.decode(latents, return_dict=False)[0]
        images: torch.Tensor = (image / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float()
        return images
