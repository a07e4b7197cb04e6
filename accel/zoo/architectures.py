"""Published architectures of real diffusion models, kept as data with the source of every number.

``synthetic:<name>`` sources (``accel.zoo.synthetic``) build the real diffusers pipeline classes from
these configs with random weights; the roofline (``accel.measure.roofline``) counts their FLOPs on the
meta device. Every config below is copied from the model's published ``config.json`` files on the
Hugging Face hub (the file is named in ``source``); keys the diffusers/transformers classes default to
the same value are left out. ``depth_keys`` name the block counts a ``depth`` option scales, so a CPU
builds the same widths with fewer blocks; ``width_keys`` the channels and head counts a ``width`` option
divides (fast CPU smoke tests of the code path only: their FLOPs and speed are not the model's). Token
ids of the text encoders are the zoo tokenizers' (offline, tiny vocabularies): ids only index the
embedding tables, whose sizes stay the published ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Wan 2.1's VAE latent statistics (also Qwen-Image's VAE): vae/config.json latents_mean / latents_std.
WAN_LATENTS_MEAN = [
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
]  # fmt: skip
WAN_LATENTS_STD = [
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
]  # fmt: skip


@dataclass(frozen=True)
class Component:
    """One pipeline component: its class, its published config and where the numbers come from."""

    cls: str  # "diffusers.X" or "transformers.X"
    config: dict[str, Any]
    source: str
    depth_keys: tuple[str, ...] = ()  # dotted config keys holding block counts
    width_keys: tuple[str, ...] = ()  # dotted config keys holding widths (channels, heads): ``width`` divides them


@dataclass(frozen=True)
class Architecture:
    """A real pipeline's layout: components, tokenizers, default workload and how it calls its denoiser."""

    name: str
    pipeline_class: str
    modality: str  # image | video
    hub_id: str
    components: dict[str, Component]
    tokenizers: dict[str, str]  # pipeline attribute -> zoo tokenizer builder (accel.zoo.tokenizers)
    text_tokens: int  # denoiser text sequence length of the published default (max_sequence_length)
    denoiser_calls_per_step: int  # 2 with classifier-free guidance
    vae_scale: int  # spatial downsampling of the VAE
    patch: int  # latent patchify (2x2 -> 2)
    temporal_scale: int = 1  # video VAEs: frames compression
    default_workload: dict[str, Any] = field(default_factory=dict)
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    @property
    def resolution_factor(self) -> int:
        """Height and width must be multiples of this."""
        return self.vae_scale * self.patch


FLUX_1_DEV = Architecture(
    name="flux.1-dev",
    pipeline_class="FluxPipeline",
    modality="image",
    hub_id="black-forest-labs/FLUX.1-dev",
    components={
        "transformer": Component(
            "diffusers.FluxTransformer2DModel",
            {
                "patch_size": 1,
                "in_channels": 64,
                "num_layers": 19,
                "num_single_layers": 38,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 4096,
                "pooled_projection_dim": 768,
                "guidance_embeds": True,
                "axes_dims_rope": [16, 56, 56],
            },
            "black-forest-labs/FLUX.1-dev transformer/config.json",
            ("num_layers", "num_single_layers"),
            ("num_attention_heads", "joint_attention_dim", "pooled_projection_dim"),
        ),
        "text_encoder": Component(
            "transformers.CLIPTextModel",
            {
                "hidden_size": 768,
                "intermediate_size": 3072,
                "num_attention_heads": 12,
                "num_hidden_layers": 12,
                "vocab_size": 49408,
                "max_position_embeddings": 77,
                "projection_dim": 768,
                "hidden_act": "quick_gelu",
                "bos_token_id": 0,
                "eos_token_id": 1,  # the zoo CLIP tokenizer's EOS (the checkpoint's is 2)
                "pad_token_id": 1,
            },
            "black-forest-labs/FLUX.1-dev text_encoder/config.json (openai/clip-vit-large-patch14 text tower)",
            ("num_hidden_layers",),
            ("hidden_size", "intermediate_size", "num_attention_heads", "projection_dim"),
        ),
        "text_encoder_2": Component(
            "transformers.T5EncoderModel",
            {
                "d_model": 4096,
                "d_ff": 10240,
                "d_kv": 64,
                "num_heads": 64,
                "num_layers": 24,
                "vocab_size": 32128,
                "feed_forward_proj": "gated-gelu",
                "relative_attention_num_buckets": 32,
                "relative_attention_max_distance": 128,
                "layer_norm_epsilon": 1e-6,
                "tie_word_embeddings": False,
            },
            "black-forest-labs/FLUX.1-dev text_encoder_2/config.json (google/t5-v1_1-xxl encoder)",
            ("num_layers",),
            ("d_model", "d_ff", "num_heads"),
        ),
        "vae": Component(
            "diffusers.AutoencoderKL",
            {
                "in_channels": 3,
                "out_channels": 3,
                "latent_channels": 16,
                "block_out_channels": [128, 256, 512, 512],
                "layers_per_block": 2,
                "down_block_types": ["DownEncoderBlock2D"] * 4,
                "up_block_types": ["UpDecoderBlock2D"] * 4,
                "norm_num_groups": 32,
                "sample_size": 1024,
                "scaling_factor": 0.3611,
                "shift_factor": 0.1159,
                "use_quant_conv": False,
                "use_post_quant_conv": False,
            },
            "black-forest-labs/FLUX.1-dev vae/config.json",
            (),
            ("block_out_channels", "norm_num_groups"),
        ),
        "scheduler": Component(
            "diffusers.FlowMatchEulerDiscreteScheduler",
            {
                "base_image_seq_len": 256,
                "base_shift": 0.5,
                "max_image_seq_len": 4096,
                "max_shift": 1.15,
                "num_train_timesteps": 1000,
                "shift": 3.0,
                "use_dynamic_shifting": True,
            },
            "black-forest-labs/FLUX.1-dev scheduler/scheduler_config.json",
        ),
    },
    tokenizers={"tokenizer": "clip", "tokenizer_2": "t5"},
    text_tokens=512,
    denoiser_calls_per_step=1,  # guidance-distilled: guidance is an embedding, no second branch
    vae_scale=8,
    patch=2,
    default_workload={"height": 1024, "width": 1024, "steps": 28, "guidance_scale": 3.5},
    call_kwargs={"max_sequence_length": 512},
)

