"""Image families with a Qwen vision-language or Qwen3 text encoder: FLUX.2 klein, Kandinsky 5,
Qwen-Image-Edit (the input image goes through the vision tower) and HunyuanImage 2.1 (+ ByT5)."""

from __future__ import annotations

import copy
from typing import Any

from accel.zoo.families import QWEN_IMAGE_CONFIG, build_qwen_image
from accel.zoo.pipelines.base import CLIP_TEXT, Family, cls, hf, kl_vae_config, seeded
from accel.zoo.pipelines.image_llm import QWEN3
from accel.zoo.tokenizers import (
    CHATML_TEMPLATE,
    clip_tokenizer,
    qwen2_chat_tokenizer,
    qwen2_tokenizer,
    qwen_vl_tokenizer,
)

D = "diffusers."
T = "transformers."


def qwen_vl_processor() -> Any:
    """A Qwen2-VL processor: the zoo's byte-level tokenizer with the vision special tokens at the ids
    QWEN_IMAGE_CONFIG's text encoder expects (290-294), and the image processor's defaults (14-px
    patches merged 2x2, at least 56x56 pixels)."""
    tokenizer = qwen_vl_tokenizer()
    return cls(T + "Qwen2VLProcessor")(
        image_processor=cls(T + "Qwen2VLImageProcessor")(),
        tokenizer=tokenizer,
        chat_template=CHATML_TEMPLATE,
    )


# ---- FLUX.2 [klein] ----
FLUX2_KLEIN_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 1,
        "in_channels": 16,  # 4 latent channels x the VAE's 2x2 patchify
        "num_layers": 2,
        "num_single_layers": 2,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 48,  # three Qwen3 hidden states of 16, stacked
        "timestep_guidance_channels": 32,
        "axes_dims_rope": [4, 4, 4, 4],
        "guidance_embeds": False,  # klein is distilled
    },
    "vae": {
        **{k: v for k, v in kl_vae_config(4).items() if k != "sample_size"},
        "use_quant_conv": False,
        "use_post_quant_conv": False,
    },
    "qwen3": {**QWEN3, "num_hidden_layers": 3},
}


def build_flux2_klein(config: dict[str, Any]) -> dict[str, Any]:
    """FLUX.2 DiT (shared modulation, 4-axis RoPE), FLUX.2 VAE with latent batch-norm, Qwen3 encoder."""
    return {
        "transformer": seeded(0, D + "Flux2Transformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLFlux2", **config["vae"]),
        "text_encoder": hf(2, "Qwen3ForCausalLM", "Qwen3Config", config["qwen3"]),
        "tokenizer": qwen2_chat_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(use_dynamic_shifting=True),
        "is_distilled": True,
    }


# ---- Kandinsky 5.0 text-to-image ----
_QWEN_VL_TEXT = copy.deepcopy(QWEN_IMAGE_CONFIG["text_encoder"])
KANDINSKY5_CONFIG: dict[str, Any] = {
    "transformer": {
        "in_visual_dim": 16,
        "in_text_dim": 16,  # Qwen2.5-VL hidden size
        "in_text_dim2": 32,  # CLIP pooled projection
        "time_dim": 16,
        "out_visual_dim": 16,
        "patch_size": [1, 2, 2],
        "model_dim": 16,
        "ff_dim": 32,
        "num_text_blocks": 2,
        "num_visual_blocks": 2,
        "axes_dims": [2, 2, 4],  # head_dim 8: 2 heads
        "visual_cond": False,
    },
    "vae": kl_vae_config(
        16, shift_factor=0.1159, scaling_factor=0.3611, use_quant_conv=False, use_post_quant_conv=False
    ),
    "text_encoder": _QWEN_VL_TEXT,
    "clip": CLIP_TEXT,
    # Kandinsky5Modulation zero-initialises its out_layer (diffusers transformer_kandinsky.py:268-269): every
    # block's shift/scale/gate and the out layer's shift/scale are 0, so no block adds anything and the time
    # embedding, with the CLIP pooled prompt added to it, reaches nothing; the Qwen tokens only enter through the
    # gated cross-attention. A random checkpoint keeps that zero (a trained one does not): the builder redraws
    # those layers with nn.Linear's default init, from this seed.
    "modulation_seed": 4,
}


