"""Image families whose text encoder is a decoder LLM (Gemma 2, GLM, Qwen3, Llama) or BERT.

The LLMs are two-layer models on the zoo's offline tokenizers (``accel.zoo.tokenizers``): ids only
index the embedding tables, so vocabularies are sized to the tokenizers, not to the published models.
"""

from __future__ import annotations

from typing import Any

from accel.zoo.pipelines.base import CLIP_TEXT, T5, Family, cls, hf, kl_vae_config, seeded
from accel.zoo.tokenizers import (
    clip_tokenizer,
    gemma_tokenizer,
    glm_tokenizer,
    llama_tokenizer,
    qwen2_chat_tokenizer,
    t5_tokenizer,
)

D = "diffusers."
T = "transformers."

# Two-layer Gemma 2 on the zoo Gemma tokenizer (316 ids).
GEMMA2: dict[str, Any] = {
    "head_dim": 4,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "sliding_window": 8,
    "vocab_size": 320,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}
# Two-layer Qwen3 on the zoo byte-level Qwen tokenizer (259 ids).
QWEN3: dict[str, Any] = {
    "hidden_size": 16,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 300,
    "max_position_embeddings": 512,
    "pad_token_id": 256,
}
# Two-layer Llama on the zoo Llama tokenizer (313 ids).
LLAMA: dict[str, Any] = {
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "hidden_size": 16,
    "intermediate_size": 37,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 320,
    "hidden_act": "silu",
}


# ---- Sana ----
SANA_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 1,
        "in_channels": 4,
        "out_channels": 4,
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 4,
        "num_cross_attention_heads": 2,
        "cross_attention_head_dim": 4,
        "cross_attention_dim": 8,
        "caption_channels": 8,
        "sample_size": 32,
    },
    # DC-AE with three levels (4x; the published one is 32x with 32 channels).
    "vae": {
        "in_channels": 3,
        "latent_channels": 4,
        "attention_head_dim": 2,
        "encoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock"],
        "decoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock"],
        "encoder_block_out_channels": [8, 8, 8],
        "decoder_block_out_channels": [8, 8, 8],
        "encoder_qkv_multiscales": [[], [], [5]],
        "decoder_qkv_multiscales": [[], [], [5]],
        "encoder_layers_per_block": [1, 1, 1],
        "decoder_layers_per_block": [1, 1, 1],
        "downsample_block_type": "conv",
        "upsample_block_type": "interpolate",
        "decoder_norm_types": "rms_norm",
        "decoder_act_fns": "silu",
        "scaling_factor": 0.41407,
    },
    "gemma2": GEMMA2,
    "scheduler": {"shift": 7.0},
}


def build_sana(config: dict[str, Any]) -> dict[str, Any]:
    """Sana linear-attention DiT, DC-AE, Gemma 2 encoder, flow-matching Euler."""
    return {
        "transformer": seeded(0, D + "SanaTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderDC", **config["vae"]),
        "text_encoder": hf(2, "Gemma2Model", "Gemma2Config", config["gemma2"]),
        "tokenizer": gemma_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
    }


# ---- Lumina Image 2.0 ----
LUMINA2_CONFIG: dict[str, Any] = {
    "transformer": {
        "sample_size": 4,
        "patch_size": 2,
        "in_channels": 4,
        "hidden_size": 8,
        "num_layers": 2,
        "num_attention_heads": 1,
        "num_kv_heads": 1,
        "multiple_of": 16,
        "ffn_dim_multiplier": None,
        "norm_eps": 1e-5,
        "scaling_factor": 1.0,
        "axes_dim_rope": [4, 2, 2],
        "cap_feat_dim": 8,
    },
    "vae": kl_vae_config(
        4, shift_factor=0.0609, scaling_factor=1.5035, use_quant_conv=False, use_post_quant_conv=False
    ),
    "gemma2": GEMMA2,
}


def build_lumina2(config: dict[str, Any]) -> dict[str, Any]:
    """Lumina-Image 2.0 unified next-DiT, Gemma 2 encoder, 8x VAE."""
    return {
        "transformer": seeded(0, D + "Lumina2Transformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "Gemma2Model", "Gemma2Config", config["gemma2"]),
        "tokenizer": gemma_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- CogView4 ----
COGVIEW4_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 2,
        "in_channels": 4,
        "num_layers": 2,
        "attention_head_dim": 4,
        "num_attention_heads": 4,
        "out_channels": 4,
        "text_embed_dim": 32,
        "time_embed_dim": 8,
        "condition_dim": 4,
    },
    "vae": kl_vae_config(4, scaling_factor=1.0),
    "glm": {
        "hidden_size": 32,
        "intermediate_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 8,
        "vocab_size": 300,
        "pad_token_id": 256,
    },
    "tokenizer": "glm_tokenizer",  # accel.zoo.tokenizers: with GLM-4's leading prefix token
    "scheduler": {
        "base_shift": 0.25,
        "max_shift": 0.75,
        "base_image_seq_len": 256,
        "use_dynamic_shifting": True,
        "time_shift_type": "linear",
    },
}

