"""The moving-shapes world: a procedural, seeded caption -> video generator with known ground truth.

A ball of one of the shapes world's eight named colours (``accel.zoo.world.PALETTE``) on a plain background
of another moves in a named direction (left, right, up, down) across ``FRAMES`` frames on a torus (it leaves
one edge and re-enters at the opposite one; it starts anywhere); captions come from a few templates ("a red
ball moving left on a blue background"). Every video is a pure function of its scene and a seed (start point,
speed and size are jittered), and ``WORLD_VERSION`` names the generator:
change the palette, motion or templates and the version must change with it (it is recorded
beside the trained weights).

A fixed set of held-out combinations (background, colour, direction) never appears in training:
``HELD_OUT_PROMPTS`` are their captions and ``HELD_OUT_SCENES`` what each names: the prompt set a trained
model is scored on. ``FRAMES`` is 4k + 1, as Wan's causal VAE (4x temporal compression) takes.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from itertools import product

import numpy as np
from PIL import Image, ImageDraw

from accel.zoo.world import PALETTE, template_pattern

WORLD_NAME = "moving-shapes"
WORLD_VERSION = "moving-shapes-v2"

DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
TEMPLATES = (
    "a {colour} ball moving {direction} on a {background} background",
    "{background} background, a {colour} ball moving {direction}",
    "a {colour} ball on {background}, moving {direction}",
)
FRAME_SIZE = 64
FRAMES = 9
# Ball radius and its travel along the direction (first frame to last), as fractions of the frame size. The
# world wraps around (a torus: a ball leaving on the right re-enters on the left) and the start is drawn over
# the whole frame, so where a ball is says nothing of where it goes: direction is the motion between frames,
# what Wan's transformer can see (its positions are relative: 3D RoPE, no absolute embedding; a world whose
# start follows the direction asks it for an absolute position it has no way to place, docs/zoo.md).
RADIUS_RANGE = (0.13, 0.16)
TRAVEL_RANGE = (0.30, 0.40)
SUPERSAMPLE = 4
HELD_OUT_COUNT = 24
HELD_OUT_SEED = 4321


@dataclass(frozen=True)
class VideoScene:
    """What a video shows, or what a caption names: the attributes the video adherence score checks."""

    background: str
    colour: str
    direction: str

    def caption(self, template: int = 0) -> str:
        """The caption of this scene from template number ``template``."""
        text = TEMPLATES[template % len(TEMPLATES)]
        return text.format(colour=self.colour, direction=self.direction, background=self.background)

    def attributes(self) -> dict[str, str]:
        """The named attributes as a plain dict (background, colour, direction)."""
        return dict(asdict(self))


def all_scenes() -> list[VideoScene]:
    """Every combination, background different from the ball's colour (8 x 7 x 4 = 224)."""
    return [
        VideoScene(background, colour, direction)
        for background, colour, direction in product(PALETTE, PALETTE, DIRECTIONS)
        if background != colour
    ]


def _held_out() -> tuple[VideoScene, ...]:
    chosen = random.Random(HELD_OUT_SEED).sample(all_scenes(), HELD_OUT_COUNT)
    return tuple(sorted(chosen, key=lambda s: (s.background, s.colour, s.direction)))


HELD_OUT_SCENES: tuple[VideoScene, ...] = _held_out()
HELD_OUT_PROMPTS: tuple[str, ...] = tuple(scene.caption(i) for i, scene in enumerate(HELD_OUT_SCENES))


def training_scenes() -> list[VideoScene]:
    """All combinations except the held-out ones."""
    held = set(HELD_OUT_SCENES)
    return [scene for scene in all_scenes() if scene not in held]


def vocabulary() -> list[str]:
    """Every word (and the comma) the captions use, in a fixed order."""
    words: list[str] = []
    for text in [*PALETTE, *DIRECTIONS, *TEMPLATES]:
        for word in re.findall(r"[a-z]+|,", re.sub(r"\{[a-z]+\}", " ", text)):
            if word not in words:
                words.append(word)
    return words


_CAPTION_PATTERNS = [
    template_pattern(template, {"colour": "[a-z]+", "direction": "[a-z]+", "background": "[a-z]+"})
    for template in TEMPLATES
]


def parse_caption(caption: str) -> VideoScene | None:
    """The scene a caption names, or None if it is not a caption of this world."""
    text = " ".join(caption.strip().lower().split())
    for pattern in _CAPTION_PATTERNS:
        match = pattern.match(text)
        if match is None:
            continue
        parts = match.groupdict()
        if parts["colour"] in PALETTE and parts["background"] in PALETTE and parts["direction"] in DIRECTIONS:
            return VideoScene(parts["background"], parts["colour"], parts["direction"])
    return None


def trajectory(scene: VideoScene, seed: int = 0, frames: int = FRAMES) -> tuple[list[tuple[float, float]], float]:
    """The ball's centre per frame (fractions of the frame size, wrapped into [0, 1)) and its radius, from ``seed``."""
    rng = random.Random(f"{WORLD_VERSION}:{seed}:{scene}")
    radius = rng.uniform(*RADIUS_RANGE)
    travel = rng.uniform(*TRAVEL_RANGE)
    start_x, start_y = rng.random(), rng.random()
    dx, dy = DIRECTIONS[scene.direction]
    step = travel / max(1, frames - 1)
    return [((start_x + dx * step * f) % 1.0, (start_y + dy * step * f) % 1.0) for f in range(frames)], radius


def render(scene: VideoScene, seed: int = 0, size: int = FRAME_SIZE, frames: int = FRAMES) -> list[Image.Image]:
    """Draw ``scene`` as ``frames`` anti-aliased RGB frames; a ball across an edge shows on both sides (a torus)."""
    centres, radius = trajectory(scene, seed, frames)
    big = size * SUPERSAMPLE
    r = radius * big
    images = []
    for cx, cy in centres:
        image = Image.new("RGB", (big, big), PALETTE[scene.background])
        draw = ImageDraw.Draw(image)
        for ox, oy in product((-big, 0, big), repeat=2):
            x, y = cx * big + ox, cy * big + oy
            if -r <= x <= big + r and -r <= y <= big + r:
                draw.ellipse([x - r, y - r, x + r, y + r], fill=PALETTE[scene.colour])
        images.append(image.resize((size, size), Image.Resampling.BOX))
    return images


def render_array(scene: VideoScene, seed: int = 0, size: int = FRAME_SIZE, frames: int = FRAMES) -> np.ndarray:
    """``render`` as a float32 array in [-1, 1], shaped (channels, frames, height, width) as Wan's VAE takes it."""
    pixels = np.stack([np.asarray(frame, dtype=np.float32) for frame in render(scene, seed, size, frames)])
    channels_first: np.ndarray = (pixels / 127.5 - 1.0).transpose(3, 0, 1, 2).copy()
    return channels_first
