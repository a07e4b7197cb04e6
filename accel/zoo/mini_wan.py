"""mini-wan: a real two-expert ``WanPipeline`` (Wan 2.2's layout) the project trains on the moving-shapes world.

Wan 2.2 A14B's text-to-video design at a size that trains on 2 CPU cores: a high-noise expert
(``transformer``) runs the steps whose timestep is at least ``boundary_ratio * 1000`` and a low-noise expert
(``transformer_2``) the rest, as ``WanPipeline`` switches them; a causal video VAE (8x spatial, 4x temporal:
9 frames of 64x64 become 3 x 8 x 8 latents), a UMT5 text encoder with a word-level tokenizer of the world's
words, the flow-match Euler scheduler with Wan's time shift. Training (``accel.zoo.mini_wan_train``) gives
each expert its own part of the schedule, so both matter.

The trained weights are committed under ``accel/zoo/weights/mini-wan`` (safetensors) with a manifest (config,
world version, final losses, each file's SHA-256 and their combined hash); ``build_mini_wan`` assembles the
pipeline from them and refuses weights whose hashes do not match (``accel.zoo.trained_weights``). Beyond the
weight files it reads only the manifest's ``BUILD_SETTINGS`` (the VAE's per-channel latent mean and std),
which the zoo fingerprints with the files' hash.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import accel.zoo.trained_weights as trained_weights
from accel.errors import ConfigError
from accel.zoo.mini_flux_model import LOG_FILE, MANIFEST_FILE
from accel.zoo.mini_wan_model import COMPONENT_FILES, MAX_SEQUENCE_LENGTH, MINI_WAN_CONFIG, build_components
from accel.zoo.mini_wan_train import EXPERTS, make_dataset, sigma_range, train

__all__ = [
    "BUILD_SETTINGS",
    "COMPONENT_FILES",
    "EXPERTS",
    "LOG_FILE",
    "MANIFEST_FILE",
    "MAX_SEQUENCE_LENGTH",
    "MINI_WAN_CONFIG",
    "NAME",
    "WEIGHTS_DIR",
    "build_components",
    "build_mini_wan",
    "build_settings",
    "make_dataset",
    "read_manifest",
    "sigma_range",
    "train",
    "verify_weights",
    "weights_fingerprint",
    "weights_hash",
]

NAME = "mini-wan"
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights" / NAME
# The manifest's entries that change the built pipeline (besides the weight files, held to their hashes).
BUILD_SETTINGS = ("latent",)


def read_manifest(weights_dir: Path | None = None) -> dict[str, Any]:
    """The manifest of a weights directory (default ``WEIGHTS_DIR``); a ConfigError naming the fix when missing."""
    return trained_weights.read_manifest(weights_dir or WEIGHTS_DIR, NAME)


def weights_hash(weights_dir: Path | None = None) -> str | None:
    """The combined hash recomputed from the weight files themselves (None when the weights are missing)."""
    return trained_weights.weights_hash(weights_dir or WEIGHTS_DIR, COMPONENT_FILES)


def verify_weights(weights_dir: Path | None = None) -> dict[str, Any]:
    """Check every weight file and the combined hash against the manifest; returns it, ConfigError otherwise."""
    return trained_weights.verify_weights(weights_dir or WEIGHTS_DIR, COMPONENT_FILES, NAME)


def build_settings(manifest: dict[str, Any], weights_dir: Path | None = None) -> dict[str, Any]:
    """The manifest's ``BUILD_SETTINGS``: ``latent`` = per-channel ``latents_mean`` and ``latents_std``."""
    where = (weights_dir or WEIGHTS_DIR) / MANIFEST_FILE
    latent: Any = manifest.get("latent")
    channels = MINI_WAN_CONFIG["vae"]["z_dim"]
    keys = ("latents_mean", "latents_std")
    valid = isinstance(latent, dict) and set(latent) == set(keys)
    valid = valid and all(
        isinstance(latent[k], list)
        and len(latent[k]) == channels
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in latent[k])
        for k in keys
    )
    if not valid:
        raise ConfigError(
            f"{where}: latent: expected lists of {channels} finite numbers latents_mean and latents_std, got "
            f"{latent!r}; retrain (`omni-accel zoo train {NAME}`) or restore the committed files"
        )
    return {"latent": copy.deepcopy(latent)}


def weights_fingerprint(weights_dir: Path | None = None) -> dict[str, Any] | None:
    """The weight files' combined hash and the manifest's build settings, for the zoo's fingerprint (None if
    the weights are missing)."""
    combined = weights_hash(weights_dir)
    if combined is None:
        return None
    return {"sha256": combined, **build_settings(read_manifest(weights_dir), weights_dir)}


# What the weights fix: the components' shapes, the schedule and where the experts switch.
TRAINED_WITH = ("transformer", "vae", "umt5", "scheduler", "boundary_ratio")


def build_mini_wan(config: dict[str, Any], weights_dir: Path | None = None) -> dict[str, Any]:
    """Components of the trained mini-wan, loaded from the committed (hash-checked) weights.

    ``config``'s architecture, schedule and switch (``TRAINED_WITH``) must be those the manifest says the weights
    were trained with: experts switched elsewhere than they learnt run sigmas they never saw, silently."""
    weights_dir = weights_dir or WEIGHTS_DIR
    manifest = verify_weights(weights_dir)
    settings = build_settings(manifest, weights_dir)
    model_config = copy.deepcopy(config.get("model", config))
    trained = manifest.get("config", {})
    differ = [key for key in TRAINED_WITH if key in trained and model_config.get(key) != trained[key]]
    if differ:
        shown = ", ".join(f"{key} {model_config.get(key)!r} (trained: {trained[key]!r})" for key in differ)
        raise ConfigError(
            f"{weights_dir / MANIFEST_FILE}: the weights were trained with another recipe than the one building "
            f"them: {shown}; build from the manifest's recipe (accel.measure.mini_wan_eval.load_pipeline(DIR)), "
            f"restore the recipe (accel/zoo/mini_wan_model.py) or retrain (`omni-accel zoo train {NAME}`)"
        )
    model_config["vae"].update(settings["latent"])
    return trained_weights.load_weights(build_components(model_config), weights_dir, COMPONENT_FILES)
