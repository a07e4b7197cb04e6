"""mini-wan's adherence on its world: generate captions' videos and score them against the ground truth.

Shared by ``benchmarks/mini_wan_adherence.py`` and the tests: ``load_pipeline`` assembles the committed (or a
retrain's) weights into a ``WanPipeline``, ``only_expert`` makes every step run on one expert (the pipeline's
own switch, moved by ``boundary_ratio``), ``held_out_adherence`` generates and scores a set of scenes. Two
diagnoses of what limits it: ``vae_round_trip_adherence`` scores the world's own videos after the VAE (what
the decoder lets through), ``caption_preference`` whether an expert reads a caption word at a noise level.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accel.measure.adherence import summarise
from accel.measure.video_adherence import VIDEO_ATTRIBUTES, score_video
from accel.zoo.mini_wan import EXPERTS, MAX_SEQUENCE_LENGTH, MINI_WAN_CONFIG, build_mini_wan, read_manifest
from accel.zoo.video_world import FRAME_SIZE, FRAMES, VideoScene


def load_pipeline(weights_dir: Path | None = None) -> Any:
    """The trained mini-wan as a ``WanPipeline`` (the committed weights, or a retrain's ``weights_dir``).

    A retrain is built from the recipe in its own manifest (its ``boundary_ratio`` may not be the committed one's:
    the experts must switch where they were trained to)."""
    from diffusers import WanPipeline

    config = MINI_WAN_CONFIG if weights_dir is None else read_manifest(weights_dir)["config"]
    pipe: Any = WanPipeline(**build_mini_wan(config, weights_dir=weights_dir))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextmanager
def only_expert(pipe: Any, expert: str | None) -> Iterator[None]:
    """Every step on ``expert`` (``transformer`` or ``transformer_2``) inside the block; None: both, as trained.

    Moves the pipeline's ``boundary_ratio``: 0 sends every timestep to ``transformer``, above 1 every one to
    ``transformer_2``. The trained ratio comes back on exit.
    """
    if expert is not None and expert not in EXPERTS:
        raise ValueError(f"expert '{expert}': expected one of {', '.join(EXPERTS)}")
    trained = pipe.config.boundary_ratio
    if expert is not None:
        pipe.register_to_config(boundary_ratio=0.0 if expert == "transformer" else 1.5)
    try:
        yield
    finally:
        pipe.register_to_config(boundary_ratio=trained)


def generate(
    pipe: Any, prompt: str, seed: int, guidance_scale: float, steps: int, guidance_scale_2: float | None = None
) -> Any:
    """One video (frames x height x width x 3, floats in [0, 1]) of ``prompt`` at the world's size.

    ``guidance_scale`` guides the high-noise expert's steps, ``guidance_scale_2`` the low-noise expert's
    (``WanPipeline``'s own argument; None: ``guidance_scale`` for both, the pipeline's default)."""
    import torch

    return pipe(
        prompt,
        height=FRAME_SIZE,
        width=FRAME_SIZE,
        num_frames=FRAMES,
        num_inference_steps=steps,
        guidance_scale=guidance_scale,
        guidance_scale_2=guidance_scale_2,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        generator=torch.Generator().manual_seed(seed),
        output_type="np",
    ).frames[0]


def held_out_adherence(
    pipe: Any,
    scenes: list[VideoScene],
    seeds: list[int],
    guidance_scale: float,
    steps: int = 20,
    guidance_scale_2: float | None = None,
) -> dict[str, Any]:
    """Adherence summary (``accel.measure.adherence.summarise`` over ``VIDEO_ATTRIBUTES``) of each scene's caption
    (template ``i`` for the ``i``-th scene) generated at each seed; ``per_image`` keys ``p<i>_s<seed>``.
    ``guidance_scale_2``: the low-noise expert's guidance (``generate``)."""
    scores, keys = [], []
    for seed in seeds:
        for i, scene in enumerate(scenes):
            video = generate(pipe, scene.caption(i), seed, guidance_scale, steps, guidance_scale_2)
            scores.append(score_video(scene, video))
            keys.append(f"p{i}_s{seed}")
    return summarise(scores, keys, VIDEO_ATTRIBUTES)


def latent_scale(vae: Any) -> tuple[Any, Any]:
    """The VAE's per-channel ``latents_mean`` and ``latents_std`` shaped to broadcast over N x C x F x H x W: the
    experts' latents are ``(encoded - mean) / std``, the decoder's ``latents * std + mean``."""
    import torch

    view = (1, -1, 1, 1, 1)
    return torch.tensor(vae.config.latents_mean).view(view), torch.tensor(vae.config.latents_std).view(view)


def vae_round_trip_adherence(vae: Any, scenes: list[VideoScene], seeds: list[int]) -> dict[str, Any]:
    """Adherence summary of the world's rendered videos after the VAE's encode and decode (its latent mean).

    What the VAE lets through: generated videos cannot score better than the decoder draws the world's own
    videos. ``per_image`` keys ``p<i>_s<seed>``; scene ``i`` at ``seed`` is rendered with seed
    ``10_000 + 100 * seed + i`` (not a training seed).
    """
    import numpy as np
    import torch

    from accel.zoo.video_world import render_array

    scores, keys = [], []
    for seed in seeds:
        for i, scene in enumerate(scenes):
            video = torch.from_numpy(render_array(scene, seed=10_000 + 100 * seed + i))[None]
            with torch.no_grad():
                decoded = vae.decode(vae.encode(video).latent_dist.mean).sample.clamp(-1, 1)[0]
            frames = ((decoded.permute(1, 2, 3, 0).numpy() + 1.0) / 2.0).astype(np.float32)
            scores.append(score_video(scene, frames))
            keys.append(f"p{i}_s{seed}")
    return summarise(scores, keys, VIDEO_ATTRIBUTES)


def caption_preference(
    pipe: Any, scene: VideoScene, other: VideoScene, expert: str, sigma: float, draws: int = 32
) -> dict[str, float]:
    """Whether ``expert`` uses the caption word in which ``scene`` and ``other`` differ, at noise level ``sigma``.

    ``draws`` videos of ``scene`` (rendered, encoded by the VAE, normalised) are noised to ``sigma``; the expert
    predicts their velocity once under ``scene``'s caption and once under ``other``'s. An expert that reads the
    word is closer to the true velocity under the right caption. Returns both mean squared errors, their ratio
    (wrong / right: 1 when the word is ignored) and the fraction of draws where the right caption was closer.
    The world is translation-invariant (the ball starts anywhere), so what a direction word decides is the
    motion between frames: a relation this probe reads where the mean prediction of pure noise cannot.
    """
    import numpy as np
    import torch

    from accel.zoo.mini_flux_objective import noised_sample, velocity_target
    from accel.zoo.video_world import render_array

    mean, std = latent_scale(pipe.vae)
    videos = torch.from_numpy(np.stack([render_array(scene, seed=50_000 + i) for i in range(draws)]))
    with torch.no_grad():
        x0 = (pipe.vae.encode(videos).latent_dist.mean - mean) / std
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0))
    sigmas = torch.full((draws,), sigma)
    noisy, target = noised_sample(x0, noise, sigmas), velocity_target(x0, noise)

    def errors(caption_scene: VideoScene) -> Any:
        embeds = pipe.encode_prompt([caption_scene.caption(0)], do_classifier_free_guidance=False,
                                    max_sequence_length=MAX_SEQUENCE_LENGTH)[0].expand(draws, -1, -1)  # fmt: skip
        with torch.no_grad():
            velocity = getattr(pipe, expert)(hidden_states=noisy, timestep=sigmas * 1000,
                                             encoder_hidden_states=embeds, return_dict=False)[0]  # fmt: skip
        return ((velocity - target) ** 2).mean(dim=(1, 2, 3, 4))

    right, wrong = errors(scene), errors(other)
    return {
        "right_mse": float(right.mean()),
        "wrong_mse": float(wrong.mean()),
        "ratio": float(wrong.mean() / right.mean()),
        "right_closer": float((right < wrong).float().mean()),
    }


