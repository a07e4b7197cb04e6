"""Prompt adherence of a sweep's cells, scored by the runner from the saved outputs.

A model has a ground truth when its source declares a world (a zoo entry's ``world``, or the profile's
``models[].world``): each prompt of the workload then names a scene, from the profile's prompt set
(``workload.prompt_set``) or parsed from the caption (the moving-shapes world's videos: from the caption).
Every output image (or video) of a cell is scored against its prompt's scene (``accel.measure.adherence``,
``accel.measure.video_adherence``); the record gets the mean per attribute kind with a 95% interval over
prompts and seeds, each image's scores, and a variant also what it lost against the
baseline image by image (``adherence.vs_baseline``; ``adherence_loss`` is its share of attributes lost, which
gains on other images do not offset). Models without a world get nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accel.zoo import world as shapes_world
from accel.zoo.prompt_sets import BUILTIN_PROMPT_SETS, load_prompt_set

__all__ = ["BUILTIN_PROMPT_SETS", "attach_adherence", "expected_scenes", "load_prompt_set", "model_world"]

KNOWN_WORLDS = ("shapes", "moving-shapes")


def model_world(model: Any) -> str | None:
    """The world a profile model declares: its own ``world`` key, else its zoo entry's; None if neither."""
    from accel import zoo

    declared: str | None = getattr(model, "world", None)
    if declared:
        return declared
    return zoo.ZOO[model.source].world if zoo.is_zoo_name(model.source) else None


def expected_scenes(workload: Any, world: str = "shapes") -> list[Any]:
    """Per prompt of the workload, the scene it names (from the prompt set, else the caption), or None.

    For the moving-shapes world (mini-wan's videos) the caption alone names it (``video_world.parse_caption``).
    """
    if world == "moving-shapes":
        from accel.zoo import video_world

        return [video_world.parse_caption(prompt) for prompt in workload.prompts]
    table: dict[str, shapes_world.Scene] = {}
    entries = getattr(workload, "prompt_expectations", None)  # frozen in the profile when it was loaded
    if entries is None and getattr(workload, "prompt_set", None):
        entries = load_prompt_set(workload.prompt_set)
    if entries:
        table = {e["prompt"]: shapes_world.Scene(**e["expect"]) for e in entries}
    return [table.get(prompt) or shapes_world.parse_caption(prompt) for prompt in workload.prompts]


def _to_image(array: np.ndarray) -> np.ndarray:
    """An output array (C,H,W or F,C,H,W in [0, 1]) as one HxWx3 image (the first frame)."""
    frame = array[0] if array.ndim == 4 else array
    if frame.shape[0] in (1, 3) and frame.shape[-1] not in (1, 3):
        frame = frame.transpose(1, 2, 0)
    pixels: np.ndarray = np.clip(frame, 0.0, 1.0) * 255.0
    return pixels


def _to_video(array: np.ndarray) -> np.ndarray:
    """An output array (F,C,H,W in [0, 1]) as F HxWx3 frames in 0-255."""
    return np.stack([_to_image(frame) for frame in array]) if array.ndim == 4 else _to_image(array)[None]


def score_outputs(outputs_file: Path, keys: list[str], scenes: list[Any], world: str = "shapes") -> dict[str, Any]:
    """Adherence summary of one cell's saved outputs (keys ``p<prompt>_s<seed>_n<image>``).

    A moving-shapes world's outputs are videos, scored as a whole (``accel.measure.video_adherence``).
    """
    from accel.measure.adherence import ATTRIBUTES, score, summarise
    from accel.measure.video_adherence import VIDEO_ATTRIBUTES, score_video

    video = world == "moving-shapes"
    scores, scored = [], []
    with np.load(outputs_file) as outputs:
        for key in keys:
            scene = scenes[int(key.split("_")[0][1:])]
            if scene is not None and key in outputs:
                array = outputs[key]
                scores.append(score_video(scene, _to_video(array)) if video else score(scene, _to_image(array)))
                scored.append(key)
    return summarise(scores, scored, VIDEO_ATTRIBUTES if video else ATTRIBUTES)


def attach_adherence(
    record: dict[str, Any],
    model: Any,
    workload: Any,
    baseline: dict[str, Any] | None,
    run_dir: Path,
    keys: list[str],
) -> None:
    """Add ``adherence`` (and, for a variant, ``adherence_loss`` vs the baseline) to a measured record."""
    world = model_world(model)
    if world is None or not record.get("outputs_file"):
        return
    scenes = expected_scenes(workload, world)
    if not any(scenes):
        record.setdefault("notes", []).append(f"world '{world}': no prompt of the workload names a scene")
        return
    summary = score_outputs(Path(run_dir) / record["outputs_file"], keys, scenes, world)
    summary["world"] = world
    record["adherence"] = summary
    base = (baseline or {}).get("adherence")
    if base and record is not baseline:
        if "per_image" in base:
            from accel.measure.adherence import paired_loss

            summary["vs_baseline"] = paired_loss(base["per_image"], summary["per_image"])
            record["adherence_loss"] = summary["vs_baseline"]["loss"]
        else:  # a baseline measured before records kept each image's scores (--resume of an older run)
            record["adherence_loss"] = base["overall"] - summary["overall"]
            record.setdefault("notes", []).append(
                "adherence loss is the net change of overall adherence: the baseline's record has no per-image scores"
            )
