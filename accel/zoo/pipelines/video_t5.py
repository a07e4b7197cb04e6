"""Video families whose text encoder is T5 or UMT5 (the zoo's offline T5 tokenizer)."""

from __future__ import annotations

from typing import Any

from accel.zoo.families import WAN_CONFIG
from accel.zoo.pipelines.base import T5, Family, cls, hf, kl_vae_config, seeded
from accel.zoo.tokenizers import t5_tokenizer

D = "diffusers."
T = "transformers."


def _t5(seed: int, config: dict[str, Any], umt5: bool = False) -> Any:
    if umt5:
        return hf(seed, "UMT5EncoderModel", "UMT5Config", config)
    return hf(seed, "T5EncoderModel", "T5Config", config)


# ---- Wan 2.1 image-to-video ----
WAN_I2V_CONFIG: dict[str, Any] = {
    # in_channels 36: 16 noise + 4 mask + 16 image latents; image_dim: the CLIP vision tower's width.
    "transformer": {**WAN_CONFIG["transformer"], "in_channels": 36, "image_dim": 4},
    "vae": WAN_CONFIG["vae"],
    "umt5": WAN_CONFIG["umt5"],
    "image_encoder": {
        "hidden_size": 4,
        "projection_dim": 4,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": 32,
        "intermediate_size": 16,
        "patch_size": 1,
    },
    "image_processor": {"crop_size": 32, "size": 32},
    "scheduler": WAN_CONFIG["scheduler"],
}


def build_wan_i2v(config: dict[str, Any]) -> dict[str, Any]:
    """Wan 2.1 I2V: the T2V DiT with image cross-attention, CLIP vision encoder, first-frame latents."""
    return {
        "transformer": seeded(0, D + "WanTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLWan", **config["vae"]),
        "text_encoder": _t5(2, config["umt5"], umt5=True),
        "tokenizer": t5_tokenizer(),
        "image_encoder": hf(3, "CLIPVisionModel", "CLIPVisionConfig", config["image_encoder"]),
        "image_processor": cls(T + "CLIPImageProcessor")(**config["image_processor"]),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
        "transformer_2": None,
    }


# ---- CogVideoX ----
COGVIDEOX_CONFIG: dict[str, Any] = {
    "transformer": {
        "num_attention_heads": 4,
        "attention_head_dim": 8,
        "in_channels": 4,
        "out_channels": 4,
        "time_embed_dim": 2,
        "text_embed_dim": 32,
        "num_layers": 2,
        "sample_width": 2,
        "sample_height": 2,
        "sample_frames": 9,
        "patch_size": 2,
        "temporal_compression_ratio": 4,
        "max_text_seq_length": 16,
    },
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["CogVideoXDownBlock3D"] * 4,
        "up_block_types": ["CogVideoXUpBlock3D"] * 4,
        "block_out_channels": [8, 8, 8, 8],
        "latent_channels": 4,
        "layers_per_block": 1,
        "norm_num_groups": 2,
        "temporal_compression_ratio": 4,
    },
    "t5": T5,
}


def build_cogvideox(config: dict[str, Any]) -> dict[str, Any]:
    """CogVideoX expert-adaLN DiT, causal 3D VAE (8x spatial, 4x temporal), T5, DDIM."""
    return {
        "transformer": seeded(0, D + "CogVideoXTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLCogVideoX", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "CogVideoXDDIMScheduler")(),
    }


# ---- LTX-Video ----
LTX_CONFIG: dict[str, Any] = {
    "transformer": {
        "in_channels": 8,
        "out_channels": 8,
        "patch_size": 1,
        "patch_size_t": 1,
        "num_attention_heads": 4,
        "attention_head_dim": 8,
        "cross_attention_dim": 32,
        "num_layers": 2,
        "caption_channels": 32,
    },
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 8,
        "block_out_channels": [8, 8, 8, 8],
        "decoder_block_out_channels": [8, 8, 8, 8],
        "layers_per_block": [1, 1, 1, 1, 1],
        "decoder_layers_per_block": [1, 1, 1, 1, 1],
        "spatio_temporal_scaling": [True, True, False, False],
        "decoder_spatio_temporal_scaling": [True, True, False, False],
        "decoder_inject_noise": [False, False, False, False, False],
        "upsample_residual": [False, False, False, False],
        "upsample_factor": [1, 1, 1, 1],
        "timestep_conditioning": False,
        "patch_size": 1,
        "patch_size_t": 1,
        "encoder_causal": True,
        "decoder_causal": False,
    },
    "t5": T5,
}


