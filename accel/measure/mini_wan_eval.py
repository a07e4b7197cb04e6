"""mini-wan's adherence on its world: generate captions' videos and score them against the ground truth.

Shared by ``benchmarks/mini_wan_adherence.py`` and the tests: ``load_pipeline`` assembles the committed (or a
retrain's) weights into a ``WanPipeline``, ``only_expert`` makes every step run on one expert (the pipeline's
own switch, moved by ``boundary_ratio``), ``held_out_adherence`` generates and scores a set of scenes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accel.measure.adherence import summarise
from accel.measure.video_adherence import VIDEO_ATTRIBUTES, score_video
from accel.zoo.mini_wan import EXPERTS, MAX_SEQUENCE_LENGTH, MINI_WAN_CONFIG, build_mini_wan
from accel.zoo.video_world import FRAME_SIZE, FRAMES, VideoScene


def load_pipeline(weights_dir: Path | None = None) -> Any:
    """The trained mini-wan as a ``WanPipeline`` (the committed weights, or a retrain's ``weights_dir``)."""
    from diffusers import WanPipeline

    pipe: Any = WanPipeline(**build_mini_wan(MINI_WAN_CONFIG, weights_dir=weights_dir))
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


def generate(pipe: Any, prompt: str, seed: int, guidance_scale: float, steps: int) -> Any:
    """One video (frames x height x width x 3, floats in [0, 1]) of ``prompt`` at the world's size."""
    import torch

    return pipe(
        prompt,
        height=FRAME_SIZE,
        width=FRAME_SIZE,
        num_frames=FRAMES,
        num_inference_steps=steps,
        guidance_scale=guidance_scale,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        generator=torch.Generator().manual_seed(seed),
        output_type="np",
    ).frames[0]


def held_out_adherence(
    pipe: Any, scenes: list[VideoScene], seeds: list[int], guidance_scale: float, steps: int = 20
) -> dict[str, Any]:
    """Adherence summary (``accel.measure.adherence.summarise`` over ``VIDEO_ATTRIBUTES``) of each scene's caption
    (template ``i`` for the ``i``-th scene) generated at each seed; ``per_image`` keys ``p<i>_s<seed>``."""
    scores, keys = [], []
    for seed in seeds:
        for i, scene in enumerate(scenes):
            video = generate(pipe, scene.caption(i), seed, guidance_scale, steps)
            scores.append(score_video(scene, video))
            keys.append(f"p{i}_s{seed}")
    return summarise(scores, keys, VIDEO_ATTRIBUTES)
