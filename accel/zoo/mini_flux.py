"""mini-flux: a real ``FluxPipeline`` whose encoders, VAE and transformer the project trains on the shapes world.

The layout is FLUX.1's (dual/single-stream DiT over 2x2-packed latents, AutoencoderKL with 8x spatial
downsampling, CLIP + T5 text encoders, the flow-match Euler scheduler), at a size that trains on 2 CPU
cores in about an hour. First the text encoders learn to name a caption's attributes (the stand-in for
their language pretraining), then the VAE learns reconstruction, then the transformer FLUX's objective
(rectified flow: it predicts ``noise - x0`` at a logit-normal time ``t``) with the encoders frozen.

The trained weights are committed under ``accel/zoo/weights/mini-flux`` (safetensors) with a manifest:
the config, the world version, the final losses, each file's SHA-256 and their combined hash.
``build_mini_flux`` assembles the pipeline from them without training and refuses weights whose hashes
(each file's, and the combined one recomputed from the files) do not match. Beyond the weight files it reads
only the manifest's ``BUILD_SETTINGS`` (the VAE's latent scaling and shift), which the zoo fingerprints with
the files' hash (``weights_fingerprint``): a changed one builds a new zoo directory.

The module is split by concern: ``accel.zoo.mini_flux_model`` (config, tokenizers, seeded components, the
weight files' format), ``accel.zoo.mini_flux_loop`` (thread picking, log, schedule, step loop),
``accel.zoo.mini_flux_objective`` (noising, velocity target, model guidance, EMA) and
``accel.zoo.mini_flux_train`` (data, stages, ``train``); this module verifies and loads the
committed weights and re-exports the public names of the others, so ``from accel.zoo import mini_flux``
gives them all.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import accel.zoo.trained_weights as trained_weights
from accel.errors import ConfigError
from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog
from accel.zoo.mini_flux_model import (
    COMPONENT_FILES,
    LOG_FILE,
    MANIFEST_FILE,
    MAX_SEQUENCE_LENGTH,
    MINI_FLUX_CONFIG,
    build_components,
    clip_tokenizer,
    combined_sha256,
    file_sha256,
    t5_tokenizer,
)
from accel.zoo.mini_flux_objective import ema_decay, ema_update, model_guidance_target, noised_sample, velocity_target
from accel.zoo.mini_flux_train import make_dataset, train

__all__ = [
    "BUILD_SETTINGS",
    "COMPONENT_FILES",
    "LOG_FILE",
    "MANIFEST_FILE",
    "MAX_SEQUENCE_LENGTH",
    "MINI_FLUX_CONFIG",
    "WEIGHTS_DIR",
    "ThreadPicker",
    "TrainLog",
    "build_components",
    "build_mini_flux",
    "build_settings",
    "clip_tokenizer",
    "combined_sha256",
    "ema_decay",
    "ema_update",
    "file_sha256",
    "make_dataset",
    "model_guidance_target",
    "noised_sample",
    "read_manifest",
    "t5_tokenizer",
    "train",
    "velocity_target",
    "verify_weights",
    "weights_fingerprint",
    "weights_hash",
]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights" / "mini-flux"
# The manifest's entries that change the built pipeline (besides the weight files, held to their hashes by
# ``verify_weights``): ``build_mini_flux`` reads nothing else from the manifest, and the zoo fingerprints them.
BUILD_SETTINGS = ("latent",)


def read_manifest(weights_dir: Path | None = None) -> dict[str, Any]:
    """The manifest of a weights directory (default ``WEIGHTS_DIR``); a ConfigError naming the fix when missing."""
    return trained_weights.read_manifest(weights_dir or WEIGHTS_DIR, "mini-flux")


def weights_hash(weights_dir: Path | None = None) -> str | None:
    """The combined hash recomputed from the weight files themselves (None when the weights are missing).

    Not the manifest's stored value: a file changed together with its manifest entry changes this hash.
    """
    return trained_weights.weights_hash(weights_dir or WEIGHTS_DIR, COMPONENT_FILES)


def build_settings(manifest: dict[str, Any], weights_dir: Path | None = None) -> dict[str, Any]:
    """The manifest's ``BUILD_SETTINGS`` (all it gives the built pipeline but the weights); ConfigError if missing."""
    missing = [key for key in BUILD_SETTINGS if key not in manifest]
    if missing:
        raise ConfigError(
            f"{(weights_dir or WEIGHTS_DIR) / MANIFEST_FILE}: no '{missing[0]}' entry; retrain with "
            "`omni-accel zoo train mini-flux` or restore the committed files"
        )
    latent = manifest["latent"]
    keys = ("scaling_factor", "shift_factor")
    numbers = isinstance(latent, dict) and set(latent) == set(keys)
    numbers = numbers and all(
        isinstance(latent[k], (int, float)) and not isinstance(latent[k], bool) and math.isfinite(latent[k])
        for k in keys
    )
    if not numbers:
        raise ConfigError(
            f"{(weights_dir or WEIGHTS_DIR) / MANIFEST_FILE}: latent: expected finite numbers scaling_factor and "
            f"shift_factor, got {latent!r}; retrain (`omni-accel zoo train mini-flux`) or restore the committed files"
        )
    return {key: copy.deepcopy(manifest[key]) for key in BUILD_SETTINGS}


def weights_fingerprint(weights_dir: Path | None = None) -> dict[str, Any] | None:
    """Everything of the weights directory that determines the built pipeline, for the zoo's fingerprint.

    The combined hash recomputed from the weight files (``weights_hash``) and the manifest's build settings
    (``build_settings``); None when the weights are missing.
    """
    combined = weights_hash(weights_dir)
    if combined is None:
        return None
    return {"sha256": combined, **build_settings(read_manifest(weights_dir), weights_dir)}


def verify_weights(weights_dir: Path | None = None) -> dict[str, Any]:
    """Check every weight file and the combined hash against the manifest; returns it, ConfigError otherwise."""
    return trained_weights.verify_weights(weights_dir or WEIGHTS_DIR, COMPONENT_FILES, "mini-flux")


def build_mini_flux(config: dict[str, Any], weights_dir: Path | None = None) -> dict[str, Any]:
    """Components of the trained mini-flux, loaded from the committed (hash-checked) weights."""
    weights_dir = weights_dir or WEIGHTS_DIR
    # Only the fingerprinted settings: a manifest entry read here but not fingerprinted would let a changed
    # manifest be served from a zoo directory built before it changed.
    settings = build_settings(verify_weights(weights_dir), weights_dir)
    model_config = copy.deepcopy(config.get("model", config))
    model_config["vae"].update(settings["latent"])
    return trained_weights.load_weights(build_components(model_config), weights_dir, COMPONENT_FILES)
