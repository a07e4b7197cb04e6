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
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from accel.errors import ConfigError
from accel.zoo.families import build_flux
from accel.zoo.world import (
    HELD_OUT_SCENES,
    IMAGE_SIZE,
    PALETTE,
    POSITIONS,
    SHAPES,
    TEMPLATES,
    WORLD_VERSION,
    Scene,
    render_array,
    training_scenes,
    vocabulary,
)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights" / "mini-flux"
MANIFEST_FILE = "manifest.json"
LOG_FILE = "train_log.txt"
COMPONENT_FILES = {
    "transformer": "transformer.safetensors",
    "vae": "vae.safetensors",
    "text_encoder": "text_encoder.safetensors",
    "text_encoder_2": "text_encoder_2.safetensors",
}
MAX_SEQUENCE_LENGTH = 32
# The manifest's entries that change the built pipeline (besides the weight files, held to their hashes by
# ``verify_weights``): ``build_mini_flux`` reads nothing else from the manifest, and the zoo fingerprints them.
BUILD_SETTINGS = ("latent",)

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


def t5_tokenizer() -> Any:
    """A T5 (unigram) tokenizer with one piece per word of the world (letters as a fallback)."""
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [(letter, -2.0) for letter in "abcdefghijklmnopqrstuvwxyz"]
    pieces += [("," if word == "," else "▁" + word, -1.0) for word in vocabulary()]
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


