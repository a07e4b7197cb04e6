"""PNG images of a cell's outputs, named by model/variant/prompt/seed; a video becomes a frame strip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accel.results import outputs_path


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """(frames, H, W, 3) float in [0, 1] -> one (H, frames*W, 3) uint8 strip."""
    strip = np.concatenate(list(frames), axis=1)
    pixels: np.ndarray = (np.clip(strip, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return pixels


def save_images(run_dir: Path, record: dict[str, Any], keys: list[str]) -> list[str]:
    """Save one PNG per output sample and return the paths relative to ``run_dir``."""
    from PIL import Image

    folder = Path(run_dir) / "images" / record["model"] / record["variant"]
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    with np.load(outputs_path(run_dir, record["model"], record["variant"])) as outputs:
        for key in keys:
            path = folder / f"{key}.png"
            Image.fromarray(to_uint8(outputs[key])).save(path)
            saved.append(str(path.relative_to(run_dir)))
    return saved