QWEN_IMAGE = Architecture(
    name="qwen-image",
    pipeline_class="QwenImagePipeline",
    modality="image",
    hub_id="Qwen/Qwen-Image",
    components={
        "transformer": Component(
            "diffusers.QwenImageTransformer2DModel",
            {
                "patch_size": 2,
                "in_channels": 64,
                "out_channels": 16,
                "num_layers": 60,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 3584,
                "guidance_embeds": False,
                "axes_dims_rope": [16, 56, 56],
            },
            "Qwen/Qwen-Image transformer/config.json",
            ("num_layers",),
            ("num_attention_heads", "joint_attention_dim"),
        ),
        "text_encoder": Component(
            "transformers.Qwen2_5_VLForConditionalGeneration",
            {
                "text_config": {
                    "hidden_size": 3584,
                    "intermediate_size": 18944,
                    "num_hidden_layers": 28,
                    "num_attention_heads": 28,
                    "num_key_value_heads": 4,
                    "vocab_size": 152064,
                    "max_position_embeddings": 128000,
                    "rms_norm_eps": 1e-6,
                    "rope_theta": 1000000.0,
                    "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default", "type": "default"},
                    "tie_word_embeddings": False,
                },
                "vision_config": {
                    "depth": 32,
                    "hidden_size": 1280,
                    "intermediate_size": 3420,
                    "num_heads": 16,
                    "out_hidden_size": 3584,
                    "patch_size": 14,
                    "spatial_merge_size": 2,
                    "temporal_patch_size": 2,
                    "window_size": 112,
                    "fullatt_block_indexes": [7, 15, 23, 31],
                },
                "hidden_size": 3584,
                "vocab_size": 152064,
                "tie_word_embeddings": False,
                # The zoo byte-level tokenizer's special ids (the checkpoint's are 151643...151656).
                "bos_token_id": 257,
                "eos_token_id": 258,
                "pad_token_id": 256,
                "vision_start_token_id": 290,
                "vision_end_token_id": 291,
                "vision_token_id": 292,
                "image_token_id": 293,
                "video_token_id": 294,
            },
            "Qwen/Qwen-Image text_encoder/config.json (Qwen2.5-VL-7B-Instruct)",
            ("text_config.num_hidden_layers", "vision_config.depth"),
            (
                "text_config.hidden_size",
                "text_config.intermediate_size",
                "text_config.num_attention_heads",
                "text_config.num_key_value_heads",
                "hidden_size",
                "vision_config.hidden_size",
                "vision_config.intermediate_size",
                "vision_config.num_heads",
                "vision_config.out_hidden_size",
            ),
        ),
        "vae": Component(
            "diffusers.AutoencoderKLQwenImage",
            {
                "base_dim": 96,
                "z_dim": 16,
                "dim_mult": [1, 2, 4, 4],
                "num_res_blocks": 2,
                "attn_scales": [],
                "temperal_downsample": [False, True, True],
                "latents_mean": WAN_LATENTS_MEAN,
                "latents_std": WAN_LATENTS_STD,
            },
            "Qwen/Qwen-Image vae/config.json",
            (),
            ("base_dim",),
        ),
        "scheduler": Component(
            "diffusers.FlowMatchEulerDiscreteScheduler",
            {
                "base_image_seq_len": 256,
                "base_shift": 0.5,
                "max_image_seq_len": 8192,
                "max_shift": 0.9,
                "num_train_timesteps": 1000,
                "shift": 1.0,
                "shift_terminal": 0.02,
                "time_shift_type": "exponential",
                "use_dynamic_shifting": True,
            },
            "Qwen/Qwen-Image scheduler/scheduler_config.json",
        ),
    },
    tokenizers={"tokenizer": "qwen2"},
    text_tokens=256,  # Qwen-Image does not pad: the prompt's own length after the chat template (assumed)
    denoiser_calls_per_step=2,  # true CFG (true_cfg_scale 4.0 with a negative prompt)
    vae_scale=8,
    patch=2,
    default_workload={"height": 1328, "width": 1328, "steps": 50, "guidance_scale": 4.0},
    call_kwargs={"max_sequence_length": 512},
    notes="text_tokens is an assumed prompt length: Qwen-Image encodes the prompt without padding",
)

