"""mini-flux's model: its config, the world's word-level tokenizers, the seeded components and the weight files' format.

What training starts from and what the committed weights are loaded into: ``MINI_FLUX_CONFIG`` (FLUX.1's
layout at a CPU-trainable size), the CLIP and T5 tokenizers whose vocabulary is the shapes world's words,
``build_components`` (the untrained, seeded pipeline components) and the names and hashes of the weight
files (``COMPONENT_FILES``, ``file_sha256``, ``combined_sha256``) that training writes and
``accel.zoo.mini_flux`` verifies. Imported through ``accel.zoo.mini_flux``, which re-exports every name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from accel.zoo.families import build_flux
from accel.zoo.world import vocabulary

MANIFEST_FILE = "manifest.json"
LOG_FILE = "train_log.txt"
COMPONENT_FILES = {
    "transformer": "transformer.safetensors",
    "vae": "vae.safetensors",
    "text_encoder": "text_encoder.safetensors",
    "text_encoder_2": "text_encoder_2.safetensors",
}
MAX_SEQUENCE_LENGTH = 32

MINI_FLUX_CONFIG: dict[str, Any] = {
    "transformer": {
        "patch_size": 1,
        "in_channels": 64,
        "num_layers": 2,
        "num_single_layers": 4,
        "attention_head_dim": 32,
        "num_attention_heads": 4,
        "joint_attention_dim": 64,
        "pooled_projection_dim": 64,
        "guidance_embeds": False,
        "axes_dims_rope": [8, 12, 12],
    },
    # Four levels: 8x spatial downsampling (64x64 -> 8x8x16), as FLUX's VAE. sample_size 32 makes the
    # VAE-tiling feature engage at 64x64.
    "vae": {
        "sample_size": 32,
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [16, 32, 64, 64],
        "layers_per_block": 1,
        "latent_channels": 16,
        "norm_num_groups": 8,
        "use_quant_conv": False,
        "use_post_quant_conv": False,
    },
    "clip": {
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 256,
        "projection_dim": 64,
        "max_position_embeddings": 77,
    },
    "t5": {"vocab_size": 128, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4},
    "scheduler": {
        "shift": 3.0,
        "use_dynamic_shifting": True,
        "base_shift": 0.5,
        "max_shift": 1.15,
        "base_image_seq_len": 256,
        "max_image_seq_len": 4096,
    },
    "train": {
        "seed": 0,
        "images": 10000,
        # First the text encoders learn to read a caption (a stand-in for their language pretraining).
        "text": {"steps": 600, "batch": 128, "lr": 3e-3, "warmup": 20},
        "vae": {"steps": 1200, "batch": 32, "crop": 32, "lr": 1e-3, "kl_weight": 1e-6, "warmup": 50},
        "transformer": {
            "steps": 3600,
            "batch": 64,
            "lr": 1e-3,
            "warmup": 100,
            "ema": 0.998,
            "empty_caption": 0.1,
            # Model guidance (Tang et al. 2025) once the model reads captions: one pass then draws what
            # true CFG at scale 1 / (1 - weight) = 2 draws, as FLUX.1-dev's guidance distillation makes its
            # default call need no CFG.
            "model_guidance": {"weight": 0.5, "from_step": 1200},
        },
    },
}


# --------------------------------------------------------------------------------------------------
# Tokenizers: word level, so that each caption word is one token for both encoders.


def clip_tokenizer() -> Any:
    """A CLIP BPE tokenizer whose merges rebuild each whole word of the world's vocabulary."""
    vocab: dict[str, int] = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    merges: list[tuple[str, str]] = []
    for letter in "abcdefghijklmnopqrstuvwxyz,":
        vocab.setdefault(letter, len(vocab))
        vocab.setdefault(letter + "</w>", len(vocab))
    # Merges shared between words can cut a word into other words' pieces: add the merge of the first two
    # pieces of every word that is not yet one token, until every word is.
    for _ in range(200):
        tokenizer = _clip_bpe(vocab, merges)
        split = [pieces for word in vocabulary() if len(pieces := tokenizer.tokenize(word)) > 1]
        if not split:
            return tokenizer
        for pieces in split:
            merge = (pieces[0], pieces[1])
            if merge not in merges:
                merges.append(merge)
                vocab.setdefault(pieces[0] + pieces[1], len(vocab))
    raise RuntimeError("mini-flux CLIP merges did not converge")


def _clip_bpe(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Any:
    from transformers import CLIPTokenizer

    return CLIPTokenizer(
        vocab=dict(vocab),
        merges=list(merges),  # type: ignore[arg-type]  # transformers annotates merges as list[str]; it takes pairs
        model_max_length=77,
        unk_token="<|endoftext|>",
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def t5_tokenizer(words: list[str] | None = None) -> Any:
    """A T5 (unigram) tokenizer with one piece per word of ``words`` (default: the shapes world's vocabulary),
    letters as a fallback. mini-wan passes the moving-shapes world's words."""
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [(letter, -2.0) for letter in "abcdefghijklmnopqrstuvwxyz"]
    pieces += [("," if word == "," else "▁" + word, -1.0) for word in (vocabulary() if words is None else words)]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=128)


# --------------------------------------------------------------------------------------------------
# Components


def build_components(config: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's components at their seeded initialisation (untrained), with the world's tokenizers."""
    return build_flux(config, tokenizer=clip_tokenizer(), tokenizer_2=t5_tokenizer())


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def combined_sha256(files: dict[str, str]) -> str:
    """The weights' combined hash, as training writes it to the manifest: SHA-256 of the sorted per-file JSON."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
