"""Committed weights of the zoo's trained models (mini-flux, mini-wan): the manifest, the hashes, loading.

A trained model's weights directory holds one safetensors file per component, the manifest training wrote
(config, losses, each file's SHA-256 and their combined hash) and the training log. These functions take the
directory, the model's name and its component files, so each model's module (``accel.zoo.mini_flux``,
``accel.zoo.mini_wan``) keeps only what is its own (its directory, files and build settings).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from accel.cpu_time import cpu_model
from accel.errors import ConfigError
from accel.zoo.mini_flux_model import MANIFEST_FILE, combined_sha256, file_sha256


def read_manifest(weights_dir: Path, name: str) -> dict[str, Any]:
    """The manifest of a weights directory; a ConfigError naming the fix when missing."""
    path = weights_dir / MANIFEST_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: {name} weights are missing; train them with `omni-accel zoo train {name}`")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def weights_hash(weights_dir: Path, files: dict[str, str]) -> str | None:
    """The combined hash recomputed from the weight files themselves (None when the weights are missing).

    Not the manifest's stored value: a file changed together with its manifest entry changes this hash.
    """
    paths = {filename: weights_dir / filename for filename in files.values()}
    if not (weights_dir / MANIFEST_FILE).is_file() or not all(path.is_file() for path in paths.values()):
        return None
    return combined_sha256({filename: file_sha256(path) for filename, path in paths.items()})


def verify_weights(weights_dir: Path, files: dict[str, str], name: str) -> dict[str, Any]:
    """Check every weight file and the combined hash against the manifest; returns it, ConfigError otherwise."""
    manifest = read_manifest(weights_dir, name)
    hashes = {}
    for component, filename in files.items():
        path = weights_dir / filename
        if not path.is_file():
            raise ConfigError(f"{path}: missing {name} weight file for '{component}'")
        actual = file_sha256(path)
        if actual != manifest["files"][filename]:
            raise ConfigError(
                f"{path}: SHA-256 {actual[:12]} does not match the manifest's {manifest['files'][filename][:12]}"
            )
        hashes[filename] = actual
    combined = combined_sha256(hashes)
    if combined != manifest.get("sha256"):
        raise ConfigError(
            f"{weights_dir / MANIFEST_FILE}: combined SHA-256 {str(manifest.get('sha256'))[:12]} is not the weight "
            f"files' {combined[:12]}; retrain with `omni-accel zoo train {name}` or restore the committed files"
        )
    return manifest


def load_weights(components: dict[str, Any], weights_dir: Path, files: dict[str, str]) -> dict[str, Any]:
    """Load each component's weight file into it (strictly), in eval mode; returns ``components``."""
    from safetensors.torch import load_model

    for component, filename in files.items():
        load_model(components[component], str(weights_dir / filename), strict=True)
        components[component].eval()
    return components


def write_weights(
    components: dict[str, Any], out_dir: Path, files: dict[str, str], manifest: dict[str, Any]
) -> dict[str, Any]:
    """Save each component's weights, then the manifest: ``manifest`` with the library versions, the CPU, each file's
    SHA-256 and their combined hash added (what ``verify_weights`` checks). Returns the written manifest."""
    import diffusers
    import torch
    import transformers
    from safetensors.torch import save_model

    hashes = {}
    for component, filename in files.items():
        save_model(components[component], str(out_dir / filename))
        hashes[filename] = file_sha256(out_dir / filename)
    versions = {
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "transformers": transformers.__version__,
        # The data's rendering and the CPU's kernels decide the bits too: the same recipe and seed gave other
        # weights on an Intel Xeon than on the AMD EPYC that trained the previous ones (docs/zoo.md, wave 11).
        "numpy": importlib.metadata.version("numpy"),
        "Pillow": importlib.metadata.version("Pillow"),
    }
    written = {
        **manifest,
        "versions": versions,
        "cpu": cpu_model(),
        "files": hashes,
        "sha256": combined_sha256(hashes),
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(written, indent=2) + "\n")
    return written
