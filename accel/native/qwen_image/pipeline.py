"""The native Qwen-Image pipeline: explicit stages over our transformer and the checkpoint's other components.

The transformer is ours (``NativeQwenImageTransformer``, filled by a strict ``load_weights``); the Qwen2.5-VL
text encoder, its tokenizer, the VAE and the scheduler load with their transformers/diffusers classes, as the
native FLUX pipeline's do. The prompt goes through Qwen-Image's chat template and the encoder's last hidden
state, less the template's first 34 tokens, is the text stream. The loop is flow-match Euler with the
resolution-dependent shift (the checkpoint's ``FlowMatchEulerDiscreteScheduler``), one transformer call per
step and CFG branch, so for the same inputs it gives the same result as diffusers' ``QwenImagePipeline``.

True CFG as ``QwenImagePipeline``'s ``do_true_cfg``: ``true_cfg_scale`` > 1 (default 4.0, as there) with a
negative prompt. The two branches go through the contract's ``cfg_branches`` strategy and combine as
``uncond + scale * (cond - uncond)``, then rescaled per token to the conditional prediction's norm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accel.native.contract import NativePipeline, register_native, runs_true_cfg
from accel.native.flux.pipeline import calculate_shift
from accel.native.qwen_image.transformer import NativeQwenImageTransformer
from accel.native.weights import read_safetensors

# QwenImagePipeline's prompt template and the tokens of it dropped from the encoder's output.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
TEMPLATE_TOKENS = 34
TOKENIZER_MAX_LENGTH = 1024


def guided(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """Qwen-Image's true CFG: ``uncond + scale * (cond - uncond)`` rescaled, per token, to the conditional
    prediction's norm (``QwenImagePipeline``'s formula and order of operations)."""
    combined = uncond + scale * (cond - uncond)
    cond_norm = torch.norm(cond, dim=-1, keepdim=True)
    noise_norm = torch.norm(combined, dim=-1, keepdim=True)
    rescaled: torch.Tensor = combined * (cond_norm / noise_norm)
    return rescaled


@register_native("QwenImagePipeline")
class NativeQwenImagePipeline(NativePipeline):
    """Qwen-Image text-to-image with explicit stages."""

    _dit_modules = ("transformer",)
    _encoder_modules = ("text_encoder",)
    _vae_modules = ("vae",)
    _resident_modules = ("vae",)
    default_true_cfg_scale = 4.0  # QwenImagePipeline's default

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
        from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler
        from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

        if checkpoint is None:
            raise TypeError("NativeQwenImagePipeline needs a checkpoint directory or components")
        root = Path(checkpoint)
        self.tokenizer = Qwen2Tokenizer.from_pretrained(root / "tokenizer")
        self.text_encoder = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            root / "text_encoder", dtype=dtype
        ).eval()
        self.vae = AutoencoderKLQwenImage.from_pretrained(root / "vae", dtype=dtype).eval()
        self.scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(root / "scheduler")
        config = json.loads((root / "transformer" / "config.json").read_text())
        self.transformer = NativeQwenImageTransformer(**{k: v for k, v in config.items() if not k.startswith("_")})
        self.transformer.load_weights(read_safetensors(root / "transformer").items())
        self.transformer.to(dtype).eval()
        self.vae_scale_factor = 2 ** len(self.vae.temperal_downsample)
        self.dtype = dtype

    @classmethod
    def from_components(cls, components: dict[str, Any], dtype: torch.dtype = torch.float32) -> NativeQwenImagePipeline:
        """From in-memory QwenImagePipeline components (a ``synthetic:`` source): the native transformer takes
        the diffusers transformer's weights through ``load_weights``, on the same device, then the diffusers
        one is dropped, so native and adapter run the same weights."""
        return cls(None, dtype=dtype, components=components)

    def _init_from_components(self, components: dict[str, Any], dtype: torch.dtype) -> None:
        from accel.zoo.synthetic import default_dtype

        self.tokenizer = components["tokenizer"]
        self.text_encoder = components["text_encoder"].eval()
        self.vae = components["vae"].eval()
        self.scheduler = components["scheduler"]
        library = components.pop("transformer")
        config = {k: v for k, v in dict(library.config).items() if not k.startswith("_")}
        device = next(library.parameters()).device
        with torch.device("meta"), default_dtype(dtype):
            transformer = NativeQwenImageTransformer(**config)
        transformer.to_empty(device=device)  # the rotary tables are built on the CPU, never on meta
        transformer.load_weights(library.state_dict().items())
        del library
        self.transformer = transformer.to(dtype).eval().requires_grad_(False)
        self.vae_scale_factor = 2 ** len(self.vae.temperal_downsample)
        self.dtype = dtype

    # --- stages ---------------------------------------------------------------------------------------
    def encode_prompt(self, request: Any) -> dict[str, torch.Tensor]:
        """The prompt's text stream, repeated per image; with true CFG the negative prompt's too
        (``negative_`` key), encoded the same way, as ``QwenImagePipeline`` does."""
        embeddings = {"encoder_hidden_states": self._encode(request.prompt, request)}
        if runs_true_cfg(request):
            embeddings["negative_encoder_hidden_states"] = self._encode(request.negative_prompt, request)
        return embeddings

    def _encode(self, prompt: str, request: Any) -> torch.Tensor:
        """The encoder's last hidden state over the templated prompt, the template's tokens dropped.

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
        embeds: torch.Tensor = hidden.repeat(1, n, 1).view(n, hidden.shape[1], -1)
        return embeds

    def prepare_latents(self, request: Any) -> dict[str, Any]:
        """Packed noise latents from the request's CPU generator, the packed grid and the timesteps."""
        device = self.execution_device
        channels = self.transformer.config["in_channels"] // 4
        height = 2 * (request.height // (self.vae_scale_factor * 2))
        width = 2 * (request.width // (self.vae_scale_factor * 2))
        batch = request.num_images_per_prompt
        generator = torch.Generator("cpu").manual_seed(request.seed)
        noise = torch.randn((batch, 1, channels, height, width), generator=generator, dtype=self.dtype).to(device)
        latents = noise.view(batch, channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
        latents = latents.reshape(batch, (height // 2) * (width // 2), channels * 4)
        config = self.scheduler.config
        mu = calculate_shift(
            latents.shape[1],
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / request.steps, request.steps)
        self.scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
        self.scheduler.set_begin_index(0)
        return {
            "latents": latents,
            "img_shape": (1, height // 2, width // 2),
            "height": height,
            "width": width,
        }

    def denoise(self, request: Any, embeddings: dict[str, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
        """One Euler step per timestep: one transformer call, or with true CFG the two branches through
        ``cfg_branches`` (conditional, then unconditional) combined by ``guided``."""
        latents: torch.Tensor = state["latents"]
        scale = float(request.true_cfg_scale)

        def combine(cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
            return guided(cond, uncond, scale)

        def step_inputs(latents: torch.Tensor, t: torch.Tensor) -> dict[str, Any]:
            timestep = t.expand(latents.shape[0]).to(latents.dtype)
            return {"hidden_states": latents, "timestep": timestep / 1000, "img_shape": state["img_shape"]}

        def predict(branch: str, inputs: dict[str, Any], prefix: str) -> torch.Tensor:
            """The prompt's text stream (``prefix`` ``negative_``: the negative prompt's) with this step's inputs."""
            return self.branch_call(
                branch, **inputs, encoder_hidden_states=embeddings[f"{prefix}encoder_hidden_states"]
            )

        return self.euler_loop(request, latents, step_inputs, predict, combine)

    def decode(self, latents: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        """Unpack to one frame, de-normalise with the VAE's latent statistics and decode; images in [0, 1],
        (batch, H, W, 3)."""
        batch, _, packed = latents.shape
        channels, height, width = packed // 4, state["height"], state["width"]
        latents = latents.view(batch, height // 2, width // 2, channels, 2, 2).permute(0, 3, 1, 4, 2, 5)
        latents = latents.reshape(batch, channels, 1, height, width).to(self.vae.dtype)
        config = self.vae.config
        mean = torch.tensor(config.latents_mean).view(1, config.z_dim, 1, 1, 1).to(latents.device, latents.dtype)
        std = 1.0 / torch.tensor(config.latents_std).view(1, config.z_dim, 1, 1, 1).to(latents.device, latents.dtype)
        latents = latents / std + mean
        image = self.vae.decode(latents, return_dict=False)[0][:, :, 0]
        images: torch.Tensor = (image * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float()
        return images
