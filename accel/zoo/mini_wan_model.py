"""mini-wan's model: its config, the moving-shapes world's word-level tokenizer, the seeded components, the files.

What training starts from and what the committed weights are loaded into: ``MINI_WAN_CONFIG`` (Wan 2.2 A14B's
text-to-video layout, two experts switched at ``boundary_ratio`` of the schedule, at a CPU-trainable size),
the UMT5 tokenizer whose vocabulary is the moving-shapes world's words, ``build_components`` (the untrained,
seeded pipeline components, built by the zoo's tiny-wan22 builder) and the weight files' names
(``COMPONENT_FILES``). Hashing is mini-flux's (``accel.zoo.mini_flux_model``).
"""

from __future__ import annotations

import copy
from typing import Any

from accel.zoo.mini_flux_model import t5_tokenizer
from accel.zoo.pipelines.video_llm import build_wan22
from accel.zoo.video_world import vocabulary

COMPONENT_FILES = {
    "transformer": "transformer.safetensors",
    "transformer_2": "transformer_2.safetensors",
    "vae": "vae.safetensors",
    "text_encoder": "text_encoder.safetensors",
}
# Captions are at most 11 words and a comma; the end-of-sequence token makes 13.
MAX_SEQUENCE_LENGTH = 16

_EXPERT: dict[str, Any] = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 2,
    "attention_head_dim": 32,
    "in_channels": 8,
    "out_channels": 8,
    "text_dim": 64,
    "freq_dim": 64,
    "ffn_dim": 192,
    "num_layers": 4,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 32,
}

# The VAE's whole-video settings: the recipe's last VAE stage and the decoder's fine-tune beside the experts.
_WHOLE_VIDEOS: dict[str, Any] = {
    "steps": 600,
    "batch": 8,
    "crop": 32,
    "lr": 1e-3,
    "kl_weight": 1e-6,
    "warmup": 20,
    "ball_weight": 3.0,
}

MINI_WAN_CONFIG: dict[str, Any] = {
    # Both experts share the layout (as Wan 2.2 A14B's); each is trained on its own part of the schedule.
    "transformer": _EXPERT,
    # Three downsampling levels (8x spatial) and 4x temporal compression, as Wan's VAE: 9x64x64 -> 3x8x8x8.
    "vae": {
        "base_dim": 8,
        "z_dim": 8,
        "dim_mult": [1, 2, 4, 4],
        "num_res_blocks": 1,
        "temperal_downsample": [False, True, True],
    },
    "umt5": {"vocab_size": 64, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4},
    "scheduler": {"shift": 5.0},
    # transformer (high noise) for t >= 750, transformer_2 below. Wan-AI/Wan2.2-T2V-A14B-Diffusers switches at
    # 0.875, which with shift 5 gives the high-noise expert 8 of 20 steps; the committed 0.875 run's low-noise
    # expert alone did as well as both (docs/zoo.md), so the miniature splits at 0.75: 12 steps of 20 and 8.
    "boundary_ratio": 0.75,
    "train": {
        "seed": 0,
        "videos": 3000,
        # The text encoder learns to tag each word's role (ball colour, background, direction): the stand-in
        # for UMT5's language pretraining, then it is frozen.
        "text": {"steps": 800, "batch": 128, "lr": 3e-3, "warmup": 20},
        # The VAE first learns single frames (the causal VAE's image path, a fifth of a clip's cost), then
        # 5-frame clips (a first frame and one 4-frame chunk), all on 32x32 crops: it is convolutional.
        # It starts as a per-frame image VAE (``mini_wan_train.per_frame_init``).
        # The clip stage weighs the ball's pixels 1 + ball_weight (``mini_wan_train.ball_weighting``); the frames stage
        # does not: weighted from the start (4.0), its loss sat at 0.46 for 1400 steps (the plain one falls from
        # step 300).
        "vae_frames": {
            "steps": 2000,
            "batch": 32,
            "crop": 32,
            "lr": 2e-3,
            "kl_weight": 1e-6,
            "warmup": 30,
            "ball_weight": 0.0,
        },
        "vae": {"steps": 600, "batch": 8, "crop": 32, "lr": 1e-3, "kl_weight": 1e-6, "warmup": 20, "ball_weight": 3.0},
        # Then whole 9-frame videos: a 5-frame clip is the first frame and one 4-frame chunk, so the decoder never
        # met the causal cache a full chunk leaves for the next one (frames 5-8: shifted backgrounds, haloed balls).
        # Wave 11's run with this stage: held-out reconstruction PSNR 19.5 -> 21.8 dB, but its round trip of the
        # held-out videos read colour 0.854 and direction 0.833 (wave 10's VAE: 0.896, 0.98; a dark blob on red
        # backgrounds, docs/zoo.md, wave 11), which the decoder's fine-tune below mends.
        "vae_videos": dict(_WHOLE_VIDEOS),
        # Then the decoder alone on whole videos, beside the experts in the core the low-noise expert leaves
        # (``mini_wan_train._train_decoder``: the encoder and so every latent frozen): round trip of the 48 held-out
        # videos colour 0.854 -> 0.917, direction 0.833 -> 0.938, reconstruction PSNR 22.9 dB (docs/zoo.md, wave 13).
        "vae_decoder": dict(_WHOLE_VIDEOS),
        # The ball's latent pixels weigh 1 + ball_weight in the loss (``mini_wan_train.latent_ball_mask``).
        # A key ``<key>_by_expert`` sets ``<key>`` apart for the experts it names (``mini_wan_train.expert_settings``;
        # the learning rate's cosine runs over the expert's own steps). The high-noise expert learns the direction
        # word only after 10000 steps and reads it better the longer it trains (docs/zoo.md, waves 9-10): 22000.
        # The low-noise one keeps the motion it is handed least well at the top of its range (wave 12's
        # ``finish_from_truth``), so its draws lean there (``sigma_power`` 0.5, ``mini_wan_objective.power_draw``),
        # and its 18000 steps fill the core it shares with the decoder's stage while the high-noise one trains
        # (wave 14). ``compile`` trains through torch.compile (``mini_wan_train.training_forward``: 1.5x faster a
        # step side by side), which buys those steps within issue 43's 45 minutes (wave 13).
        "expert": {
            "steps": 18000,
            "steps_by_expert": {"transformer": 22000},
            "sigma_power_by_expert": {"transformer_2": 0.5},
            "compile": True,
            "batch": 64,
            "lr": 1e-3,
            "warmup": 100,
            "ema": 0.995,
            "empty_caption": 0.1,
            "ball_weight": 4.0,
        },
    },
}


def build_components(config: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's components at their seeded initialisation (untrained), with the world's tokenizer."""
    components = build_wan22(
        {
            "transformer": copy.deepcopy(config["transformer"]),
            "vae": config["vae"],
            "umt5": config["umt5"],
            "scheduler": config["scheduler"],
            "boundary_ratio": config["boundary_ratio"],
        }
    )
    components["tokenizer"] = t5_tokenizer(vocabulary())
    return components
