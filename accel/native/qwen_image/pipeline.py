"""The native Qwen-Image pipeline: explicit stages over our transformer and the checkpoint's other components.

The transformer is ours (``NativeQwenImageTransformer``, filled by a strict ``load_weights``); the Qwen2.5-VL
text encoder, its tokenizer, the VAE and the scheduler load with their transformers/diffusers classes, as the
native FLUX pipeline's do (``accel.native.flow_match.FlowMatchPipeline``: loading, latent grid, noise, packing,
shift; the contract's ``encode_prompt`` and ``denoise``). The prompt goes through Qwen-Image's chat template
and the encoder's last hidden state, less the template's first 34 tokens, is the text stream. The loop is
flow-match Euler with the resolution-dependent shift (the checkpoint's ``FlowMatchEulerDiscreteScheduler``), one
transformer call per step and CFG branch, so for the same inputs it gives the same result as diffusers'
``QwenImagePipeline``.

True CFG as ``QwenImagePipeline``'s ``do_true_cfg``: ``true_cfg_scale`` > 1 (default 4.0, as there) with a
negative prompt. The two branches go through the contract's ``cfg_branches`` strategy and combine as
``uncond + scale * (cond - uncond)`` (the contract's ``combine_cfg``), then rescaled per token to the conditional
prediction's norm (``rescale_to_cond``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from accel.native.contract import register_native
from accel.native.flow_match import FlowMatchPipeline, flow_sigmas, pack_latents, unpack_latents
from accel.native.qwen_image.transformer import NativeQwenImageTransformer

# QwenImagePipeline's prompt template and the tokens of it dropped from the encoder's output.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
TEMPLATE_TOKENS = 34
TOKENIZER_MAX_LENGTH = 1024


def rescale_to_cond(cond: torch.Tensor, combined: torch.Tensor) -> torch.Tensor:
    """Qwen-Image's true-CFG rescale: the combined prediction scaled, per token, to the conditional prediction's
    norm (``QwenImagePipeline``'s formula and order of operations)."""
    cond_norm = torch.norm(cond, dim=-1, keepdim=True)
    noise_norm = torch.norm(combined, dim=-1, keepdim=True)
    rescaled: torch.Tensor = combined * (cond_norm / noise_norm)
    return rescaled


@register_native("QwenImagePipeline")
class NativeQwenImagePipeline(FlowMatchPipeline):
    """Qwen-Image text-to-image with explicit stages."""

    transformer_class = NativeQwenImageTransformer
    _dit_modules = ("transformer",)
    _encoder_modules = ("text_encoder",)
    _vae_modules = ("vae",)
    _resident_modules = ("vae",)
    default_true_cfg_scale = 4.0  # QwenImagePipeline's default

    def load_components(self, root: Path, dtype: torch.dtype) -> dict[str, Any]:
        """The Qwen2 tokenizer, the Qwen2.5-VL text encoder, the Qwen-Image VAE."""
        from diffusers import AutoencoderKLQwenImage
        from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

        return {
            "tokenizer": Qwen2Tokenizer.from_pretrained(root / "tokenizer"),
            "text_encoder": Qwen2_5_VLForConditionalGeneration.from_pretrained(root / "text_encoder", dtype=dtype),
            "vae": AutoencoderKLQwenImage.from_pretrained(root / "vae", dtype=dtype),
        }

    def vae_scale(self) -> int:
        """2 per temporal-downsampling stage of the VAE (each also halves height and width)."""
        return int(2 ** len(self.vae.temperal_downsample))

    # --- stages ---------------------------------------------------------------------------------------
    def encode_text(self, prompt: str, request: Any) -> dict[str, torch.Tensor]:
        """The text stream: the encoder's last hidden state over the templated prompt, the template's tokens
        dropped, repeated per image.

        One prompt, padded to its own length: every token is valid, so there is no mask to carry (diffusers
        drops an all-ones mask before the transformer too)."""
        device = self.execution_device
        tokens = self.tokenizer(
            [PROMPT_TEMPLATE.format(prompt)], max_length=TOKENIZER_MAX_LENGTH + TEMPLATE_TOKENS, padding=True,
            truncation=True, return_tensors="pt",
        ).to(device)  # fmt: skip
        output = self.text_encoder(
            input_ids=tokens.input_ids, attention_mask=tokens.attention_mask, output_hidden_states=True
        )
        hidden = output.hidden_states[-1][0, TEMPLATE_TOKENS:][None].to(dtype=self.dtype, device=device)
        hidden = hidden[:, : request.max_sequence_length]
        n = request.num_images_per_prompt
        return {"encoder_hidden_states": hidden.repeat(1, n, 1).view(n, hidden.shape[1], -1)}

    def prepare_latents(self, request: Any) -> dict[str, Any]:
        """Packed noise latents from the request's CPU generator (one frame), the packed grid and the timesteps."""
        channels, height, width = self.latent_grid(request)
        batch = request.num_images_per_prompt
        noise = self.initial_noise(request, (batch, 1, channels, height, width))
        latents = pack_latents(noise, batch, channels, height, width)
        self.set_shifted_timesteps(latents.shape[1], flow_sigmas(request.steps))
        self.scheduler.set_begin_index(0)
        return {
            "latents": latents,
            "img_shape": (1, height // 2, width // 2),
            "height": height,
            "width": width,
        }

    def denoiser_inputs(self, request: Any, state: dict[str, Any]) -> dict[str, Any]:
        """The packed grid (frames, rows, columns) the rotary embedding covers."""
        return {"img_shape": state["img_shape"]}

    def combine_cfg(self, cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
        """The contract's combination, rescaled to the conditional prediction's norm (``rescale_to_cond``)."""
        return rescale_to_cond(cond, super().combine_cfg(cond, uncond, scale))

    def decode(self, latents: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        """Unpack to one frame, de-normalise with the VAE's latent statistics and decode; images in [0, 1],
        (batch, H, W, 3)."""
        latents = unpack_latents(latents, state["height"], state["width"], 1).to(self.vae.dtype)
        config = self.vae.config
        mean = torch.tensor(config.latents_mean).view(1, config.z_dim, 1, 1, 1).to(latents.device, latents.dtype)
        std = 1.0 / torch.tensor(config.latents_std).view(1, config.z_dim, 1, 1, 1).to(latents.device, latents.dtype)
        latents = latents / std + mean
        image = self.vae.decode(latents, return_dict=False)[0][:, :, 0]
        images: torch.Tensor = (image * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float()
        return images