def finish(
    pipe: Any, latents: Any, prompt: str, start: int, guidance_scale: float, guidance_scale_2: float, steps: int = 20
) -> Any:
    """The frames (F x H x W x 3, [0, 1]) ``pipe`` makes of normalised ``latents`` from step ``start`` of its
    ``steps``-step schedule on, as ``WanPipeline`` runs the steps: Euler, each step on the expert its timestep picks
    at ``boundary_ratio``, classifier-free guidance with the empty negative prompt (``guidance_scale`` on
    ``transformer``'s steps, ``guidance_scale_2`` on ``transformer_2``'s; as the pipeline, none on either expert's
    when ``guidance_scale`` is 1 or less). From step 0 with the pipeline's own noise as ``latents`` it is the
    pipeline's video (``tests/test_mini_wan.py``)."""
    import numpy as np
    import torch

    mean, std = latent_scale(pipe.vae)
    pipe.scheduler.set_timesteps(steps)
    sigmas = [float(s) for s in pipe.scheduler.sigmas]
    boundary = pipe.config.boundary_ratio * 1000

    def embed(text: str) -> Any:
        return pipe.encode_prompt([text], do_classifier_free_guidance=False, max_sequence_length=MAX_SEQUENCE_LENGTH)[0]

    caption, empty = embed(prompt), embed("")
    guided = guidance_scale > 1  # WanPipeline's do_classifier_free_guidance reads guidance_scale alone
    with torch.no_grad():
        for k in range(start, len(sigmas) - 1):
            timestep = pipe.scheduler.timesteps[k : k + 1]
            high = float(timestep) >= boundary
            expert, scale = (pipe.transformer, guidance_scale) if high else (pipe.transformer_2, guidance_scale_2)
            velocities = [
                expert(hidden_states=latents, timestep=timestep, encoder_hidden_states=e, return_dict=False)[0]
                for e in ((caption, empty) if guided else (caption,))
            ]
            velocity = velocities[1] + scale * (velocities[0] - velocities[1]) if guided else velocities[0]
            latents = latents + (sigmas[k + 1] - sigmas[k]) * velocity
        decoded = pipe.vae.decode(latents * std + mean).sample.clamp(-1, 1)[0]
    return ((decoded.permute(1, 2, 3, 0).numpy() + 1.0) / 2.0).astype(np.float32)


