"""What a pipeline family of the zoo is, and the tiny parts several families share.

A family is one diffusers pipeline class built from its real component classes with random weights
and configs as small as the classes allow (most taken from diffusers' own ``get_dummy_components`` in
``tests/pipelines/<family>/``, each family naming its source: "after <test file>" follows that file's
sizes, which the installed diffusers package does not ship, so each config was re-checked against the
0.42 class signatures by building and running it: ``tests/test_zoo_families.py``). Components are resolved by class name
when the family is built, so a diffusers or transformers release without one of them makes that
family *unavailable in this environment*, naming the missing class, while the others build.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.errors import ModelUnavailable

# Inputs a family's call can need beyond the workload's prompt: the adapter makes each one offline.
INPUTS = ("prompt", "image")


@dataclass(frozen=True)
class Family:
    """One pipeline family: its class, the classes its build needs, its tiny config and its source."""

    name: str  # zoo name, e.g. "tiny-sd15"
    family: str  # the family as users name it, e.g. "Stable Diffusion 1.5"
    pipeline_class: str
    modality: str  # image | video
    description: str
    source: str  # where the config numbers come from
    config: dict[str, Any]
    builder: Callable[[dict[str, Any]], dict[str, Any]]
    # "diffusers.X" / "transformers.X": every class the builder instantiates; a bare name: a package it needs
    requires: tuple[str, ...]
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ("prompt",)
    # Attributes set on the loaded pipeline: what a pipeline hard-codes instead of reading a config.
    pipeline_attributes: dict[str, Any] = field(default_factory=dict)


def missing_classes(requires: tuple[str, ...]) -> list[str]:
    """The ``package.Class`` names (or bare package names) of ``requires`` that this environment lacks."""
    missing = []
    for dotted in requires:
        package, _, name = dotted.partition(".")
        if importlib.util.find_spec(package) is None:
            missing.append(f"package {package}" if not name else dotted)
            continue
        if name and not hasattr(importlib.import_module(package), name):
            missing.append(dotted)
    return missing


def unavailable(name: str, missing: list[str]) -> ModelUnavailable:
    """The ModelUnavailable (scope environment) of zoo entry ``name``, naming what is missing and the versions."""
    import diffusers
    import transformers

    return ModelUnavailable(
        "environment",
        f"zoo entry '{name}' is unavailable in this environment: {', '.join(missing)} not found "
        f"(diffusers {diffusers.__version__}, transformers {transformers.__version__})",
    )


def check_available(name: str, requires: tuple[str, ...]) -> None:
    """A ModelUnavailable (scope environment) naming every missing class and the installed versions."""
    missing = missing_classes(requires)
    if missing:
        raise unavailable(name, missing)


class BuildFailed(RuntimeError):
    """A zoo builder that raised with these libraries (a constructor whose arguments a newer diffusers or
    transformers changed): the entry's cells fail with this message, the rest of a sweep runs."""


def build_failed(name: str, error: Exception) -> BuildFailed:
    """The BuildFailed of zoo entry ``name``: the builder's error, the versions, and what to do."""
    import diffusers
    import transformers

    return BuildFailed(
        f"zoo entry '{name}' could not be built with diffusers {diffusers.__version__}, transformers "
        f"{transformers.__version__}: {type(error).__name__}: {error} (its builder does not fit these versions: "
        "install the ones pyproject.toml pins, or report it with this line)"
    )


class MissingClass(AttributeError):
    """A class a builder looked up (``cls``) that this environment lacks; ``dotted``: ``package.Name``."""

    def __init__(self, dotted: str) -> None:
        super().__init__(f"{dotted} not found")
        self.dotted = dotted


def cls(dotted: str) -> Any:
    """The class ``package.Name`` (``diffusers.FluxPipeline``); ``MissingClass`` where this environment lacks it
    (a class beyond the entry's ``requires``: the zoo reports the entry unavailable, naming it)."""
    package, _, name = dotted.partition(".")
    module = importlib.import_module(package)
    if not hasattr(module, name):
        raise MissingClass(dotted)
    return getattr(module, name)


def seeded(seed: int, dotted: str, *args: Any, **kwargs: Any) -> Any:
    """``Class(*args, **kwargs)`` built after ``torch.manual_seed(seed)``, in eval mode when a module."""
    import torch

    torch.manual_seed(seed)
    module = cls(dotted)(*args, **kwargs)
    return module.eval() if hasattr(module, "eval") else module


def hf(seed: int, model: str, config: str, values: dict[str, Any]) -> Any:
    """A transformers model ``model`` from its config class ``config`` with ``values``, seeded."""
    return seeded(seed, f"transformers.{model}", cls(f"transformers.{config}")(**values))


def input_image(height: int, width: int, seed: int = 0) -> Any:
    """A deterministic RGB PIL image (smooth gradients and a disc, from ``seed``): an edit or i2v input."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=3)
    channels = [0.5 + 0.4 * np.sin(2 * np.pi * (x / width + y / height) + p) for p in phase]
    image = np.stack(channels, axis=-1)
    cy, cx, radius = height / 2, width / 2, min(height, width) / 4
    disc = (y - cy) ** 2 + (x - cx) ** 2 <= radius**2
    image[disc] = rng.uniform(0, 1, size=3)
    return Image.fromarray((image * 255).round().astype(np.uint8), mode="RGB")


# ---- shared tiny parts ----------------------------------------------------------------------------


# Four levels (8x spatial, as the production VAEs) of 8 channels; latent_channels set per family.
def kl_vae_config(latent_channels: int, **extra: Any) -> dict[str, Any]:
    """A tiny ``AutoencoderKL`` config with the production 8x downsampling (sample_size 32: tiles at 64)."""
    return {
        "sample_size": 32,
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [8, 8, 8, 8],
        "layers_per_block": 1,
        "latent_channels": latent_channels,
        "norm_num_groups": 4,
        **extra,
    }


# diffusers tests' CLIPTextConfig (hidden 32, 2 layers), on the zoo's 56-entry CLIP vocabulary.
CLIP_TEXT: dict[str, Any] = {
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
    "hidden_act": "gelu",
}

# diffusers tests' tiny T5 ("hf-internal-testing/tiny-random-t5": d_model 32), on the zoo's T5 vocabulary.
T5: dict[str, Any] = {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2, "num_heads": 4}
