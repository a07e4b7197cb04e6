"""Video families with an LLM text encoder (HunyuanVideo's Llama) or two denoisers (Wan 2.2)."""

from __future__ import annotations

from typing import Any

from accel.zoo.families import WAN_CONFIG
from accel.zoo.pipelines.base import Family, cls, hf, seeded
from accel.zoo.pipelines.image_llm import LLAMA
from accel.zoo.tokenizers import clip_tokenizer, llama_tokenizer, t5_tokenizer

D = "diffusers."
T = "transformers."

# ---- HunyuanVideo ----
HUNYUAN_VIDEO_CONFIG: dict[str, Any] = {
    "transformer": {
        "in_channels": 4,
        "out_channels": 4,
        "num_attention_heads": 2,
        "attention_head_dim": 10,
        "num_layers": 2,
        "num_single_layers": 2,
        "num_refiner_layers": 1,
        "patch_size": 1,
        "patch_size_t": 1,
        "guidance_embeds": True,
        "text_embed_dim": 16,  # the Llama's hidden size
        "pooled_projection_dim": 8,  # CLIP's hidden size
        "rope_axes_dim": [2, 4, 4],
    },
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 4,
        "down_block_types": ["HunyuanVideoDownBlock3D"] * 4,
        "up_block_types": ["HunyuanVideoUpBlock3D"] * 4,
        "block_out_channels": [8, 8, 8, 8],
        "layers_per_block": 1,
        "act_fn": "silu",
        "norm_num_groups": 4,
        "scaling_factor": 0.476986,
        "spatial_compression_ratio": 8,
        "temporal_compression_ratio": 4,
        "mid_block_add_attention": True,
    },
    # HunyuanVideo takes the Llama's third-to-last hidden state: three layers.
    "llama": {**LLAMA, "num_hidden_layers": 3},
    "clip": {
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
        "hidden_size": 8,
        "intermediate_size": 37,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 64,
        "projection_dim": 32,
        "max_position_embeddings": 77,
        "hidden_act": "gelu",
    },
    "scheduler": {"shift": 7.0},
}


def build_hunyuan_video(config: dict[str, Any]) -> dict[str, Any]:
    """HunyuanVideo dual/single-stream DiT with a token refiner, Llama + CLIP, causal 3D VAE."""
    return {
        "transformer": seeded(0, D + "HunyuanVideoTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLHunyuanVideo", **config["vae"]),
        "text_encoder": hf(2, "LlamaModel", "LlamaConfig", config["llama"]),
        "tokenizer": llama_tokenizer(),
        "text_encoder_2": hf(3, "CLIPTextModel", "CLIPTextConfig", config["clip"]),
        "tokenizer_2": clip_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
    }


# ---- Wan 2.2 text-to-video A14B: two denoisers, switched at boundary_ratio of the schedule ----
WAN22_CONFIG: dict[str, Any] = {
    "transformer": WAN_CONFIG["transformer"],
    "vae": WAN_CONFIG["vae"],
    "umt5": WAN_CONFIG["umt5"],
    "scheduler": WAN_CONFIG["scheduler"],
    "boundary_ratio": 0.875,  # Wan-AI/Wan2.2-T2V-A14B-Diffusers model_index.json
}


def build_wan22(config: dict[str, Any]) -> dict[str, Any]:
    """Wan 2.2 A14B layout: a high-noise ``transformer`` and a low-noise ``transformer_2`` of the same shape."""
    return {
        "transformer": seeded(0, D + "WanTransformer3DModel", **config["transformer"]),
        "transformer_2": seeded(4, D + "WanTransformer3DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLWan", **config["vae"]),
        "text_encoder": hf(2, "UMT5EncoderModel", "UMT5Config", config["umt5"]),
        "tokenizer": t5_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
        "boundary_ratio": config["boundary_ratio"],
    }


FAMILIES = (
    Family(
        name="tiny-hunyuan-video",
        family="HunyuanVideo",
        pipeline_class="HunyuanVideoPipeline",
        modality="video",
        description="HunyuanVideo layout: dual/single-stream DiT, Llama + CLIP text encoders, causal 3D VAE",
        source="after diffusers tests/pipelines/hunyuan_video/test_hunyuan_video.py get_dummy_components "
        "(diffusers 0.42; "
        "VAE with 4 levels for the 8x downsampling)",
        config=HUNYUAN_VIDEO_CONFIG,
        builder=build_hunyuan_video,
        requires=(
            D + "HunyuanVideoPipeline",
            D + "HunyuanVideoTransformer3DModel",
            D + "AutoencoderKLHunyuanVideo",
            T + "LlamaModel",
            T + "CLIPTextModel",
        ),
        # The published template's crop_start (95) counts Llama-3 tokens; the zoo's tokenizer is per character.
        call_kwargs={"max_sequence_length": 16, "prompt_template": {"template": "{}", "crop_start": 0}},
    ),
    Family(
        name="tiny-wan22",
        family="Wan 2.2 text-to-video (two denoisers)",
        pipeline_class="WanPipeline",
        modality="video",
        description="Wan 2.2 A14B layout: high-noise transformer and low-noise transformer_2, switched at 0.875",
        source="accel/zoo/families.py WAN_CONFIG (after diffusers tests/pipelines/wan/test_wan_22.py "
        "get_dummy_components, diffusers 0.42); boundary_ratio from Wan-AI/Wan2.2-T2V-A14B-Diffusers",
        config=WAN22_CONFIG,
        builder=build_wan22,
        requires=(D + "WanPipeline", D + "WanTransformer3DModel", D + "AutoencoderKLWan", T + "UMT5EncoderModel"),
        call_kwargs={"max_sequence_length": 32},
    ),
)
