"""Image families whose text encoders are CLIP and/or T5 (the zoo's offline CLIP and T5 tokenizers)."""

from __future__ import annotations

from typing import Any

from accel.zoo.families import FLUX_CONFIG
from accel.zoo.pipelines.base import CLIP_TEXT, T5, Family, cls, hf, kl_vae_config, seeded
from accel.zoo.tokenizers import clip_tokenizer, t5_tokenizer

D = "diffusers."
T = "transformers."


def _clip(seed: int, config: dict[str, Any], projection: bool = False) -> Any:
    model = "CLIPTextModelWithProjection" if projection else "CLIPTextModel"
    return hf(seed, model, "CLIPTextConfig", config)


def _t5(seed: int, config: dict[str, Any], umt5: bool = False) -> Any:
    if umt5:
        return hf(seed, "UMT5EncoderModel", "UMT5Config", config)
    return hf(seed, "T5EncoderModel", "T5Config", config)


# ---- Stable Diffusion 1.5 ----
SD15_CONFIG: dict[str, Any] = {
    "unet": {
        "block_out_channels": [8, 16],
        "layers_per_block": 1,
        "sample_size": 32,
        "in_channels": 4,
        "out_channels": 4,
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
        "cross_attention_dim": 32,
        "norm_num_groups": 2,
        "attention_head_dim": 2,
    },
    "vae": kl_vae_config(4, scaling_factor=0.18215),
    "clip": CLIP_TEXT,
    "scheduler": {
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "clip_sample": False,
        "set_alpha_to_one": False,
    },
}


