"""Ground-truth prompt adherence for the shapes world, by classical image analysis.

From a generated image, ``analyse`` recovers the background colour (median of the border, nearest
palette colour), the shape (the largest connected region that differs from the background), its colour
(median of the region's interior), its position (the region's centroid, nearest anchor) and its class
(nearest prototype in a small space of silhouette features). ``score`` compares that with the scene a
prompt names: the share of the prompt's attributes the image has, per attribute kind and overall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.zoo import world

ATTRIBUTES = ("background", "colour", "shape", "position")
# A pixel belongs to the shape when it is this far (RGB, 0-255) from the estimated background.
MASK_DISTANCE = 60.0
MIN_SHAPE_PIXELS = 12


@dataclass(frozen=True)
class Analysis:
    """What the analysis found in one image; shape fields are None when no shape was found."""

    background: str
    colour: str | None
    shape: str | None
    position: str | None

    def as_dict(self) -> dict[str, str | None]:
        """Plain dict keyed by attribute kind."""
        return {"background": self.background, "colour": self.colour, "shape": self.shape, "position": self.position}


def _nearest_colour(rgb: np.ndarray) -> str:
    names = list(world.PALETTE)
    table = np.array([world.PALETTE[n] for n in names], dtype=np.float32)
    return names[int(np.argmin(((table - rgb[None, :]) ** 2).sum(axis=1)))]


def _to_array(image: Any) -> np.ndarray:
    """An HxWx3 float32 array in 0-255 from a PIL image or a uint8/float array."""
    array = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    if array.ndim == 3 and array.shape[0] == 3 and array.shape[-1] != 3:
        array = array.transpose(1, 2, 0)
    array = array.astype(np.float32)
    if array.max() <= 1.0 + 1e-6:
        array = array * 255.0
    return array


def _silhouette_features(mask: np.ndarray) -> np.ndarray:
    """(fill of the bounding box, width near the top, width near the bottom), widths relative to the widest row."""
    rows = np.flatnonzero(mask.any(axis=1))
    top, bottom = rows[0], rows[-1]
    cols = np.flatnonzero(mask.any(axis=0))
    box = mask[top : bottom + 1, cols[0] : cols[-1] + 1]
    widths = box.sum(axis=1).astype(np.float32)
    widest = max(float(widths.max()), 1.0)
    height = len(widths)
    near_top = widths[min(height - 1, round(0.2 * (height - 1)))] / widest
    near_bottom = widths[min(height - 1, round(0.8 * (height - 1)))] / widest
    return np.array([float(box.mean()), near_top, near_bottom], dtype=np.float32)


def _prototypes() -> dict[str, np.ndarray]:
    """Silhouette features of each ideal shape (drawn large, unjittered)."""
    protos = {}
    for shape in world.SHAPES:
        image = world.render(world.Scene("black", "white", shape, "centre"), size=128, jitter=False)
        mask = np.asarray(image, dtype=np.float32).mean(axis=2) > 128
        protos[shape] = _silhouette_features(mask)
    return protos


_PROTOTYPES: dict[str, np.ndarray] | None = None


def _classify(mask: np.ndarray) -> str:
    global _PROTOTYPES
    if _PROTOTYPES is None:
        _PROTOTYPES = _prototypes()
    features = _silhouette_features(mask)
    return min(_PROTOTYPES, key=lambda shape: float(((features - _PROTOTYPES[shape]) ** 2).sum()))


def analyse(image: Any) -> Analysis:
    """Recover background colour and the shape's colour, class and position from one image."""
    from scipy import ndimage

    pixels = _to_array(image)
    height, width = pixels.shape[:2]
    border = np.concatenate([pixels[:2].reshape(-1, 3), pixels[-2:].reshape(-1, 3)])
    border = np.concatenate([border, pixels[:, :2].reshape(-1, 3), pixels[:, -2:].reshape(-1, 3)])
    background_rgb = np.median(border, axis=0)
    background = _nearest_colour(background_rgb)
    distance = np.sqrt(((pixels - background_rgb[None, None, :]) ** 2).sum(axis=2))
    labels, count = ndimage.label(distance > MASK_DISTANCE)
    if count == 0:
        return Analysis(background, None, None, None)
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=range(1, count + 1))
    mask = labels == (int(np.argmax(sizes)) + 1)
    if mask.sum() < MIN_SHAPE_PIXELS:
        return Analysis(background, None, None, None)
    mask = ndimage.binary_fill_holes(mask)
    interior = ndimage.binary_erosion(mask, iterations=2)
    if interior.sum() < 4:
        interior = mask
    colour = _nearest_colour(np.median(pixels[interior], axis=0))
    ys, xs = np.nonzero(mask)
    cx, cy = (xs.mean() + 0.5) / width, (ys.mean() + 0.5) / height
    position = min(world.POSITIONS, key=lambda p: (world.POSITIONS[p][0] - cx) ** 2 + (world.POSITIONS[p][1] - cy) ** 2)
    return Analysis(background, colour, _classify(mask), position)


def score(expected: world.Scene, image: Any) -> dict[str, float]:
    """Per attribute kind the prompt names 1.0 (recovered) or 0.0, and ``overall`` (their mean), for one image.

    A kind the prompt leaves open (a position-free caption) is absent from the result, not scored.
    """
    found = analyse(image).as_dict()
    wanted = expected.attributes()
    result = {kind: float(found[kind] == wanted[kind]) for kind in ATTRIBUTES if kind in wanted}
    result["overall"] = sum(result.values()) / len(result)
    return result


