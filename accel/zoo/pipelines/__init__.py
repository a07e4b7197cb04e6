"""The zoo's pipeline families: one tiny offline build per diffusers pipeline family.

``FAMILIES`` lists every family this package builds (each ``Family`` names its pipeline class, the
classes its build needs, its config's source and the inputs its call needs); ``CORE_FAMILIES`` names
the family of each entry ``accel.zoo`` defined before (tiny-flux, tiny-wan, tiny-qwen-image). The zoo
turns both into entries, so every family is a ``source:`` name like ``tiny-sd15``.
"""

from __future__ import annotations

from accel.zoo.pipelines import image_clip_t5, image_llm, image_vl, video_llm, video_t5
from accel.zoo.pipelines.base import (
    INPUTS,
    BuildFailed,
    Family,
    MissingClass,
    build_failed,
    check_available,
    input_image,
    missing_classes,
    unavailable,
)

FAMILIES: tuple[Family, ...] = (
    *image_clip_t5.FAMILIES,
    *image_llm.FAMILIES,
    *image_vl.FAMILIES,
    *video_t5.FAMILIES,
    *video_llm.FAMILIES,
)

# The family of each zoo entry built before this package (accel/zoo/families.py).
CORE_FAMILIES: dict[str, str] = {
    "tiny-flux": "FLUX.1",
    "tiny-wan": "Wan 2.1 text-to-video",
    "tiny-qwen-image": "Qwen-Image",
}

__all__ = [
    "CORE_FAMILIES",
    "FAMILIES",
    "INPUTS",
    "BuildFailed",
    "Family",
    "MissingClass",
    "build_failed",
    "check_available",
    "input_image",
    "missing_classes",
    "unavailable",
]
