"""mini-flux's training: the data, the three stages' objectives and ``train``, which writes weights and manifest.

First the text encoders learn to name a caption's attributes (the stand-in for their language pretraining),
then the VAE learns reconstruction, then the transformer FLUX's objective (rectified flow: it predicts
``noise - x0`` at a logit-normal time ``t``) with the encoders frozen. ``train`` writes the weight files and
a manifest (config, world version, final losses, each file's SHA-256 and their combined hash) that
``accel.zoo.mini_flux`` verifies before building. Imported through ``accel.zoo.mini_flux``, which re-exports
the public names.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog, _begin_step, _loop, _thread_candidates
from accel.zoo.mini_flux_model import (
    COMPONENT_FILES,
    LOG_FILE,
    MAX_SEQUENCE_LENGTH,
    MINI_FLUX_CONFIG,
    build_components,
)
from accel.zoo.mini_flux_objective import ema_decay, ema_update, model_guidance_target, noised_sample, velocity_target
from accel.zoo.trained_weights import write_weights
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
)


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
    model: str = "mini-flux",
    weight: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Train ``vae`` to reconstruct ``images`` (NCHW images, or NCFHW videos for mini-wan); the loop's result.

    ``weight`` (optional) gives each pixel of a batch its weight in the reconstruction loss (a tensor that
    broadcasts against the batch); the loss is then the weighted mean of the squared error.
    """
    optimizer = torch.optim.AdamW(vae.parameters(), lr=cfg["lr"], weight_decay=0.0)
    vae.train()

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, images.shape[0], generator)
        batch = images[index]
        crop = cfg.get("crop")
        if crop and crop < batch.shape[-1]:
            # The VAE is convolutional: random crops (one offset per batch) cost a fraction of full images.
            y, x = (int(v) for v in torch.randint(0, batch.shape[-1] - crop + 1, (2,), generator=generator))
            batch = batch[..., y : y + crop, x : x + crop]  # the last two axes: images' and videos' (mini-wan)
        posterior = vae.encode(batch).latent_dist
        latent = posterior.mean + posterior.std * torch.randn(posterior.mean.shape, generator=generator)
        reconstruction = vae.decode(latent).sample
        if weight is None:
            error = torch.nn.functional.mse_loss(reconstruction, batch)
        else:
            squared = (reconstruction - batch) ** 2
            weights = weight(batch).expand_as(squared)
            error = (weights * squared).sum() / weights.sum()
        loss: torch.Tensor = error + cfg["kl_weight"] * posterior.kl().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    result = _loop("vae", cfg["steps"], step_fn, picker, log, progress, model)
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
    from diffusers import FluxPipeline

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
    }
    manifest = write_weights(components, out_dir, COMPONENT_FILES, manifest)
    combined = manifest["sha256"]
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