def build_ltx(config: dict[str, Any]) -> dict[str, Any]:
    """LTX-Video DiT, LTX causal video VAE, T5."""
    return {
        "transformer": seeded(0, D + "LTXVideoTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLLTXVideo", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- Mochi ----
MOCHI_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 8,
        "num_layers": 2,
        "pooled_projection_dim": 16,
        "in_channels": 12,
        "out_channels": None,
        "qk_norm": "rms_norm",
        "text_embed_dim": 32,
        "time_embed_dim": 4,
        "activation_fn": "swiglu",
        "max_sequence_length": 16,
    },
    "vae": {
        "latent_channels": 12,
        "out_channels": 3,
        "encoder_block_out_channels": [32, 32, 32, 32],
        "decoder_block_out_channels": [32, 32, 32, 32],
        "layers_per_block": [1, 1, 1, 1, 1],
    },
    "t5": T5,
}


def build_mochi(config: dict[str, Any]) -> dict[str, Any]:
    """Mochi asymmetric DiT, Mochi VAE (8x spatial, 6x temporal), T5."""
    return {
        "transformer": seeded(0, D + "MochiTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLMochi", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- Latte ----
LATTE_CONFIG: dict[str, Any] = {
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
    "vae": kl_vae_config(4, scaling_factor=0.18215),
    "t5": T5,
}


def build_latte(config: dict[str, Any]) -> dict[str, Any]:
    """Latte spatial/temporal DiT over a frame-wise 2D VAE, T5, DDIM."""
    return {
        "transformer": seeded(0, D + "LatteTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "DDIMScheduler")(),
    }


# ---- SkyReels-V2 ----
SKYREELS_CONFIG: dict[str, Any] = {
    "transformer": {k: v for k, v in WAN_CONFIG["transformer"].items()},
    "vae": WAN_CONFIG["vae"],
    "umt5": WAN_CONFIG["umt5"],
}


def build_skyreels_v2(config: dict[str, Any]) -> dict[str, Any]:
    """SkyReels-V2: a Wan-style DiT with per-frame timesteps, Wan VAE, UMT5, UniPC flow scheduler."""
    return {
        "transformer": seeded(0, D + "SkyReelsV2Transformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLWan", **config["vae"]),
        "text_encoder": _t5(2, config["umt5"], umt5=True),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "UniPCMultistepScheduler")(
            flow_shift=8.0, use_flow_sigmas=True, prediction_type="flow_prediction"
        ),
    }


# ---- Cosmos-Predict2 text-to-image ----
COSMOS2_CONFIG: dict[str, Any] = {
    "transformer": {
        "in_channels": 16,
        "out_channels": 16,
        "num_attention_heads": 2,
        "attention_head_dim": 16,
        "num_layers": 2,
        "mlp_ratio": 2,
        "text_embed_dim": 32,
        "adaln_lora_dim": 4,
        "max_size": [4, 32, 32],
        "patch_size": [1, 2, 2],
        "rope_scale": [2.0, 1.0, 1.0],
        "concat_padding_mask": True,
        "extra_pos_embed_type": "learnable",
    },
    "vae": WAN_CONFIG["vae"],
    "t5": T5,
}


def build_cosmos2(config: dict[str, Any]) -> dict[str, Any]:
    """Cosmos-Predict2 DiT, Wan VAE, T5; the safety checker is diffusers' own (it needs cosmos_guardrail)."""
    return {
        "transformer": seeded(0, D + "CosmosTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLWan", **config["vae"]),
        "text_encoder": _t5(2, config["t5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(use_karras_sigmas=True),
    }


FAMILIES = (
    Family(
        name="tiny-wan-i2v",
        family="Wan 2.1 image-to-video",
        pipeline_class="WanImageToVideoPipeline",
        modality="video",
        description="Wan 2.1 I2V layout: tiny-wan's DiT with image cross-attention, CLIP vision, input image",
        source="after diffusers tests/pipelines/wan/test_wan_image_to_video.py get_dummy_components (diffusers 0.42; "
        "DiT and VAE as accel/zoo/families.py WAN_CONFIG)",
        config=WAN_I2V_CONFIG,
        builder=build_wan_i2v,
        requires=(
            D + "WanImageToVideoPipeline",
            D + "WanTransformer3DModel",
            D + "AutoencoderKLWan",
            T + "UMT5EncoderModel",
            T + "CLIPVisionModel",
            T + "CLIPImageProcessor",
        ),
        call_kwargs={"max_sequence_length": 32},
        inputs=("prompt", "image"),
    ),
    Family(
        name="tiny-cogvideox",
        family="CogVideoX",
        pipeline_class="CogVideoXPipeline",
        modality="video",
        description="CogVideoX layout: expert-adaLN DiT, causal 3D VAE (8x, 4x temporal), T5, CFG",
        source="after diffusers tests/pipelines/cogvideo/test_cogvideox.py get_dummy_components (diffusers 0.42; "
        "VAE with 4 levels for the 8x downsampling)",
        config=COGVIDEOX_CONFIG,
        builder=build_cogvideox,
        requires=(
            D + "CogVideoXPipeline",
            D + "CogVideoXTransformer3DModel",
            D + "AutoencoderKLCogVideoX",
            D + "CogVideoXDDIMScheduler",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 16},
    ),
    Family(
        name="tiny-ltx-video",
        family="LTX-Video",
        pipeline_class="LTXPipeline",
        modality="video",
        description="LTX-Video layout: video DiT, LTX causal VAE, T5, CFG",
        source="after diffusers tests/pipelines/ltx/test_ltx.py get_dummy_components (diffusers 0.42)",
        config=LTX_CONFIG,
        builder=build_ltx,
        requires=(
            D + "LTXPipeline",
            D + "LTXVideoTransformer3DModel",
            D + "AutoencoderKLLTXVideo",
            T + "T5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 16},
    ),
    Family(
        name="tiny-mochi",
        family="Mochi",
        pipeline_class="MochiPipeline",
        modality="video",
        description="Mochi 1 layout: asymmetric DiT, Mochi VAE (6x temporal), T5, CFG",
        source="after diffusers tests/pipelines/mochi/test_mochi.py get_dummy_components (diffusers 0.42)",
        config=MOCHI_CONFIG,
        builder=build_mochi,
        requires=(D + "MochiPipeline", D + "MochiTransformer3DModel", D + "AutoencoderKLMochi", T + "T5EncoderModel"),
        call_kwargs={"max_sequence_length": 16},
    ),
    Family(
        name="tiny-latte",
        family="Latte",
        pipeline_class="LattePipeline",
        modality="video",
        description="Latte layout: interleaved spatial/temporal DiT on a 2D VAE, T5, CFG",
        source="after diffusers tests/pipelines/latte/test_latte.py get_dummy_components (diffusers 0.42)",
        config=LATTE_CONFIG,
        builder=build_latte,
        requires=(D + "LattePipeline", D + "LatteTransformer3DModel", D + "AutoencoderKL", T + "T5EncoderModel"),
        call_kwargs={"clean_caption": False},
    ),
    Family(
        name="tiny-skyreels-v2",
        family="SkyReels-V2",
        pipeline_class="SkyReelsV2Pipeline",
        modality="video",
        description="SkyReels-V2 layout: Wan-style DiT, Wan VAE, UMT5, UniPC flow scheduler, CFG",
        source="after diffusers tests/pipelines/skyreels_v2/test_skyreels_v2.py get_dummy_components (diffusers 0.42; "
        "as accel/zoo/families.py WAN_CONFIG)",
        config=SKYREELS_CONFIG,
        builder=build_skyreels_v2,
        requires=(
            D + "SkyReelsV2Pipeline",
            D + "SkyReelsV2Transformer3DModel",
            D + "AutoencoderKLWan",
            T + "UMT5EncoderModel",
        ),
        call_kwargs={"max_sequence_length": 32},
    ),
    Family(
        name="tiny-cosmos2",
        family="Cosmos",
        pipeline_class="Cosmos2TextToImagePipeline",
        modality="image",
        description="Cosmos-Predict2 text-to-image layout: Cosmos DiT, Wan VAE, T5, with NVIDIA's guardrail",
        source="after diffusers tests/pipelines/cosmos/test_cosmos2_text2image.py get_dummy_components "
        "(diffusers 0.42)",
        config=COSMOS2_CONFIG,
        builder=build_cosmos2,
        requires=(
            D + "Cosmos2TextToImagePipeline",
            D + "CosmosTransformer3DModel",
            D + "AutoencoderKLWan",
            T + "T5EncoderModel",
            # Cosmos pipelines build CosmosSafetyChecker whenever none is given; it needs this package.
            "cosmos_guardrail",
        ),
        call_kwargs={"max_sequence_length": 16},
    ),
)