def build_kandinsky5(config: dict[str, Any]) -> dict[str, Any]:
    """Kandinsky 5.0 T2I: cross-attention DiT, Qwen2.5-VL + CLIP text encoders, FLUX-style VAE."""
    import torch

    transformer = seeded(0, D + "Kandinsky5Transformer3DModel", **config["transformer"])
    torch.manual_seed(config["modulation_seed"])
    for module in transformer.modules():
        if type(module).__name__ == "Kandinsky5Modulation":
            module.out_layer.reset_parameters()
    return {
        "transformer": transformer,
        "vae": seeded(1, D + "AutoencoderKL", **config["vae"]),
        "text_encoder": hf(2, "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig", config["text_encoder"]),
        # The published checkpoint ships a Qwen2-VL processor; Kandinsky 5 only tokenises text with it
        # (images=None), which the tokenizer alone does: the processor needs torchvision.
        "tokenizer": qwen_vl_tokenizer(),
        "text_encoder_2": hf(3, "CLIPTextModel", "CLIPTextConfig", config["clip"]),
        "tokenizer_2": clip_tokenizer(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(shift=1.0),
    }


# ---- Qwen-Image-Edit ----
def build_qwen_image_edit(config: dict[str, Any]) -> dict[str, Any]:
    """tiny-qwen-image's components and a Qwen2-VL processor: the input image is seen by the vision tower."""
    components = build_qwen_image(config)
    components["tokenizer"] = qwen_vl_tokenizer()
    return {**components, "processor": qwen_vl_processor()}


QWEN_IMAGE_EDIT_CONFIG: dict[str, Any] = {
    **QWEN_IMAGE_CONFIG,
    "transformer": {**QWEN_IMAGE_CONFIG["transformer"], "in_channels": 16},
}


# ---- HunyuanImage 2.1 ----
HUNYUAN_IMAGE_CONFIG: dict[str, Any] = {
    "transformer": {
        "in_channels": 4,
        "out_channels": 4,
        "num_attention_heads": 2,
        "attention_head_dim": 8,
        "num_layers": 2,
        "num_single_layers": 2,
        "num_refiner_layers": 1,
        "patch_size": [1, 1],
        "guidance_embeds": False,
        "text_embed_dim": 16,  # Qwen2.5-VL hidden size
        "text_embed_2_dim": 32,  # ByT5 d_model
        "rope_axes_dim": [4, 4],
    },
    # Four levels, 8x (the published VAE is 32x); GroupNorm(32) needs 32 channels at the last level.
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 4,
        "block_out_channels": [32, 32, 32, 32],
        "layers_per_block": 1,
        "spatial_compression_ratio": 8,
        "sample_size": 32,
        "scaling_factor": 0.75289,
    },
    "text_encoder": _QWEN_VL_TEXT,
    # ByT5: 256 bytes + 3 specials + 125 sentinel ids.
    "byt5": {"vocab_size": 384, "d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2, "num_heads": 4},
}


def build_hunyuan_image(config: dict[str, Any]) -> dict[str, Any]:
    """HunyuanImage 2.1 dual/single-stream DiT, Qwen2.5-VL + ByT5 (glyph) encoders, HunyuanImage VAE."""
    return {
        "transformer": seeded(0, D + "HunyuanImageTransformer2DModel", **config["transformer"]),
        "vae": seeded(1, D + "AutoencoderKLHunyuanImage", **config["vae"]),
        "text_encoder": hf(2, "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig", config["text_encoder"]),
        "tokenizer": qwen2_tokenizer(),
        "text_encoder_2": hf(3, "T5EncoderModel", "T5Config", config["byt5"]),
        "tokenizer_2": cls(T + "ByT5Tokenizer")(),
        "scheduler": cls(D + "FlowMatchEulerDiscreteScheduler")(shift=5.0),
        "guider": None,  # the distilled call: one branch, no adaptive projected guidance
        "ocr_guider": None,
    }


FAMILIES = (
    Family(
        name="tiny-flux2-klein",
        family="FLUX.2",
        pipeline_class="Flux2KleinPipeline",
        modality="image",
        description="FLUX.2 [klein] layout: FLUX.2 DiT, FLUX.2 VAE (latent batch-norm, 2x2 patchify), Qwen3",
        source="derived from the diffusers 0.42 Flux2Transformer2DModel / AutoencoderKLFlux2 signatures "
        "(joint_attention_dim = 3 stacked Qwen3 hidden states); VAE with 4 levels for the 8x downsampling",
        config=FLUX2_KLEIN_CONFIG,
        builder=build_flux2_klein,
        requires=(
            D + "Flux2KleinPipeline",
            D + "Flux2Transformer2DModel",
            D + "AutoencoderKLFlux2",
            T + "Qwen3ForCausalLM",
        ),
        call_kwargs={"max_sequence_length": 32, "text_encoder_out_layers": [1, 2, 3]},
    ),
    Family(
        name="tiny-kandinsky5",
        family="Kandinsky 5",
        pipeline_class="Kandinsky5T2IPipeline",
        modality="image",
        description="Kandinsky 5.0 T2I layout: cross-attention DiT, Qwen2.5-VL + CLIP, FLUX-style VAE, CFG",
        source="derived from the diffusers 0.42 Kandinsky5Transformer3DModel signature (head_dim = sum(axes_dims)); "
        "Qwen2.5-VL as accel/zoo/families.py QWEN_IMAGE_CONFIG",
        config=KANDINSKY5_CONFIG,
        builder=build_kandinsky5,
        requires=(
            D + "Kandinsky5T2IPipeline",
            D + "Kandinsky5Transformer3DModel",
            D + "AutoencoderKL",
            T + "Qwen2_5_VLForConditionalGeneration",
            T + "CLIPTextModel",
        ),
        # The byte-level tokenizer spells the system prompt out: 137 tokens after the template crop
        # (prompt_template_encode_start_idx 40) come before the prompt, and the pipeline truncates past
        # max_sequence_length, so 32 kept only the system prompt.
        call_kwargs={"max_sequence_length": 256},
        # Kandinsky 5 resizes any other size to one of its 1024-px resolutions.
        pipeline_attributes={"resolutions": [(32, 32), (64, 64)]},
    ),
    Family(
        name="tiny-qwen-image-edit",
        family="Qwen-Image-Edit",
        pipeline_class="QwenImageEditPipeline",
        modality="image",
        description="Qwen-Image-Edit layout: tiny-qwen-image with the input image through the VL encoder and VAE",
        source="accel/zoo/families.py QWEN_IMAGE_CONFIG (after diffusers tests/pipelines/qwenimage/"
        "test_qwenimage_edit.py get_dummy_components, diffusers 0.42)",
        config=QWEN_IMAGE_EDIT_CONFIG,
        builder=build_qwen_image_edit,
        requires=(
            D + "QwenImageEditPipeline",
            D + "QwenImageTransformer2DModel",
            D + "AutoencoderKLQwenImage",
            T + "Qwen2_5_VLForConditionalGeneration",
            T + "Qwen2VLProcessor",
            # transformers 5's Qwen2VLProcessor checks its video processor, which needs torchvision.
            "torchvision",
        ),
        call_kwargs={"max_sequence_length": 256},  # tiny-qwen-image's byte-level template: see accel/zoo/__init__.py
        inputs=("prompt", "image"),
    ),
    Family(
        name="tiny-hunyuan-image",
        family="HunyuanImage 2.1",
        pipeline_class="HunyuanImagePipeline",
        modality="image",
        description="HunyuanImage 2.1 layout: dual/single-stream DiT, Qwen2.5-VL + ByT5 glyph encoder, 8x VAE",
        source="derived from the diffusers 0.42 class signatures (HunyuanImageTransformer2DModel, "
        "AutoencoderKLHunyuanImage; VAE 8x, not the published 32x); Qwen2.5-VL as accel/zoo/families.py "
        "QWEN_IMAGE_CONFIG",
        config=HUNYUAN_IMAGE_CONFIG,
        builder=build_hunyuan_image,
        requires=(
            D + "HunyuanImagePipeline",
            D + "HunyuanImageTransformer2DModel",
            D + "AutoencoderKLHunyuanImage",
            T + "Qwen2_5_VLForConditionalGeneration",
            T + "T5EncoderModel",
            T + "ByT5Tokenizer",
        ),
        # The published prompt lengths (1000 Qwen tokens, 128 ByT5 bytes) pad every call far past a tiny model.
        # The Qwen one is kept past the template, which the byte-level tokenizer spells out: 138 tokens after
        # the crop (prompt_template_encode_start_idx 34) come before the prompt, and _get_qwen_prompt_embeds
        # truncates at tokenizer_max_length + 34 (at 32 every prompt was cut inside the system prompt).
        pipeline_attributes={"tokenizer_max_length": 256, "tokenizer_2_max_length": 16},
    ),
)