def finish_from_truth(
    pipe: Any,
    scenes: list[VideoScene],
    seeds: list[int],
    sigma: float,
    guidance_scale: float,
    guidance_scale_2: float | None = None,
    steps: int = 20,
    videos: list[Any] | None = None,
) -> dict[str, Any]:
    """Adherence summary of videos the pipeline finishes (``finish``) from the world's own video noised part way.

    Each scene's rendered video (seed ``20_000 + 100 * seed + i``, not a training seed) is encoded (latent mean,
    normalised) and noised (noise seed ``100 * seed + i``) to the first sigma of the ``steps``-step schedule at or
    below ``sigma``, and the pipeline runs the remaining steps with the scene's caption. What the start holds of
    the caption (the direction included) the finish can keep or lose: from the switch's sigma it says whether the
    low-noise expert keeps a direction it is handed; set against ``vae_round_trip_adherence`` (no noise) it says
    what the finish costs. ``per_image`` keys ``p<i>_s<seed>``; the summary adds ``start_sigma``. ``videos``, when
    given, receives each finished video's frames in that order (to look at what was scored).
    """
    import torch

    from accel.zoo.video_world import render_array

    mean, std = latent_scale(pipe.vae)
    pipe.scheduler.set_timesteps(steps)
    sigmas = [float(s) for s in pipe.scheduler.sigmas]
    start = next(k for k, s in enumerate(sigmas) if s <= sigma)
    second = guidance_scale if guidance_scale_2 is None else guidance_scale_2
    scores, keys = [], []
    for seed in seeds:
        for i, scene in enumerate(scenes):
            video = torch.from_numpy(render_array(scene, seed=20_000 + 100 * seed + i))[None]
            with torch.no_grad():
                x0 = (pipe.vae.encode(video).latent_dist.mean - mean) / std
            noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(100 * seed + i))
            latents = (1 - sigmas[start]) * x0 + sigmas[start] * noise
            frames = finish(pipe, latents, scene.caption(i), start, guidance_scale, second, steps)
            scores.append(score_video(scene, frames))
            keys.append(f"p{i}_s{seed}")
            if videos is not None:
                videos.append(frames)
    summary: dict[str, Any] = summarise(scores, keys, VIDEO_ATTRIBUTES)
    summary["start_sigma"] = sigmas[start]
    return summary
