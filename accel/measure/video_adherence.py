"""Ground-truth prompt adherence for the moving-shapes world (``accel.zoo.video_world``), by classical analysis.

From a generated video, ``analyse_video`` recovers the background colour (median of every frame's border,
nearest palette colour), the ball in each frame (the largest connected region that differs from the
background; the world wraps, so a region meeting itself across an edge is one), its colour (median of the
regions' interiors over the frames, nearest palette colour), the direction of motion (the centroid track's
displacement, frame to frame the short way round the torus, summed: its dominant axis and sign, none when it
moves less than ``MIN_TRAVEL`` of the frame) and persistence (a ball in every frame).
``score_video`` compares that with the scene a caption names: background, colour and direction, and
persistence, which every caption of the world implies. ``accel.measure.adherence``'s ``summarise`` and
``paired_loss`` (intervals, lost and gained against the baseline video by video) take these scores with
``VIDEO_ATTRIBUTES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from accel.measure.adherence import MASK_DISTANCE, MIN_SHAPE_PIXELS, _nearest_colour, _to_array
from accel.zoo import video_world

VIDEO_ATTRIBUTES = ("background", "colour", "direction", "persistence")
# The smallest centroid displacement (summed frame to frame, as a fraction of the frame size) read as motion;
# the world's balls travel 0.30-0.40.
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


def _torus_labels(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """Connected regions of ``mask`` on a torus (the world wraps): regions meeting across an edge are one."""
    from scipy import ndimage

    labels, count = ndimage.label(mask)
    parent = list(range(count + 1))

    def root(label: int) -> int:
        while parent[label] != label:
            parent[label] = parent[parent[label]]
            label = parent[label]
        return label

    for first, last in ((labels[:, 0], labels[:, -1]), (labels[0, :], labels[-1, :])):
        for a, b in zip(first.tolist(), last.tolist(), strict=True):
            if a and b and root(a) != root(b):
                parent[root(a)] = root(b)
    roots = np.array([root(label) for label in range(count + 1)])
    return roots[labels], count


def _ball(pixels: np.ndarray, background_rgb: np.ndarray) -> np.ndarray | None:
    """The mask of the largest region (on the torus) that differs from the background, None when too small."""
    from scipy import ndimage

    distance = np.sqrt(((pixels - background_rgb[None, None, :]) ** 2).sum(axis=2))
    labels, count = _torus_labels(distance > MASK_DISTANCE)
    if count == 0:
        return None
    sizes = np.bincount(labels.ravel(), minlength=count + 1)
    sizes[0] = 0
    mask = labels == int(np.argmax(sizes))
    if mask.sum() < MIN_SHAPE_PIXELS:
        return None
    filled: np.ndarray = ndimage.binary_fill_holes(mask)
    return filled


def _circular_mean(positions: np.ndarray, size: int) -> float:
    """The mean of pixel ``positions`` on a circle of ``size`` pixels, as a fraction of it in [0, 1)."""
    angles = 2 * np.pi * (positions + 0.5) / size
    return float(np.arctan2(np.sin(angles).mean(), np.cos(angles).mean()) / (2 * np.pi)) % 1.0


def _wrapped(delta: float) -> float:
    """A displacement on the torus (a fraction of the frame), taken the short way round: in [-0.5, 0.5)."""
    return (delta + 0.5) % 1.0 - 0.5


def _direction(centroids: list[tuple[float, float]]) -> str | None:
    """The named direction of the track's displacement (frame to frame, the short way round on the torus, summed),
    None if it barely moves."""
    if len(centroids) < 2:
        return None
    dx = sum(_wrapped(b[0] - a[0]) for a, b in pairwise(centroids))
    dy = sum(_wrapped(b[1] - a[1]) for a, b in pairwise(centroids))
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
        centroids.append((_circular_mean(xs, width), _circular_mean(ys, height)))
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