WAN_2_1_T2V_1_3B = Architecture(
    name="wan2.1-t2v-1.3b",
    pipeline_class="WanPipeline",
    modality="video",
    hub_id="Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
    components={
        "transformer": Component(
            "diffusers.WanTransformer3DModel",
            {
                "patch_size": [1, 2, 2],
                "num_attention_heads": 12,
                "attention_head_dim": 128,
                "in_channels": 16,
                "out_channels": 16,
                "text_dim": 4096,
                "freq_dim": 256,
                "ffn_dim": 8960,
                "num_layers": 30,
                "cross_attn_norm": True,
                "qk_norm": "rms_norm_across_heads",
                "eps": 1e-6,
                "rope_max_seq_len": 1024,
            },
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers transformer/config.json",
            ("num_layers",),
            ("num_attention_heads", "ffn_dim", "text_dim"),
        ),
        "text_encoder": Component(
            "transformers.UMT5EncoderModel",
            {
                "d_model": 4096,
                "d_ff": 10240,
                "d_kv": 64,
                "num_heads": 64,
                "num_layers": 24,
                "vocab_size": 256384,
                "feed_forward_proj": "gated-gelu",
                "relative_attention_num_buckets": 32,
                "relative_attention_max_distance": 128,
                "layer_norm_epsilon": 1e-6,
                "tie_word_embeddings": False,
            },
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers text_encoder/config.json (google/umt5-xxl encoder)",
            ("num_layers",),
            ("d_model", "d_ff", "num_heads"),
        ),
        "vae": Component(
            "diffusers.AutoencoderKLWan",
            {
                "base_dim": 96,
                "z_dim": 16,
                "dim_mult": [1, 2, 4, 4],
                "num_res_blocks": 2,
                "attn_scales": [],
                "temperal_downsample": [False, True, True],
                "latents_mean": WAN_LATENTS_MEAN,
                "latents_std": WAN_LATENTS_STD,
            },
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers vae/config.json",
            (),
            ("base_dim",),
        ),
        "scheduler": Component(
            "diffusers.UniPCMultistepScheduler",
            {
                "num_train_timesteps": 1000,
                "prediction_type": "flow_prediction",
                "use_flow_sigmas": True,
                "flow_shift": 3.0,
            },
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers scheduler/scheduler_config.json (flow_shift 3.0 for 480p)",
        ),
    },
    tokenizers={"tokenizer": "t5"},
    text_tokens=512,
    denoiser_calls_per_step=2,  # classifier-free guidance (guidance_scale 5.0)
    vae_scale=8,
    patch=2,
    temporal_scale=4,
    default_workload={"height": 480, "width": 832, "num_frames": 81, "steps": 50, "guidance_scale": 5.0},
    call_kwargs={"max_sequence_length": 512},
)

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (FLUX_1_DEV, QWEN_IMAGE, WAN_2_1_T2V_1_3B)}