def _wilson(successes: float, n: int) -> tuple[float, float]:
    """A 95% Wilson score interval for a share of ``successes`` out of ``n`` trials."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    z = 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _interval(values: list[float]) -> tuple[float, float]:
    """A 95% Wilson interval for the share of successes among ``values`` (each in [0, 1])."""
    return _wilson(sum(values), len(values))


def summarise(
    scores: list[dict[str, float]], keys: list[str] | None = None, attributes: tuple[str, ...] = ATTRIBUTES
) -> dict[str, Any]:
    """Mean per attribute kind and overall over images, each with a 95% interval and the image count.

    ``overall`` is the share of all scored attributes recovered. Its interval counts each *image* as one
    trial, not each attribute: an image's attributes fail together (a cache that skips the steps where the
    model chose what to draw loses colour, shape and background at once), so treating them as independent
    would make the interval about twice too narrow. As wide as for one trial per image, it is conservative
    when the attributes are in fact independent. A kind is averaged over the images whose prompt names it
    (NaN when none does). With ``keys`` (one per score, e.g. ``p0_s1_n0``), ``per_image`` keeps each
    image's 0/1 per kind, which ``paired_loss`` compares image by image. ``attributes``: the kinds scored
    (a video world's, ``accel.measure.video_adherence.VIDEO_ATTRIBUTES``, for videos).
    """
    summary: dict[str, Any] = {"n": len(scores)}
    for kind in attributes:
        values = [s[kind] for s in scores if kind in s]
        summary[kind] = sum(values) / len(values) if values else math.nan
        summary[f"{kind}_ci"] = list(_interval(values))
    trials = [s[kind] for s in scores for kind in attributes if kind in s]
    summary["overall"] = sum(trials) / len(trials) if trials else math.nan
    summary["overall_ci"] = list(_wilson(summary["overall"] * len(scores), len(scores)) if trials else _wilson(0, 0))
    if keys is not None:
        summary["per_image"] = {
            key: {kind: int(s[kind]) for kind in attributes if kind in s} for key, s in zip(keys, scores, strict=True)
        }
    return summary


def paired_loss(baseline: dict[str, dict[str, int]], variant: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What a variant lost against its baseline, image by image (``per_image`` of two summaries).

    ``loss``: the share of the baseline's scored attributes that the baseline got right and the variant got
    wrong; a variant's gains elsewhere do not offset it (a cache that loses one image's colour while another
    image's shape happens to come out right has lost that colour). An image the baseline has and the variant
    lacks counts as lost wherever the baseline was right: a missing output is no better than a wrong one.
    ``gained``: the share the variant got right where the baseline did not (the baseline's own coin flips,
    reported beside it). ``by_kind``: the share lost per attribute kind. ``images``: the baseline's images;
    ``missing``: those the variant lacks. ``lost`` and ``scored``: the counts behind ``loss`` (attributes lost,
    attributes the baseline scored); ``loss_ci``: its 95% interval (``loss_interval``), what the gate compares
    with the limit.
    """
    lost = gained = total = 0
    by_kind: dict[str, list[int]] = {kind: [0, 0] for kind in ATTRIBUTES}  # a video world's kinds join as met
    missing = 0
    for key, expected in baseline.items():
        mine = variant.get(key)
        missing += mine is None
        for kind, right in expected.items():
            total += 1
            by_kind.setdefault(kind, [0, 0])[1] += 1
            theirs = None if mine is None else mine.get(kind)
            if right and not theirs:
                lost += 1
                by_kind[kind][0] += 1
            elif theirs and not right:
                gained += 1
    loss = lost / total if total else math.nan
    return {
        "loss": loss,
        "lost": lost,
        "scored": total,
        "loss_ci": list(loss_interval(loss, len(baseline))),
        "gained": gained / total if total else math.nan,
        "by_kind": {kind: n_lost / n for kind, (n_lost, n) in by_kind.items() if n},
        "images": len(baseline),
        "missing": missing,
    }


def loss_images(record: dict[str, Any]) -> int | None:
    """How many images a record's paired adherence loss was measured over (``adherence.vs_baseline.images``), or
    None for a record without per-image scores (before schema 3: its loss is the net change)."""
    paired = (record.get("adherence") or {}).get("vs_baseline")
    images = paired.get("images") if isinstance(paired, dict) else None
    return images if isinstance(images, int) and images > 0 else None


def loss_interval(loss: float, images: int) -> tuple[float, float]:
    """A 95% Wilson interval for a paired adherence loss (a share of attributes) measured over ``images`` images.

    The trials are the *images*, not the attributes: an image's attributes fail together (a cache that skips the
    steps where the model chose what to draw loses colour, shape and background at once), so counting each
    attribute as a trial would make the interval about twice too narrow and let one flipped image read as
    evidence. The share keeps its value and is weighed as ``loss * images`` successes of ``images`` trials, as
    ``summarise`` weighs ``overall``: conservative when the attributes are in fact independent. (NaN, NaN)
    without images or without a loss.
    """
    if images <= 0 or math.isnan(loss):
        return (math.nan, math.nan)
    return _wilson(loss * images, images)
