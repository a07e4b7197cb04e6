"""Ground-truth prompt adherence for the moving-shapes world (``accel.zoo.video_world``), by classical analysis.

From a generated video, ``analyse_video`` recovers the background colour (median of every frame's border,
nearest palette colour), the ball in each frame (the largest connected region that differs from the
background), its colour (median of the regions' interiors over the frames, nearest palette colour), the
direction of motion (the centroid track's displacement from the first frame to the last: its dominant axis
and sign, none when it moves less than ``MIN_TRAVEL`` of the frame) and persistence (a ball in every frame).
``score_video`` compares that with the scene a caption names: background, colour and direction, and
persistence, which every caption of the world implies. ``accel.measure.adherence``'s ``summarise`` and
``paired_loss`` (intervals, lost and gained against the baseline video by video) take these scores with
``VIDEO_ATTRIBUTES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.measure.adherence import MASK_DISTANCE, MIN_SHAPE_PIXELS, _nearest_colour, _to_array
from accel.zoo import video_world

VIDEO_ATTRIBUTES = ("background", "colour", "direction", "persistence")
# The smallest centroid displacement (first to last frame, as a fraction of the frame size) read as motion;
# the world's balls travel 0.40-0.50.
MIN_TRAVEL = 0.15


@dataclass(frozen=True)
class VideoAnalysis:
    """What the analysis found in one video; ``colour`` and ``direction`` are None when it found no ball."""

    background: str
    colour: str | None
    direction: str | None
    persistence: bool
    centroids: tuple[tuple[float, float] | None, ...]

    def as_dict(self) -> dict[str, Any]:
        """Plain dict keyed by attribute kind (``VIDEO_ATTRIBUTES``)."""
        return {
            "background": self.background,
            "colour": self.colour,
            "direction": self.direction,
            "persistence": self.persistence,
        }


def video_frames(video: Any) -> list[np.ndarray]:
    """HxWx3 float32 frames in 0-255 from a list of PIL images or arrays, or an F,C,H,W / F,H,W,C array."""
    return [_to_array(frame) for frame in video]


def _ball(pixels: np.ndarray, background_rgb: np.ndarray) -> np.ndarray | None:
    """The mask of the largest region that differs from the background, None when it is too small."""
    from scipy import ndimage

    distance = np.sqrt(((pixels - background_rgb[None, None, :]) ** 2).sum(axis=2))
    labels, count = ndimage.label(distance > MASK_DISTANCE)
    if count == 0:
        return None
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=range(1, count + 1))
    mask = labels == (int(np.argmax(sizes)) + 1)
    if mask.sum() < MIN_SHAPE_PIXELS:
        return None
    filled: np.ndarray = ndimage.binary_fill_holes(mask)
    return filled


def _direction(centroids: list[tuple[float, float]]) -> str | None:
    """The named direction of the track's displacement from first to last centroid, None if it barely moves."""
    if len(centroids) < 2:
        return None
    dx = centroids[-1][0] - centroids[0][0]
    dy = centroids[-1][1] - centroids[0][1]
    if max(abs(dx), abs(dy)) < MIN_TRAVEL:
        return None
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def analyse_video(video: Any) -> VideoAnalysis:
    """Recover background colour, the ball's colour, its direction of motion and its persistence from a video."""
    from scipy import ndimage

    frames = video_frames(video)
    borders = []
    for pixels in frames:
        borders += [pixels[:2].reshape(-1, 3), pixels[-2:].reshape(-1, 3)]
        borders += [pixels[:, :2].reshape(-1, 3), pixels[:, -2:].reshape(-1, 3)]
    background_rgb = np.median(np.concatenate(borders), axis=0)
    background = _nearest_colour(background_rgb)
    interiors: list[np.ndarray] = []
    centroids: list[tuple[float, float] | None] = []
    for pixels in frames:
        mask = _ball(pixels, background_rgb)
        if mask is None:
            centroids.append(None)
            continue
        interior = ndimage.binary_erosion(mask, iterations=2)
        interiors.append(pixels[interior if interior.sum() >= 4 else mask])
        height, width = mask.shape
        ys, xs = np.nonzero(mask)
        centroids.append(((xs.mean() + 0.5) / width, (ys.mean() + 0.5) / height))
    found = [c for c in centroids if c is not None]
    colour = _nearest_colour(np.median(np.concatenate(interiors), axis=0)) if interiors else None
    return VideoAnalysis(
        background=background,
        colour=colour,
        direction=_direction(found),
        persistence=bool(frames) and len(found) == len(frames),
        centroids=tuple(centroids),
    )


def score_video(expected: video_world.VideoScene, video: Any) -> dict[str, float]:
    """Per attribute kind (``VIDEO_ATTRIBUTES``) 1.0 (recovered) or 0.0, and ``overall`` (their mean), for one video."""
    found = analyse_video(video).as_dict()
    wanted: dict[str, Any] = {**expected.attributes(), "persistence": True}
    result = {kind: float(found[kind] == wanted[kind]) for kind in VIDEO_ATTRIBUTES}
    result["overall"] = sum(result.values()) / len(result)
    return result