def build_sd15(config: dict[str, Any]) -> dict[str, Any]:
    """UNet2DConditionModel, CLIP text encoder, DDIM scheduler; no safety checker."""
    return {
        "unet": seeded(0, D + "UNet2DConditionModel", **config["unet"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _clip(2, config["clip"]),
        "tokenizer": clip_tokenizer(),
        "scheduler": cls(D + "DDIMScheduler")(**config["scheduler"]),
        "safety_checker": None,
        "feature_extractor": None,
        "image_encoder": None,
        "requires_safety_checker": False,
    }


# ---- Stable Diffusion XL ----
SDXL_CONFIG: dict[str, Any] = {
    "unet": {
        "block_out_channels": [8, 16],
        "layers_per_block": 1,
        "sample_size": 32,
        "in_channels": 4,
        "out_channels": 4,
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
        "attention_head_dim": [2, 4],
        "use_linear_projection": True,
        "addition_embed_type": "text_time",
        "addition_time_embed_dim": 8,
        "transformer_layers_per_block": [1, 2],
        # 6 micro-conditioning ids x 8 + text_encoder_2's projection (32)
        "projection_class_embeddings_input_dim": 80,
        "cross_attention_dim": 64,  # CLIP 32 + CLIP-G 32, concatenated
        "norm_num_groups": 2,
    },
    "vae": kl_vae_config(4, scaling_factor=0.13025),
    "clip": CLIP_TEXT,
    "scheduler": {
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "steps_offset": 1,
        "beta_schedule": "scaled_linear",
        "timestep_spacing": "leading",
    },
}


def build_sdxl(config: dict[str, Any]) -> dict[str, Any]:
    """UNet with text-time conditioning, CLIP + CLIP-with-projection, Euler scheduler."""
    return {
        "unet": seeded(0, D + "UNet2DConditionModel", **config["unet"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _clip(2, config["clip"]),
        "text_encoder_2": _clip(3, config["clip"], projection=True),
        "tokenizer": clip_tokenizer(),
        "tokenizer_2": clip_tokenizer(),
        "scheduler": cls(D + "EulerDiscreteScheduler")(**config["scheduler"]),
        "image_encoder": None,
        "feature_extractor": None,
        "add_watermarker": False,
    }


# ---- Stable Diffusion 3 / 3.5 ----
SD3_CONFIG: dict[str, Any] = {
    "transformer": {
        "sample_size": 32,
        "patch_size": 1,
        "in_channels": 4,
        "num_layers": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 4,
        "caption_projection_dim": 32,
        "joint_attention_dim": 32,
        "pooled_projection_dim": 64,  # two CLIP projections of 32
        "out_channels": 4,
        "qk_norm": "rms_norm",  # SD 3.5
    },
    "vae": kl_vae_config(
        4, shift_factor=0.0609, scaling_factor=1.5035, use_quant_conv=False, use_post_quant_conv=False
    ),
    "clip": CLIP_TEXT,
    "t5": T5,
    "scheduler": {"shift": 3.0},
}


def build_sd3(config: dict[str, Any]) -> dict[str, Any]:
    """SD3 MMDiT (SD 3.5's QK-norm), two CLIP-with-projection encoders and T5."""
    return {
        "transformer": seeded(0, D + "SD3Transformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _clip(2, config["clip"], projection=True),
        "text_encoder_2": _clip(3, config["clip"], projection=True),
        "text_encoder_3": _t5(4, config["t5"]),
        "tokenizer": clip_tokenizer(),
        "tokenizer_2": clip_tokenizer(),
        "tokenizer_3": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
        "image_encoder": None,
        "feature_extractor": None,
    }


# ---- FLUX.1 Kontext (edit): tiny-flux's layout, an input image ----
def build_flux_kontext(config: dict[str, Any]) -> dict[str, Any]:
    """FLUX.1's components; Kontext concatenates the input image's latents to the sequence."""
    from accel.zoo.families import build_flux

    components = build_flux(config)
    return {**components, "image_encoder": None, "feature_extractor": None}


# ---- Chroma ----
CHROMA_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 1,
        "in_channels": 16,
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 32,
        "axes_dims_rope": [4, 4, 8],
        "approximator_hidden_dim": 32,
        "approximator_layers": 1,
        "approximator_num_channels": 16,
    },
    "vae": FLUX_CONFIG["vae"],
    "t5": T5,
    "scheduler": {"shift": 3.0, "use_dynamic_shifting": True},
}


def build_chroma(config: dict[str, Any]) -> dict[str, Any]:
    """Chroma's FLUX-style DiT with a distilled guidance approximator, T5 only."""
    return {
        "transformer": seeded(0, D + "ChromaTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
        "image_encoder": None,
        "feature_extractor": None,
    }


# ---- PixArt-Sigma and PixArt-alpha ----
PIXART_CONFIG: dict[str, Any] = {
    "transformer": {
        "sample_size": 8,
        "num_layers": 2,
        "patch_size": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 3,
        "caption_channels": 32,
        "in_channels": 4,
        "cross_attention_dim": 24,
        "out_channels": 8,
        "attention_bias": True,
        "activation_fn": "gelu-approximate",
        "num_embeds_ada_norm": 1000,
        "norm_type": "ada_norm_single",
        "norm_elementwise_affine": False,
        "norm_eps": 1e-6,
    },
    "vae": kl_vae_config(4, scaling_factor=0.13025),
    "t5": T5,
}


def build_pixart_sigma(config: dict[str, Any]) -> dict[str, Any]:
    """PixArt DiT (adaLN-single), T5, DPM-Solver (the published PixArt-Sigma scheduler)."""
    return {
        "transformer": seeded(0, D + "PixArtTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "DPMSolverMultistepScheduler")(),
    }


# ---- AuraFlow ----
AURAFLOW_CONFIG: dict[str, Any] = {
    "transformer": {
        "sample_size": 32,
        "patch_size": 2,
        "in_channels": 4,
        "num_mmdit_layers": 2,
        "num_single_dit_layers": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 4,
        "caption_projection_dim": 32,
        "joint_attention_dim": 32,
        "out_channels": 4,
        "pos_embed_max_size": 256,
    },
    "vae": kl_vae_config(4, scaling_factor=0.13025),
    "umt5": T5,
}


def build_auraflow(config: dict[str, Any]) -> dict[str, Any]:
    """AuraFlow MMDiT + single-stream DiT, UMT5 encoder."""
    return {
        "transformer": seeded(0, D + "AuraFlowTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _t5(2, config["umt5"], umt5=True),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- CogView3-Plus ----
COGVIEW3_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 2,
        "in_channels": 4,
        "num_layers": 2,
        "attention_head_dim": 4,
        "num_attention_heads": 2,
        "out_channels": 4,
        "text_embed_dim": 32,
        "time_embed_dim": 8,
        "condition_dim": 2,
        "pos_embed_max_size": 8,
        "sample_size": 8,
    },
    "vae": kl_vae_config(4, scaling_factor=1.0),
    "t5": T5,
}


def build_cogview3plus(config: dict[str, Any]) -> dict[str, Any]:
    """CogView3-Plus DiT, T5, CogVideoX DDIM scheduler."""
    return {
        "transformer": seeded(0, D + "CogView3PlusTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "CogVideoXDDIMScheduler")(),
    }


def _requires(*names: str) -> tuple[str, ...]:
    return names


FAMILIES = (
    Family(
        name="tiny-sd15",
        family="Stable Diffusion 1.5",
        pipeline_class="StableDiffusionPipeline",
        modality="image",
        description="SD 1.5 layout: UNet with cross-attention, CLIP, 8x VAE, DDIM, CFG",
        source="after diffusers tests/pipelines/stable_diffusion/test_stable_diffusion.py get_dummy_components "
        "(diffusers 0.42; UNet widths 8/16, VAE with 4 levels for the 8x downsampling)",
        config=SD15_CONFIG,
        builder=build_sd15,
        requires=_requires(
            D + "StableDiffusionPipeline",
            D + "UNet2DConditionModel",
            D + "AutoencoderKL",
            D + "DDIMScheduler",
            T + "CLIPTextModel",
        ),
    ),
    Family(
        name="tiny-sdxl",
        family="Stable Diffusion XL",
        pipeline_class="StableDiffusionXLPipeline",
        modality="image",
        description="SDXL layout: UNet with text-time micro-conditioning, CLIP + CLIP-G, 8x VAE, CFG",
        source="after diffusers tests/pipelines/stable_diffusion_xl/test_stable_diffusion_xl.py get_dummy_components "
        "(diffusers 0.42; widths halved)",
        config=SDXL_CONFIG,
        builder=build_sdxl,
        requires=_requires(
            D + "StableDiffusionXLPipeline",
            D + "UNet2DConditionModel",
            D + "AutoencoderKL",
            D + "EulerDiscreteScheduler",
            T + "CLIPTextModel",
            T + "CLIPTextModelWithProjection",
        ),
    ),
    Family(
        name="tiny-sd3",
        family="Stable Diffusion 3 / 3.5",
        pipeline_class="StableDiffusion3Pipeline",
        modality="image",
        description="SD3/3.5 layout: MMDiT with QK RMS-norm, two CLIP + T5, 16-channel-style VAE, CFG",
        source="after diffusers tests/pipelines/stable_diffusion_3/test_pipeline_stable_diffusion_3.py "
        "get_dummy_components (diffusers 0.42; qk_norm as SD 3.5)",
        config=SD3_CONFIG,
        builder=build_sd3,
        requires=_requires(
            D + "StableDiffusion3Pipeline",
            D + "SD3Transformer2DModel",
            D + "AutoencoderKL",
            D + "FlowMatchEulerDiscreteScheduler",
            T + "CLIPTextModelWithProjection",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 32},
    ),
    Family(
        name="tiny-flux-kontext",
        family="FLUX.1 Kontext",
        pipeline_class="FluxKontextPipeline",
        modality="image",
        description="FLUX.1 Kontext (edit) layout: tiny-flux's DiT and encoders, input image latents in context",
        source="accel/zoo/families.py FLUX_CONFIG (after diffusers tests/pipelines/flux/"
        "test_pipeline_flux_kontext.py get_dummy_components, diffusers 0.42)",
        config=FLUX_CONFIG,
        builder=build_flux_kontext,
        requires=_requires(
            D + "FluxKontextPipeline",
            D + "FluxTransformer2DModel",
            D + "AutoencoderKL",
            T + "CLIPTextModel",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 32, "_auto_resize": False},
        inputs=("prompt", "image"),
    ),
    Family(
        name="tiny-chroma",
        family="Chroma",
        pipeline_class="ChromaPipeline",
        modality="image",
        description="Chroma layout: FLUX-style DiT with a guidance approximator, T5, 8x VAE, CFG",
        source="after diffusers tests/pipelines/chroma/test_pipeline_chroma.py get_dummy_components (diffusers 0.42)",
        config=CHROMA_CONFIG,
        builder=build_chroma,
        requires=_requires(
            D + "ChromaPipeline", D + "ChromaTransformer2DModel", D + "AutoencoderKL", T + "T5EncoderModel"
        ),
        call_kwargs={"max_sequence_length": 32},
    ),
    Family(
        name="tiny-pixart-sigma",
        family="PixArt-Sigma",
        pipeline_class="PixArtSigmaPipeline",
        modality="image",
        description="PixArt-Sigma layout: adaLN-single DiT, T5, 8x VAE, DPM-Solver, CFG",
        source="after diffusers tests/pipelines/pixart_sigma/test_pixart.py get_dummy_components (diffusers 0.42)",
        config=PIXART_CONFIG,
        builder=build_pixart_sigma,
        requires=_requires(
            D + "PixArtSigmaPipeline",
            D + "PixArtTransformer2DModel",
            D + "AutoencoderKL",
            D + "DPMSolverMultistepScheduler",
            T + "T5EncoderModel",
        ),
        # Resolution binning would resize to the 256/512/1024 aspect-ratio bins.
        call_kwargs={"max_sequence_length": 32, "use_resolution_binning": False},
    ),
    Family(
        name="tiny-pixart-alpha",
        family="PixArt-alpha",
        pipeline_class="PixArtAlphaPipeline",
        modality="image",
        description="PixArt-alpha layout: adaLN-single DiT, T5, 8x VAE, DPM-Solver, CFG",
        source="after diffusers tests/pipelines/pixart_alpha/test_pixart.py get_dummy_components (diffusers 0.42)",
        config=PIXART_CONFIG,
        builder=build_pixart_sigma,
        requires=_requires(
            D + "PixArtAlphaPipeline",
            D + "PixArtTransformer2DModel",
            D + "AutoencoderKL",
            D + "DPMSolverMultistepScheduler",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 32, "use_resolution_binning": False},
    ),
    Family(
        name="tiny-auraflow",
        family="AuraFlow",
        pipeline_class="AuraFlowPipeline",
        modality="image",
        description="AuraFlow layout: MMDiT + single DiT blocks, UMT5, 8x VAE, CFG",
        source="after diffusers tests/pipelines/aura_flow/test_pipeline_aura_flow.py get_dummy_components "
        "(diffusers 0.42)",
        config=AURAFLOW_CONFIG,
        builder=build_auraflow,
        requires=_requires(
            D + "AuraFlowPipeline", D + "AuraFlowTransformer2DModel", D + "AutoencoderKL", T + "UMT5EncoderModel"
        ),
        call_kwargs={"max_sequence_length": 32},
    ),
    Family(
        name="tiny-cogview3plus",
        family="CogView3-Plus",
        pipeline_class="CogView3PlusPipeline",
        modality="image",
        description="CogView3-Plus layout: DiT with size conditioning, T5, 8x VAE, CFG",
        source="after diffusers tests/pipelines/cogview3/test_cogview3plus.py get_dummy_components (diffusers 0.42)",
        config=COGVIEW3_CONFIG,
        builder=build_cogview3plus,
        requires=_requires(
            D + "CogView3PlusPipeline",
            D + "CogView3PlusTransformer2DModel",
            D + "AutoencoderKL",
            D + "CogVideoXDDIMScheduler",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 16},
    ),
)