# The tokenizer a config names (by its function's name in accel.zoo.tokenizers).
_TOKENIZERS = {tokenizer.__name__: tokenizer for tokenizer in (glm_tokenizer,)}


def build_cogview4(config: dict[str, Any]) -> dict[str, Any]:
    """CogView4 DiT, GLM encoder (the zoo's byte-level tokenizer for GLM-4's), 8x VAE."""
    return {
        "transformer": seeded(0, D + "CogView4Transformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "GlmModel", "GlmConfig", config["glm"]),
        "tokenizer": _TOKENIZERS[config["tokenizer"]](),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(**config["scheduler"]),
    }


# ---- Z-Image ----
ZIMAGE_CONFIG: dict[str, Any] = {
    "transformer": {
        "all_patch_size": [2],
        "all_f_patch_size": [1],
        "in_channels": 16,
        "dim": 32,
        "n_layers": 2,
        "n_refiner_layers": 2,
        "n_heads": 2,
        "n_kv_heads": 2,
        "norm_eps": 1e-5,
        "qk_norm": True,
        "cap_feat_dim": 16,
        "rope_theta": 256.0,
        "t_scale": 1000.0,
        "axes_dims": [8, 4, 4],
        "axes_lens": [256, 32, 32],
    },
    "vae": kl_vae_config(
        16, shift_factor=0.1159, scaling_factor=0.3611, use_quant_conv=False, use_post_quant_conv=False
    ),
    "qwen3": QWEN3,
}


def build_z_image(config: dict[str, Any]) -> dict[str, Any]:
    """Z-Image single-stream DiT, Qwen3 encoder with its chat template, FLUX-style 16-channel VAE."""
    return {
        "transformer": seeded(0, D + "ZImageTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "Qwen3Model", "Qwen3Config", config["qwen3"]),
        "tokenizer": qwen2_chat_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- HiDream-I1 ----
HIDREAM_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 2,
        "in_channels": 4,
        "out_channels": 4,
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 4,
        "caption_channels": [32, 16],  # T5 d_model, Llama hidden size
        "text_emb_dim": 64,  # the two CLIP projections
        "num_routed_experts": 4,
        "num_activated_experts": 2,
        "axes_dims_rope": [4, 2, 2],
        "max_resolution": [32, 32],
        # One Llama hidden state per block, double-stream blocks then single-stream ones (the tiny Llama has 2).
        "llama_layers": [0, 1, 0, 1],
    },
    "vae": kl_vae_config(4, shift_factor=0.0609, scaling_factor=1.5035),
    "clip": CLIP_TEXT,
    "t5": T5,
    "llama": LLAMA,
}


def build_hidream(config: dict[str, Any]) -> dict[str, Any]:
    """HiDream-I1 sparse-MoE DiT, two CLIP-with-projection, T5 and Llama encoders."""
    return {
        "transformer": seeded(0, D + "HiDreamImageTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "CLIPTextModelWithProjection", "CLIPTextConfig", config["clip"]),
        "text_encoder_2": hf(3, "CLIPTextModelWithProjection", "CLIPTextConfig", config["clip"]),
        "text_encoder_3": hf(4, "T5EncoderModel", "T5Config", config["t5"]),
        "text_encoder_4": hf(5, "LlamaForCausalLM", "LlamaConfig", config["llama"]),
        "tokenizer": clip_tokenizer(),
        "tokenizer_2": clip_tokenizer(),
        "tokenizer_3": t5_tokenizer(),
        "tokenizer_4": llama_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(),
    }


# ---- Hunyuan-DiT ----
HUNYUANDIT_CONFIG: dict[str, Any] = {
    "transformer": {
        "sample_size": 16,
        "num_layers": 2,
        "patch_size": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 3,
        "in_channels": 4,
        "cross_attention_dim": 32,
        "cross_attention_dim_t5": 32,
        "pooled_projection_dim": 16,
        "hidden_size": 24,
        "activation_fn": "gelu-approximate",
    },
    "vae": kl_vae_config(4, scaling_factor=0.13025),
    "bert": {
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 128,
    },
    "t5": T5,
}


def _bert_tokenizer() -> Any:
    import string

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *string.digits]
    return cls(T + "BertTokenizer")(vocab={w: i for i, w in enumerate(words)}, model_max_length=77)


def build_hunyuandit(config: dict[str, Any]) -> dict[str, Any]:
    """Hunyuan-DiT with a BERT (CLIP-style) and a T5 encoder, DDPM scheduler."""
    return {
        "transformer": seeded(0, D + "HunyuanDiT2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "BertModel", "BertConfig", config["bert"]),
        "tokenizer": _bert_tokenizer(),
        "text_encoder_2": hf(3, "T5EncoderModel", "T5Config", config["t5"]),
        "tokenizer_2": t5_tokenizer(),
        "scheduler": cls(D + "DDPMScheduler")(),
        "safety_checker": None,
        "feature_extractor": None,
        "requires_safety_checker": False,
    }


FAMILIES = (
    Family(
        name="tiny-sana",
        family="Sana",
        pipeline_class="SanaPipeline",
        modality="image",
        description="Sana layout: linear-attention DiT, DC-AE, Gemma 2 text encoder, CFG",
        source="after diffusers tests/pipelines/sana/test_sana.py get_dummy_components "
        "(diffusers 0.42; DC-AE 3 levels)",
        config=SANA_CONFIG,
        builder=build_sana,
        requires=(D + "SanaPipeline", D + "SanaTransformer2DModel", D + "AutoencoderDC", T + "Gemma2Model"),
        # The published complex_human_instruction prepends ~300 words, far past a tiny sequence.
        call_kwargs={"max_sequence_length": 16, "complex_human_instruction": None, "use_resolution_binning": False},
    ),
    Family(
        name="tiny-lumina2",
        family="Lumina-Image 2.0",
        pipeline_class="Lumina2Pipeline",
        modality="image",
        description="Lumina-Image 2.0 layout: unified next-DiT, Gemma 2 text encoder, 8x VAE, CFG",
        source="after diffusers tests/pipelines/lumina2/test_pipeline_lumina2.py get_dummy_components (diffusers 0.42)",
        config=LUMINA2_CONFIG,
        builder=build_lumina2,
        requires=(D + "Lumina2Pipeline", D + "Lumina2Transformer2DModel", D + "AutoencoderKL", T + "Gemma2Model"),
        # Its system prompt, byte by byte, filled 16 tokens (and 128): every prompt gave the same image.
        call_kwargs={"max_sequence_length": 256},
    ),
    Family(
        name="tiny-cogview4",
        family="CogView4",
        pipeline_class="CogView4Pipeline",
        modality="image",
        description="CogView4 layout: DiT with size conditioning, GLM text encoder, 8x VAE, CFG",
        source="after diffusers tests/pipelines/cogview4/test_cogview4.py get_dummy_components (diffusers 0.42)",
        config=COGVIEW4_CONFIG,
        builder=build_cogview4,
        requires=(D + "CogView4Pipeline", D + "CogView4Transformer2DModel", D + "AutoencoderKL", T + "GlmModel"),
        call_kwargs={"max_sequence_length": 16},
    ),
    Family(
        name="tiny-z-image",
        family="Z-Image",
        pipeline_class="ZImagePipeline",
        modality="image",
        description="Z-Image layout: single-stream DiT with refiners, Qwen3 text encoder (chat template), 8x VAE",
        source="after diffusers tests/pipelines/z_image/test_z_image.py get_dummy_components (diffusers 0.42)",
        config=ZIMAGE_CONFIG,
        builder=build_z_image,
        requires=(D + "ZImagePipeline", D + "ZImageTransformer2DModel", D + "AutoencoderKL", T + "Qwen3Model"),
        call_kwargs={"max_sequence_length": 32},
    ),
    Family(
        name="tiny-hidream",
        family="HiDream-I1",
        pipeline_class="HiDreamImagePipeline",
        modality="image",
        description="HiDream-I1 layout: sparse-MoE DiT, CLIP x2 + T5 + Llama text encoders, 8x VAE, CFG",
        source="after diffusers tests/pipelines/hidream_image/test_pipeline_hidream.py get_dummy_components "
        "(diffusers 0.42)",
        config=HIDREAM_CONFIG,
        builder=build_hidream,
        requires=(
            D + "HiDreamImagePipeline",
            D + "HiDreamImageTransformer2DModel",
            D + "AutoencoderKL",
            T + "CLIPTextModelWithProjection",
            T + "T5EncoderModel",
            T + "LlamaForCausalLM",
        ),
        call_kwargs={"max_sequence_length": 16},
        # HiDream rescales every request to the area of (default_sample_size x 8)^2, 1024^2 as published.
        pipeline_attributes={"default_sample_size": 4},
    ),
    Family(
        name="tiny-hunyuandit",
        family="Hunyuan-DiT",
        pipeline_class="HunyuanDiTPipeline",
        modality="image",
        description="Hunyuan-DiT layout: DiT with BERT + T5 text encoders, 8x VAE, DDPM, CFG",
        source="after diffusers tests/pipelines/hunyuan_dit/test_hunyuan_dit.py get_dummy_components (diffusers 0.42)",
        config=HUNYUANDIT_CONFIG,
        builder=build_hunyuandit,
        requires=(D + "HunyuanDiTPipeline", D + "HunyuanDiT2DModel", T + "BertModel", T + "T5EncoderModel"),
        call_kwargs={"use_resolution_binning": False},
    ),
)