def read_manifest(weights_dir: Path | None = None) -> dict[str, Any]:
    """The manifest of a weights directory (default ``WEIGHTS_DIR``); a ConfigError naming the fix when missing."""
    path = (weights_dir or WEIGHTS_DIR) / MANIFEST_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: mini-flux weights are missing; train them with `omni-accel zoo train mini-flux`")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def combined_sha256(files: dict[str, str]) -> str:
    """The weights' combined hash, as training writes it to the manifest: SHA-256 of the sorted per-file JSON."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def weights_hash(weights_dir: Path | None = None) -> str | None:
    """The combined hash recomputed from the weight files themselves (None when the weights are missing).

    Not the manifest's stored value: a file changed together with its manifest entry changes this hash.
    """
    weights_dir = weights_dir or WEIGHTS_DIR
    paths = {filename: weights_dir / filename for filename in COMPONENT_FILES.values()}
    if not (weights_dir / MANIFEST_FILE).is_file() or not all(path.is_file() for path in paths.values()):
        return None
    return combined_sha256({filename: file_sha256(path) for filename, path in paths.items()})


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
    weights_dir = weights_dir or WEIGHTS_DIR
    manifest = read_manifest(weights_dir)
    files = {}
    for name, filename in COMPONENT_FILES.items():
        path = weights_dir / filename
        if not path.is_file():
            raise ConfigError(f"{path}: missing mini-flux weight file for '{name}'")
        actual = file_sha256(path)
        if actual != manifest["files"][filename]:
            raise ConfigError(
                f"{path}: SHA-256 {actual[:12]} does not match the manifest's {manifest['files'][filename][:12]}"
            )
        files[filename] = actual
    combined = combined_sha256(files)
    if combined != manifest.get("sha256"):
        raise ConfigError(
            f"{weights_dir / MANIFEST_FILE}: combined SHA-256 {str(manifest.get('sha256'))[:12]} is not the weight "
            f"files' {combined[:12]}; retrain with `omni-accel zoo train mini-flux` or restore the committed files"
        )
    return manifest


def build_mini_flux(config: dict[str, Any], weights_dir: Path | None = None) -> dict[str, Any]:
    """Components of the trained mini-flux, loaded from the committed (hash-checked) weights."""
    from safetensors.torch import load_model

    weights_dir = weights_dir or WEIGHTS_DIR
    # Only the fingerprinted settings: a manifest entry read here but not fingerprinted would let a changed
    # manifest be served from a zoo directory built before it changed.
    settings = build_settings(verify_weights(weights_dir), weights_dir)
    model_config = copy.deepcopy(config.get("model", config))
    model_config["vae"].update(settings["latent"])
    components = build_components(model_config)
    for name, filename in COMPONENT_FILES.items():
        load_model(components[name], str(weights_dir / filename), strict=True)
        components[name].eval()
    return components


# --------------------------------------------------------------------------------------------------
# Training


class ThreadPicker:
    """Choose the torch thread count that is fastest right now, re-measured every ``every`` steps.

    Under contention two threads can be several times slower than one (OpenMP barriers wait for a busy
    core); on an idle machine two are faster. While other processes kept at least ``BUSY_CORES`` cores busy
    since the last check (the machine's CPU time minus this process's: its own threads do not count, as
    they would in the load average) it keeps one thread; otherwise each probe times ``probe`` real training
    steps per candidate.
    """

    BUSY_CORES = 0.5

    def __init__(self, candidates: list[int], every: int = 250, probe: int = 2):
        self.candidates = candidates
        self.every = every
        self.probe = probe
        self.current = candidates[0]
        self._probing = False
        self._times: dict[int, list[float]] = {}
        self._since = self._cpu_snapshot()

    @staticmethod
    def _cpu_snapshot() -> tuple[float, float, float]:
        """(wall clock, the machine's busy CPU seconds, this process's CPU seconds)."""
        import psutil

        from accel.cpu_time import machine_busy_seconds

        own = psutil.Process().cpu_times()
        return time.perf_counter(), machine_busy_seconds(), own.user + own.system

    def _busy(self) -> bool:
        """Whether other processes kept ``BUSY_CORES`` or more busy since the last call."""
        (wall0, machine0, own0), (wall1, machine1, own1) = self._since, self._cpu_snapshot()
        self._since = (wall1, machine1, own1)
        wall = wall1 - wall0
        return wall > 0 and max(0.0, (machine1 - machine0) - (own1 - own0)) / wall >= self.BUSY_CORES

    def before_step(self, step: int) -> None:
        """Set the thread count for ``step``."""
        window = self.probe * len(self.candidates)
        if len(self.candidates) > 1:
            if step % self.every == 0:
                self._probing = not self._busy()
                if not self._probing:
                    self.current = self.candidates[0]
            if self._probing and step % self.every < window:
                self.current = self.candidates[(step % self.every) % len(self.candidates)]
        torch.set_num_threads(self.current)

    def after_step(self, step: int, seconds: float) -> None:
        """Record a probe step's time; pick the fastest candidate when the probe is complete."""
        window = self.probe * len(self.candidates)
        if not self._probing or step % self.every >= window:
            return
        self._times.setdefault(self.current, []).append(seconds)
        if step % self.every == window - 1:
            self.current = min(self._times, key=lambda n: statistics.median(self._times[n]))
            self._times = {}
            self._probing = False


def _thread_candidates(threads: int | None) -> list[int]:
    if threads:
        return [threads]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return [1, 2] if cores >= 2 else [1]


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _begin_step(
    optimizer: torch.optim.Optimizer, step: int, cfg: dict[str, Any], count: int, generator: torch.Generator
) -> torch.Tensor:
    """Every stage's step starts alike: set the scheduled learning rate, then draw the batch's indices."""
    for group in optimizer.param_groups:
        group["lr"] = _lr_at(step, cfg["steps"], cfg["lr"], cfg["warmup"])
    return torch.randint(0, count, (cfg["batch"],), generator=generator)


