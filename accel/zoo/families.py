"""Builders of the tiny, randomly initialised but real diffusers pipelines.

Shapes follow the production models where it matters to the code paths under test: every VAE keeps
the real 8x spatial downsampling (several tiny levels, not one), so latent shapes scale with the
resolution as in production, and VAE tile sizes are lowered so that tiling engages at 64x64.
Everything else is as small as the architectures allow, so one generation takes well under a second
on 2 CPU cores. Hyper-parameters live in the ``CONFIG`` dicts: they are hashed into the zoo version,
so changing one rebuilds the model.
"""

from __future__ import annotations

from typing import Any

import torch

from accel.zoo.tokenizers import clip_tokenizer, qwen2_tokenizer, t5_tokenizer

FLUX_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 1,
        "in_channels": 16,
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 32,
        "pooled_projection_dim": 32,
        "guidance_embeds": True,
        "axes_dims_rope": [4, 4, 8],
    },
    # Four levels: 8x spatial downsampling, as FLUX's VAE. sample_size 32 makes tiling engage at 64x64.
    "vae": {
        "sample_size": 32,
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [8, 8, 8, 8],
        "layers_per_block": 1,
        "latent_channels": 4,
        "norm_num_groups": 4,
        "use_quant_conv": False,
        "use_post_quant_conv": False,
        "shift_factor": 0.0609,
        "scaling_factor": 1.5035,
    },
    "clip": {
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
        "hidden_size": 32,
        "intermediate_size": 37,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 64,
        "projection_dim": 32,
        "max_position_embeddings": 77,
    },
    "t5": {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2, "num_heads": 4},
    "scheduler": {"shift": 3.0, "use_dynamic_shifting": True},
}


def build_flux(config: dict[str, Any], tokenizer: Any = None, tokenizer_2: Any = None) -> dict[str, Any]:
    """Components of a tiny ``FluxPipeline``: dual/single-stream DiT, CLIP + T5 text encoders (seeded; the
    zoo's offline tokenizers unless ``tokenizer`` / ``tokenizer_2`` are given)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(**config["transformer"])
    torch.manual_seed(1)
    vae = AutoencoderKL(**config["vae"])
    torch.manual_seed(2)
    text_encoder = CLIPTextModel(CLIPTextConfig(**config["clip"])).eval()
    torch.manual_seed(3)
    text_encoder_2 = T5EncoderModel(T5Config(**config["t5"])).eval()
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(**config["scheduler"]),
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer or clip_tokenizer(),
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": tokenizer_2 or t5_tokenizer(),
        "transformer": transformer,
    }


WAN_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": [1, 2, 2],
        "num_attention_heads": 2,
        "attention_head_dim": 12,
        "in_channels": 16,
        "out_channels": 16,
        "text_dim": 32,
        "freq_dim": 32,
        "ffn_dim": 32,
        "num_layers": 2,
        "cross_attn_norm": True,
        "qk_norm": "rms_norm_across_heads",
        "rope_max_seq_len": 32,
    },
    # Three downsampling levels (8x spatial) and 4x temporal compression, as Wan 2.1's VAE.
    "vae": {
        "base_dim": 3,
        "z_dim": 16,
        "dim_mult": [1, 1, 1, 1],
        "num_res_blocks": 1,
        "temperal_downsample": [False, True, True],
    },
    "umt5": {
        "vocab_size": 64,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 37,
        "num_layers": 2,
        "num_heads": 4,
    },
    "scheduler": {"shift": 5.0},
}


def build_wan(config: dict[str, Any]) -> dict[str, Any]:
    """Components of a tiny ``WanPipeline``: video DiT, 3D causal VAE, UMT5 encoder, separate CFG."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    transformer = WanTransformer3DModel(**config["transformer"])
    torch.manual_seed(1)
    vae = AutoencoderKLWan(**config["vae"])
    torch.manual_seed(2)
    text_encoder = UMT5EncoderModel(UMT5Config(**config["umt5"])).eval()
    return {
        "tokenizer": t5_tokenizer(),
        "text_encoder": text_encoder,
        "transformer": transformer,
        "vae": vae,
        "scheduler": FlowMatchEulerDiscreteScheduler(**config["scheduler"]),
    }


QWEN_IMAGE_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 2,
        "in_channels": 16,
        "out_channels": 4,
        "num_layers": 2,
        "attention_head_dim": 16,
        "num_attention_heads": 3,
        "joint_attention_dim": 16,
        "guidance_embeds": False,
        "axes_dims_rope": [8, 4, 4],
    },
    # Three downsampling levels: 8x spatial, as Qwen-Image's VAE.
    "vae": {
        "base_dim": 24,
        "z_dim": 4,
        "dim_mult": [1, 1, 1, 1],
        "num_res_blocks": 1,
        "temperal_downsample": [False, True, True],
        "latents_mean": [0.0] * 4,
        "latents_std": [1.0] * 4,
    },
    # Qwen2.5-VL: the byte-level vocabulary (259 ids) fits in 300; mrope_section sums to head_dim / 2.
    "text_encoder": {
        "text_config": {
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "vocab_size": 300,
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
            "rope_theta": 1000000.0,
        },
        "vision_config": {
            "depth": 2,
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_heads": 2,
            "out_hidden_size": 16,
        },
        "hidden_size": 16,
        "vocab_size": 300,
        "bos_token_id": 257,
        "eos_token_id": 258,
        "pad_token_id": 256,
        "vision_start_token_id": 290,
        "vision_end_token_id": 291,
        "vision_token_id": 292,
        "image_token_id": 293,
        "video_token_id": 294,
    },
    "scheduler": {"use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9},
}


def build_qwen_image(config: dict[str, Any]) -> dict[str, Any]:
    """Components of a tiny ``QwenImagePipeline``: MMDiT, Qwen2.5-VL text encoder, 3D-conv image VAE."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    transformer = QwenImageTransformer2DModel(**config["transformer"])
    torch.manual_seed(1)
    vae = AutoencoderKLQwenImage(**config["vae"])
    torch.manual_seed(2)
    text_encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(**config["text_encoder"])).eval()
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(**config["scheduler"]),
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": qwen2_tokenizer(),
        "transformer": transformer,
    }
