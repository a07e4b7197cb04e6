"""The tiny pipeline zoo: real diffusers pipelines with random weights, built offline.

Each entry is built once with fixed seeds, saved with ``save_pretrained`` under the zoo directory
(``$OMNI_ACCEL_ZOO_DIR``, default the user cache dir) and always loaded back through
``DiffusionPipeline.from_pretrained``, so loading, quantization and offload take the same code paths as
for a real checkpoint. The directory name carries a fingerprint of the entry's hyper-parameters, the
diffusers/transformers versions and, for a trained entry, the hash of its weight files (recomputed from
them) and every manifest setting its build reads: a config, weights or manifest change builds a new
directory, an unchanged one is reused. A trained entry's committed weights are verified against their
manifest each time it is built or used, and a built directory's files against its marker.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, unknown_choice
from accel.zoo import families, mini_flux, mini_wan, pipelines

# 2: the marker records every file's SHA-256, checked each time a built checkpoint is used.
# 3: the marker's fingerprint is the directory's (builders used to change the config they were given, so an
#    entry like tiny-qwen-image recorded another one); older directories are left alone and rebuilt once.
ZOO_FORMAT_VERSION = 3
MARKER_FILE = "omni_accel_zoo.json"


@dataclass(frozen=True)
class ZooEntry:
    """One tiny pipeline: how to build it and what a request needs to drive it."""

    name: str
    pipeline_class: str
    modality: str  # "image" or "video"
    description: str
    config: dict[str, Any]
    builder: Callable[[dict[str, Any]], dict[str, Any]]
    # Call kwargs a tiny model needs (e.g. a short max_sequence_length); a profile's call_kwargs win.
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    # The procedural world the model was trained on (``accel.zoo.world``): its images have a ground
    # truth, so sweeps score prompt adherence. None for random-weight models.
    world: str | None = None
    # Whether the weights come from training (committed under accel/zoo/weights) rather than a seed.
    trained: bool = False
    # For trained entries: what of the committed weights determines the built pipeline (the files' combined
    # hash, recomputed from them, and the manifest settings the builder reads), taken afresh each time the
    # fingerprint is (not frozen at import), so that changed weights or settings build a new directory
    # instead of reusing one built from the old ones.
    weights_fingerprint: Callable[[], dict[str, Any] | None] | None = None
    # For trained entries: checks the committed weights against their manifest (ConfigError otherwise); run
    # by every ``build``, also when the directory already exists.
    verify_weights: Callable[[], Any] | None = None
    # The pipeline family as users name it ("Stable Diffusion XL") and where the config's numbers come from.
    family: str = ""
    config_source: str = ""
    # What a call needs beyond the workload's prompt ("image": the adapter makes a deterministic one offline).
    inputs: tuple[str, ...] = ("prompt",)
    # ``package.Class`` names the builder instantiates: a missing one makes the entry unavailable here.
    requires: tuple[str, ...] = ()
    # Attributes the adapter sets on the loaded pipeline (what a pipeline hard-codes instead of configuring).
    pipeline_attributes: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """Hash of everything that determines the saved pipeline (for trained entries, ``weights_fingerprint``)."""
        import diffusers
        import torch
        import transformers

        weights = self.weights_fingerprint
        config = self.config if weights is None else {**self.config, "weights": weights()}
        payload = json.dumps(
            {
                "format": ZOO_FORMAT_VERSION,
                "name": self.name,
                "config": config,
                "versions": [diffusers.__version__, transformers.__version__, torch.__version__],
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


ZOO: dict[str, ZooEntry] = {
    entry.name: entry
    for entry in (
        ZooEntry(
            name="mini-flux",
            pipeline_class="FluxPipeline",
            modality="image",
            description="FLUX layout trained by the project on the shapes world (8x VAE, CLIP + T5, 2.3M-param DiT)",
            config={"model": mini_flux.MINI_FLUX_CONFIG},
            # The weight files' hash and the manifest's build settings are part of the fingerprint: changed
            # weights or latent settings build a new directory.
            weights_fingerprint=mini_flux.weights_fingerprint,
            verify_weights=mini_flux.verify_weights,
            builder=mini_flux.build_mini_flux,
            call_kwargs={"max_sequence_length": mini_flux.MAX_SEQUENCE_LENGTH},
            world="shapes",
            trained=True,
        ),
        ZooEntry(
            name="mini-wan",
            pipeline_class="WanPipeline",
            modality="video",
            description="Wan 2.2 layout trained by the project on the moving-shapes world (two experts switched "
            f"at boundary_ratio {mini_wan.MINI_WAN_CONFIG['boundary_ratio']}, causal video VAE, UMT5)",
            config={"model": mini_wan.MINI_WAN_CONFIG},
            weights_fingerprint=mini_wan.weights_fingerprint,
            verify_weights=mini_wan.verify_weights,
            builder=mini_wan.build_mini_wan,
            call_kwargs={"max_sequence_length": mini_wan.MAX_SEQUENCE_LENGTH},
            world="moving-shapes",
            trained=True,
        ),
        ZooEntry(
            name="tiny-flux",
            pipeline_class="FluxPipeline",
            modality="image",
            description="FLUX.1-dev layout: dual/single-stream DiT, guidance embedding, CLIP + T5, 8x VAE",
            config=families.FLUX_CONFIG,
            builder=families.build_flux,
            call_kwargs={"max_sequence_length": 32},
        ),
        ZooEntry(
            name="tiny-wan",
            pipeline_class="WanPipeline",
            modality="video",
            description="Wan 2.1 T2V layout: video DiT, 3D causal VAE (8x spatial, 4x temporal), UMT5, CFG",
            config=families.WAN_CONFIG,
            builder=families.build_wan,
            call_kwargs={"max_sequence_length": 32},
        ),
        ZooEntry(
            name="tiny-qwen-image",
            pipeline_class="QwenImagePipeline",
            modality="image",
            description="Qwen-Image layout: MMDiT, Qwen2.5-VL text encoder with chat template, 8x VAE, true CFG",
            config=families.QWEN_IMAGE_CONFIG,
            builder=families.build_qwen_image,
            # The byte-level tokenizer spells the chat template out letter by letter (~120 tokens after the 34
            # dropped): 64 kept only template tokens, so every prompt gave the same image (tests/test_zoo_families.py).
            call_kwargs={"max_sequence_length": 256},
        ),
    )
}

# The entries defined above, which tests/test_zoo.py exercises in depth; the families below have their
# own path test (tests/test_zoo_families.py).
CORE_ENTRIES: tuple[str, ...] = tuple(ZOO)

for _name, _family in pipelines.CORE_FAMILIES.items():
    ZOO[_name] = dataclasses.replace(ZOO[_name], family=_family, config_source="accel/zoo/families.py")

for _spec in pipelines.FAMILIES:
    ZOO[_spec.name] = ZooEntry(
        name=_spec.name,
        pipeline_class=_spec.pipeline_class,
        modality=_spec.modality,
        description=_spec.description,
        config=_spec.config,
        builder=_spec.builder,
        call_kwargs=_spec.call_kwargs,
        family=_spec.family,
        config_source=_spec.source,
        inputs=_spec.inputs,
        requires=_spec.requires,
        pipeline_attributes=_spec.pipeline_attributes,
    )


def family_entries() -> list[ZooEntry]:
    """Every entry that stands for a diffusers pipeline family (all but the trained mini-flux and mini-wan)."""
    return [entry for entry in ZOO.values() if entry.family]


def zoo_root() -> Path:
    """Directory holding built zoo pipelines: ``$OMNI_ACCEL_ZOO_DIR`` or the user cache dir."""
    override = os.environ.get("OMNI_ACCEL_ZOO_DIR")
    if override:
        return Path(override).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_cache_dir("omni-accel")) / "zoo"


def get_entry(name: str) -> ZooEntry:
    """The zoo entry called ``name``; a ConfigError listing the entries otherwise."""
    if name not in ZOO:
        raise ConfigError(unknown_choice("zoo model", name, ZOO))
    return ZOO[name]


def is_zoo_name(source: str) -> bool:
    """Whether ``source`` names a zoo entry (as opposed to a path or hub id)."""
    return source in ZOO


def entry_path(name: str) -> Path:
    """Where ``name`` is (or would be) saved for the current config and library versions."""
    entry = get_entry(name)
    return zoo_root() / f"{entry.name}-{entry.fingerprint()}"


def is_built(name: str) -> bool:
    """Whether ``name`` is already saved for the current config."""
    return (entry_path(name) / MARKER_FILE).is_file()


def weights_sha256(source: str) -> str | None:
    """The combined SHA-256 of a trained zoo entry's weight files (mini-flux, mini-wan), recomputed from the
    files (``weights_fingerprint``: the hash ``build`` checks against the manifest); None for any other source
    or when the weights are missing. What a record carries so that a result names the weights it ran."""
    entry = ZOO.get(source)
    if entry is None or entry.weights_fingerprint is None:
        return None
    fingerprint = entry.weights_fingerprint()
    sha = (fingerprint or {}).get("sha256")
    return sha if isinstance(sha, str) else None


def build_pipeline_in_memory(name: str) -> Any:
    """Build the pipeline object without saving it (used to check reloads are bit-identical)."""
    import diffusers

    entry = get_entry(name)
    pipelines.check_available(name, (f"diffusers.{entry.pipeline_class}", *entry.requires))
    # A copy: builders hand parts of the config to library constructors that fill them in place (transformers
    # adds rope_theta to Qwen's rope_scaling), which changed the entry's fingerprint once it was built.
    try:
        components = entry.builder(copy.deepcopy(entry.config))
        for module in components.values():
            if hasattr(module, "eval"):
                module.eval()  # as from_pretrained leaves them
        return getattr(diffusers, entry.pipeline_class)(**components)
    except pipelines.MissingClass as error:  # a class the builder needs beyond ``requires``: named all the same
        raise pipelines.unavailable(name, [error.dotted]) from error
    except (TypeError, ValueError, AttributeError, KeyError, RuntimeError) as error:  # a changed constructor
        raise pipelines.build_failed(name, error) from error


def build(name: str, force: bool = False) -> Path:
    """Build and save ``name`` unless already built; returns the checkpoint directory.

    Safe under concurrency (parallel cells on one node, several sweeps sharing a zoo directory): builders
    take an exclusive ``flock`` on ``.<dir>.lock`` beside the target, and whoever waited finds it built.
    The pipeline is saved into a temporary sibling directory and renamed into place, so an interrupted
    build never leaves a half-written checkpoint that later runs would load. A finished checkpoint is only
    replaced by ``force``, which moves the old one aside with one rename before deleting it: a process
    that already holds files open keeps reading them (POSIX), and no reader sees a half-deleted folder.
    A trained entry's committed weights are verified first, every time (also when already built): a
    manifest that no longer matches its files is refused rather than served from the directory built before.
    """
    entry = get_entry(name)
    if entry.verify_weights is not None:
        entry.verify_weights()
    # A diffusers/transformers release without one of the entry's classes: unavailable, naming it.
    pipelines.check_available(name, (f"diffusers.{entry.pipeline_class}", *entry.requires))
    target = entry_path(name)
    if is_built(name) and not force:
        return _verified(name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target):
        if is_built(name) and not force:
            return _verified(name, target)  # another process built it while we waited
        pipeline = build_pipeline_in_memory(name)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        retired: Path | None = None
        try:
            pipeline.save_pretrained(staging)
            marker = {
                "name": name,
                "fingerprint": target.name.removeprefix(f"{name}-"),  # the one that named the directory
                "pipeline_class": entry.pipeline_class,
                "files": _file_hashes(staging),
            }
            (staging / MARKER_FILE).write_text(json.dumps(marker, indent=2))
            staging.chmod(_directory_mode())  # mkdtemp makes it 0700: a shared zoo must be readable by all
            if target.exists():
                retired = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=target.parent))
                target.rename(retired / "checkpoint")
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
            if retired is not None:
                shutil.rmtree(retired, ignore_errors=True)
    return target


def _file_hashes(directory: Path) -> dict[str, str]:
    """SHA-256 of every file under ``directory`` but the marker, keyed by relative path."""
    return {
        path.relative_to(directory).as_posix(): mini_flux.file_sha256(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MARKER_FILE
    }


def _verified(name: str, target: Path) -> Path:
    """``target`` if its marker names it and its files are those it was built with; a ConfigError otherwise."""
    marker = json.loads((target / MARKER_FILE).read_text())
    expected = target.name.removeprefix(f"{name}-")
    if marker.get("name") != name or marker.get("fingerprint") != expected:
        raise ConfigError(
            f"{target / MARKER_FILE}: records zoo entry '{marker.get('name')}' with fingerprint "
            f"{marker.get('fingerprint')}, not this directory's '{name}' {expected}; rebuild it with "
            f"`omni-accel zoo build {name} --force`"
        )
    recorded = marker.get("files", {})
    found = _file_hashes(target)
    for path in sorted(set(recorded) | set(found)):
        if recorded.get(path) != found.get(path):
            change = "missing" if path not in found else "added" if path not in recorded else "modified"
            raise ConfigError(
                f"{target / path}: {change} since zoo entry '{name}' was built; rebuild it with "
                f"`omni-accel zoo build {name} --force`"
            )
    return target


def _directory_mode() -> int:
    """The mode a plain ``mkdir`` would give a directory here (0o777 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


@contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the lock file beside ``target``, released when the block ends."""
    import fcntl

    fd = os.open(target.parent / f".{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def list_entries() -> list[dict[str, Any]]:
    """One row per zoo entry: name, class, modality, built or not, path and description."""
    return [
        {
            "name": entry.name,
            "pipeline_class": entry.pipeline_class,
            "modality": entry.modality,
            "built": is_built(entry.name),
            "path": str(entry_path(entry.name)),
            "description": entry.description,
            "family": entry.family,
            "inputs": list(entry.inputs),
            "available": not pipelines.missing_classes((f"diffusers.{entry.pipeline_class}", *entry.requires)),
        }
        for entry in ZOO.values()
    ]