def make_dataset(count: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``count`` training images (float32, [-1, 1], NCHW) of held-in scenes with random captions."""
    rng = np.random.default_rng(seed)
    scenes = training_scenes()
    picks = rng.integers(0, len(scenes), size=count)
    templates = rng.integers(0, len(TEMPLATES), size=count)
    images = np.empty((count, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    captions = []
    for index in range(count):
        scene = scenes[int(picks[index])]
        images[index] = render_array(scene, seed=seed * 1_000_003 + index)
        captions.append(scene.caption(int(templates[index])))
    return images, captions


class TrainLog:
    """Lines written to a log file (and kept) as training goes."""

    def __init__(self, path: Path | None):
        self.path = path
        self.lines: list[str] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def write(self, line: str) -> None:
        """Append one line."""
        self.lines.append(line)
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(line + "\n")


def _loop(
    name: str,
    steps: int,
    step_fn: Callable[[int], float],
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, float]:
    """Run ``step_fn`` for ``steps`` steps with a progress bar; returns the final loss and timing."""
    from tqdm import tqdm

    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(total=steps, desc=f"mini-flux {name}", disable=not progress, dynamic_ncols=True)
    for step in range(steps):
        picker.before_step(step)
        began = time.perf_counter()
        loss = step_fn(step)
        picker.after_step(step, time.perf_counter() - began)
        losses.append(loss)
        recent = sum(losses[-50:]) / len(losses[-50:])
        bar.update(1)
        bar.set_postfix(loss=f"{recent:.4f}", threads=picker.current)
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log.write(
                f"{name} step {step + 1}/{steps} loss {recent:.5f} threads {picker.current} "
                f"elapsed {time.perf_counter() - start:.0f}s"
            )
    bar.close()
    tail = losses[-50:]
    return {"final_loss": sum(tail) / len(tail), "seconds": time.perf_counter() - start}


def _train_text_encoders(
    components: dict[str, Any],
    cfg: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, Any]:
    """Teach the random text encoders to read a caption: the stand-in for their language pretraining.

    FLUX gives text tokens no position in its joint attention (``txt_ids`` are zeros), so in a real FLUX it
    is T5's language pretraining that tells "a red circle on a blue background" from "a blue circle on a
    red background". Random encoders cannot: a transformer trained on them mixed up the two colours' roles
    on half of the held-out prompts (shapes-v1 weights before this stage existed). Here T5 (its mean over
    the 32 tokens the transformer sees) and CLIP (the pooled output FluxPipeline passes on) learn, through
    linear heads thrown away afterwards, to name each attribute of the caption's scene, from training
    captions only; then both are frozen and the transformer learns to read them.
    """
    t5, clip = components["text_encoder_2"], components["text_encoder"]
    kinds: dict[str, list[str | None]] = {
        "background": list(PALETTE),
        "colour": list(PALETTE),
        "shape": list(SHAPES),
        # A caption that leaves the position open says so: its own class.
        "position": [*POSITIONS, None],
    }

    def encode(scenes: list[Scene]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        captions = [scene.caption(t) for scene in scenes for t in range(len(TEMPLATES))]
        targets = torch.tensor(
            [
                [values.index(getattr(scene.named_by(t), kind)) for kind, values in kinds.items()]
                for scene in scenes
                for t in range(len(TEMPLATES))
            ]
        )
        t5_ids = components["tokenizer_2"](
            captions, padding="max_length", max_length=MAX_SEQUENCE_LENGTH, truncation=True, return_tensors="pt"
        ).input_ids
        clip_ids = components["tokenizer"](
            captions,
            padding="max_length",
            max_length=components["tokenizer"].model_max_length,
            truncation=True,
            return_tensors="pt",
        ).input_ids
        return t5_ids, clip_ids, targets

    t5_ids, clip_ids, targets = encode(training_scenes())
    heads = torch.nn.ModuleDict(
        {
            encoder: torch.nn.ModuleList(torch.nn.Linear(width, len(values)) for values in kinds.values())
            for encoder, width in (("t5", t5.config.d_model), ("clip", clip.config.hidden_size))
        }
    )

    def features(t5_batch: torch.Tensor, clip_batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "t5": t5(t5_batch, output_hidden_states=False)[0].mean(dim=1),
            "clip": clip(clip_batch, output_hidden_states=False).pooler_output,
        }

    params = [*t5.parameters(), *clip.parameters(), *heads.parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0)
    t5.train()
    clip.train()

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, targets.shape[0], generator)
        loss = torch.zeros(())
        for encoder, feature in features(t5_ids[index], clip_ids[index]).items():
            for k, head in enumerate(cast(torch.nn.ModuleList, heads[encoder])):  # ModuleDict types values as Module
                loss = loss + torch.nn.functional.cross_entropy(head(feature), targets[index, k])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    result: dict[str, Any] = _loop("text", cfg["steps"], step_fn, picker, log, progress)
    for module in (t5, clip):
        module.eval()
        for p in module.parameters():
            p.requires_grad_(False)
    # How well each encoder reads captions of combinations it never saw (the held-out prompts' scenes).
    t5_ids, clip_ids, targets = encode(list(HELD_OUT_SCENES))
    with torch.no_grad():
        held = features(t5_ids, clip_ids)
        result["held_out_accuracy"] = {
            encoder: float(
                torch.stack(
                    [
                        cast(torch.nn.ModuleList, heads[encoder])[k](feature).argmax(-1) == targets[:, k]
                        for k in range(len(kinds))
                    ]
                )
                .all(dim=0)
                .float()
                .mean()
            )
            for encoder, feature in held.items()
        }
    accuracy = ", ".join(f"{k} {v:.3f}" for k, v in result["held_out_accuracy"].items())
    log.write(f"text: held-out captions read right (all four attributes): {accuracy}")
    return result


def _train_vae(
    vae: Any,
    images: torch.Tensor,
    cfg: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, float]:
    optimizer = torch.optim.AdamW(vae.parameters(), lr=cfg["lr"], weight_decay=0.0)
    vae.train()

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, images.shape[0], generator)
        batch = images[index]
        crop = cfg.get("crop")
        if crop and crop < batch.shape[-1]:
            # The VAE is convolutional: random crops (one offset per batch) cost a fraction of full images.
            y, x = (int(v) for v in torch.randint(0, batch.shape[-1] - crop + 1, (2,), generator=generator))
            batch = batch[:, :, y : y + crop, x : x + crop]
        posterior = vae.encode(batch).latent_dist
        latent = posterior.mean + posterior.std * torch.randn(posterior.mean.shape, generator=generator)
        reconstruction = vae.decode(latent).sample
        loss: torch.Tensor = (
            torch.nn.functional.mse_loss(reconstruction, batch) + cfg["kl_weight"] * posterior.kl().mean()
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    result = _loop("vae", cfg["steps"], step_fn, picker, log, progress)
    vae.eval()
    return result


@torch.no_grad()
def _encode_latents(vae: Any, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    return torch.cat([vae.encode(images[i : i + batch]).latent_dist.mean for i in range(0, len(images), batch)])


@torch.no_grad()
def _encode_captions(pipe: Any, captions: list[str]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    unique = sorted(set(captions) | {""})
    table: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for i in range(0, len(unique), 256):
        chunk = unique[i : i + 256]
        embeds, pooled, _ = pipe.encode_prompt(chunk, prompt_2=None, max_sequence_length=MAX_SEQUENCE_LENGTH)
        for j, caption in enumerate(chunk):
            table[caption] = (embeds[j], pooled[j])
    return table


def model_guidance_target(
    target: torch.Tensor, captioned: torch.Tensor, uncaptioned: torch.Tensor, dropped: torch.Tensor, weight: float
) -> torch.Tensor:
    """The rectified-flow target with model guidance (Tang et al. 2025, "Diffusion Models without CFG").

    A captioned sample's target ``noise - x0`` leans by ``weight`` times the model's own captioned minus
    uncaptioned velocity (both without gradient); a sample whose caption was dropped keeps the plain target,
    so the uncaptioned velocity stays the data's. The fixed point is ``u + (v - u) / (1 - weight)``: one
    captioned pass draws what true classifier-free guidance at scale ``1 / (1 - weight)`` draws.
    """
    lean = (captioned - uncaptioned) * (~dropped).to(target.dtype)[:, None, None]
    return target + weight * lean


def noised_sample(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Rectified flow's sample at time ``t`` (one per batch row): the straight line ``(1 - t) x0 + t noise``.

    ``t`` is the flow-match scheduler's sigma (FluxPipeline passes the transformer ``timestep / 1000``, that
    sigma): 0 is the data, 1 pure noise.
    """
    return (1 - t[:, None, None]) * x0 + t[:, None, None] * noise


def velocity_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The velocity the transformer learns, ``noise - x0``: d/dt of ``noised_sample``, as the Euler step reads it."""
    return noise - x0


def ema_decay(step: int, ema: float) -> float:
    """The EMA's decay after training step ``step`` (from 0): ``(1 + step) / (10 + step)``, at most ``ema``."""
    return min(ema, (1 + step) / (10 + step))


@torch.no_grad()
def ema_update(ema: dict[str, torch.Tensor], state: dict[str, torch.Tensor], decay: float) -> None:
    """Move the EMA weights toward the model's ``state`` in place: ``decay * ema + (1 - decay) * state``.

    Entries that are not floating point (integer buffers) are copied.
    """
    for key, value in state.items():
        if value.dtype.is_floating_point:
            ema[key].mul_(decay).add_(value.detach(), alpha=1 - decay)
        else:
            ema[key].copy_(value)


def _train_transformer(
    pipe: Any,
    latents: torch.Tensor,
    captions: list[str],
    cfg: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, float]:
    from diffusers import FluxPipeline

    transformer = pipe.transformer
    table = _encode_captions(pipe, captions)
    caption_index = {caption: i for i, caption in enumerate(sorted(table))}
    embeds_table = torch.stack([table[c][0] for c in sorted(table)])
    pooled_table = torch.stack([table[c][1] for c in sorted(table)])
    image_caption = torch.tensor([caption_index[c] for c in captions])
    empty = caption_index[""]
    _, channels, height, width = latents.shape
    packed = FluxPipeline._pack_latents(latents, latents.shape[0], channels, height, width)
    img_ids = FluxPipeline._prepare_latent_image_ids(1, height // 2, width // 2, "cpu", torch.float32)
    txt_ids = torch.zeros(MAX_SEQUENCE_LENGTH, 3)
    ema = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=cfg["lr"], weight_decay=0.0)
    transformer.train()

    guidance_weight = cfg.get("model_guidance", {}).get("weight", 0.0)
    guidance_from = cfg.get("model_guidance", {}).get("from_step", 0)

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, packed.shape[0], generator)
        x0 = packed[index]
        which = image_caption[index]
        drop = torch.rand(cfg["batch"], generator=generator) < cfg["empty_caption"]
        which = torch.where(drop, torch.full_like(which, empty), which)
        noise = torch.randn(x0.shape, generator=generator)
        t = torch.sigmoid(torch.randn(cfg["batch"], generator=generator))
        xt = noised_sample(x0, noise, t)

        def velocity(captions: torch.Tensor) -> torch.Tensor:
            return cast(
                torch.Tensor,
                transformer(
                    hidden_states=xt,
                    timestep=t,
                    guidance=None,
                    pooled_projections=pooled_table[captions],
                    encoder_hidden_states=embeds_table[captions],
                    txt_ids=txt_ids,
                    img_ids=img_ids,
                    return_dict=False,
                )[0],
            )

        prediction = velocity(which)
        target = velocity_target(x0, noise)
        if guidance_weight and step >= guidance_from:
            with torch.no_grad():
                unconditional = velocity(torch.full_like(which, empty))
            target = model_guidance_target(target, prediction.detach(), unconditional, drop, guidance_weight)
        loss = torch.nn.functional.mse_loss(prediction, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ema_update(ema, transformer.state_dict(), ema_decay(step, cfg["ema"]))
        return loss.item()

    result = _loop("transformer", cfg["steps"], step_fn, picker, log, progress)
    transformer.load_state_dict(ema)
    transformer.eval()
    return result


def train(
    out_dir: Path,
    config: dict[str, Any] | None = None,
    threads: int | None = None,
    progress: bool = True,
    log_to: Path | None = None,
) -> dict[str, Any]:
    """Train mini-flux from its seed and write the weights, manifest and log into ``out_dir``.

    Three stages: the text encoders learn to read captions, the VAE learns to reconstruct the world's
    images, the transformer learns rectified flow on the VAE's latents with the (then frozen) encoders'
    embeddings. ``threads`` fixes the torch thread count; by default it is re-chosen during training (1 or
    2, whichever is faster at the moment). Returns the manifest.
    """
    import diffusers
    import transformers
    from diffusers import FluxPipeline
    from safetensors.torch import save_model

    config = copy.deepcopy(config or MINI_FLUX_CONFIG)
    train_cfg = config["train"]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = TrainLog(log_to or out_dir / LOG_FILE)
    picker = ThreadPicker(_thread_candidates(threads))
    started = time.perf_counter()
    seed = train_cfg["seed"]
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)

    log.write(f"mini-flux training: world {WORLD_VERSION}, seed {seed}, {train_cfg['images']} images")
    images_np, captions = make_dataset(train_cfg["images"], seed)
    images = torch.from_numpy(images_np)
    log.write(f"data: {len(captions)} images in {time.perf_counter() - started:.0f}s")

    components = build_components(config)
    results = {"text": _train_text_encoders(components, train_cfg["text"], generator, picker, log, progress)}
    results["vae"] = _train_vae(components["vae"], images, train_cfg["vae"], generator, picker, log, progress)
    torch.set_num_threads(picker.current)
    latents = _encode_latents(components["vae"], images)
    shift = float(latents.mean())
    scale = float(1.0 / latents.std())
    latent = {"shift_factor": round(shift, 6), "scaling_factor": round(scale, 6)}
    components["vae"].register_to_config(**latent)
    psnr = _reconstruction_psnr(components["vae"])
    log.write(f"vae: held-out reconstruction PSNR {psnr:.2f} dB, latent shift {shift:.4f} scale {scale:.4f}")
    del images

    pipe = FluxPipeline(**components)
    scaled = (latents - shift) * scale
    results["transformer"] = _train_transformer(
        pipe, scaled, captions, train_cfg["transformer"], generator, picker, log, progress
    )
    final_losses = {stage: result["final_loss"] for stage, result in results.items()}
    seconds = {stage: result["seconds"] for stage, result in results.items()}
    seconds["total"] = time.perf_counter() - started

    files = {}
    for name, filename in COMPONENT_FILES.items():
        save_model(components[name], str(out_dir / filename))
        files[filename] = file_sha256(out_dir / filename)
    combined = combined_sha256(files)
    manifest = {
        "name": "mini-flux",
        "world_version": WORLD_VERSION,
        "config": config,
        "latent": latent,
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "final_losses": final_losses,
        "text_held_out_accuracy": results["text"]["held_out_accuracy"],
        "vae_reconstruction_psnr_db": psnr,
        "seconds": seconds,
        "versions": {
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "transformers": transformers.__version__,
        },
        "files": files,
        "sha256": combined,
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    losses = ", ".join(f"{k} {v:.5f}" for k, v in final_losses.items())
    log.write(f"done in {seconds['total']:.0f}s: final losses {losses}; sha256 {combined[:16]}")
    return manifest


@torch.no_grad()
def _reconstruction_psnr(vae: Any, count: int = 64) -> float:
    """Mean PSNR (dB) of the VAE's reconstructions of held-out scenes."""
    scenes = [HELD_OUT_SCENES[i % len(HELD_OUT_SCENES)] for i in range(count)]
    images = torch.from_numpy(np.stack([render_array(s, seed=10_000 + i) for i, s in enumerate(scenes)]))
    reconstruction = vae.decode(vae.encode(images).latent_dist.mean).sample.clamp(-1, 1)
    mse = ((reconstruction - images) ** 2).mean(dim=(1, 2, 3))
    return float((10 * torch.log10(4.0 / mse)).mean())
