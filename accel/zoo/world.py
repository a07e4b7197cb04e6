"""The shapes world: a procedural, seeded caption -> image generator with known ground truth.

One shape (circle, square or triangle) in one of eight named colours, at a named position (left, right,
top, bottom, centre), on a plain background of another colour; captions come from a few templates
("a red circle on the left, on a blue background"). Every image is a pure function of its scene and a
seed, and ``WORLD_VERSION`` names the generator: change the palette, geometry or templates and the
version must change with it (it is recorded beside the trained weights).

Some templates leave the position open ("a red circle on a blue background"): the image still has one,
drawn from the five. A model must then choose where to draw, so its early denoising steps point at an
average of five places and only its later steps commit to one, the curved trajectory real text-to-image
models have (a caption never fixes the whole image). With every attribute named, shapes-v1's images were
a near-deterministic function of the caption: one Euler step already drew them, so skipping steps (what
caches do) cost nothing measurable. A caption's ``Scene`` has ``position=None`` when it leaves it open,
and adherence scores only the attributes a caption names.

A fixed set of held-out combinations (background, colour, shape, position) never appears in training:
``HELD_OUT_PROMPTS`` are their captions (every template in turn, so some leave the position open) and
``HELD_OUT_EXPECTED`` what each names: the prompt set a trained model is scored on.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, replace
from itertools import product

import numpy as np
from PIL import Image, ImageDraw

WORLD_NAME = "shapes"
WORLD_VERSION = "shapes-v2"

# Well separated in RGB (every pair at least ~110 apart), so classical analysis recovers them.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 215, 50),
    "cyan": (60, 210, 220),
    "purple": (150, 50, 190),
    "white": (240, 240, 240),
    "black": (25, 25, 25),
}
SHAPES = ("circle", "square", "triangle")
# Anchor of each position as a fraction of (width, height).
POSITIONS: dict[str, tuple[float, float]] = {
    "left": (0.27, 0.5),
    "right": (0.73, 0.5),
    "top": (0.5, 0.27),
    "bottom": (0.5, 0.73),
    "centre": (0.5, 0.5),
}
POSITION_PHRASES = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "centre": "in the centre",
}
FULL_TEMPLATES = (
    "a {colour} {shape} {where}, on a {background} background",
    "a {colour} {shape} {where} on {background}",
    "{background} background, a {colour} {shape} {where}",
)
# Captions that leave the position open (the image still has one).
OPEN_TEMPLATES = (
    "a {colour} {shape} on a {background} background",
    "{background} background, a {colour} {shape}",
)
TEMPLATES = FULL_TEMPLATES + OPEN_TEMPLATES
IMAGE_SIZE = 64
# Shape half-extent and centre jitter, as fractions of the image size.
RADIUS_RANGE = (0.165, 0.205)
JITTER = 0.035
SUPERSAMPLE = 4
HELD_OUT_COUNT = 48
HELD_OUT_SEED = 1234


@dataclass(frozen=True)
class Scene:
    """What an image shows, or what a caption names: the attributes the adherence score checks.

    ``position`` is None for a caption that leaves it open; such a scene cannot be rendered.
    """

    background: str
    colour: str
    shape: str
    position: str | None = None

    def caption(self, template: int = 0) -> str:
        """The caption of this scene from template number ``template`` (an open one for an open scene)."""
        text = TEMPLATES[template % len(TEMPLATES)]
        if self.position is None and "{where}" in text:
            text = OPEN_TEMPLATES[template % len(OPEN_TEMPLATES)]
        where = POSITION_PHRASES[self.position] if self.position else ""
        return text.format(colour=self.colour, shape=self.shape, where=where, background=self.background)

    def named_by(self, template: int) -> Scene:
        """What the caption from template ``template`` names of this scene (no position if it leaves it open)."""
        return self if "{where}" in TEMPLATES[template % len(TEMPLATES)] else replace(self, position=None)

    def attributes(self) -> dict[str, str]:
        """The named attributes as a plain dict (background, colour, shape and, unless open, position)."""
        return {kind: value for kind, value in asdict(self).items() if value is not None}


def all_scenes() -> list[Scene]:
    """Every combination, background different from the shape's colour (8 x 7 x 3 x 5 = 840)."""
    return [
        Scene(background, colour, shape, position)
        for background, colour, shape, position in product(PALETTE, PALETTE, SHAPES, POSITIONS)
        if background != colour
    ]


def _held_out() -> tuple[Scene, ...]:
    scenes = all_scenes()
    chosen = random.Random(HELD_OUT_SEED).sample(scenes, HELD_OUT_COUNT)
    return tuple(sorted(chosen, key=lambda s: (s.background, s.colour, s.shape, s.position or "")))


HELD_OUT_SCENES: tuple[Scene, ...] = _held_out()
HELD_OUT_PROMPTS: tuple[str, ...] = tuple(scene.caption(i) for i, scene in enumerate(HELD_OUT_SCENES))
HELD_OUT_EXPECTED: tuple[Scene, ...] = tuple(scene.named_by(i) for i, scene in enumerate(HELD_OUT_SCENES))


def training_scenes() -> list[Scene]:
    """All combinations except the held-out ones."""
    held = set(HELD_OUT_SCENES)
    return [scene for scene in all_scenes() if scene not in held]


def vocabulary() -> list[str]:
    """Every word (and the comma) the captions use, in a fixed order."""
    words: list[str] = []
    texts = [*PALETTE, *SHAPES, *POSITION_PHRASES.values(), *TEMPLATES]
    for text in texts:
        for word in re.findall(r"[a-z]+|,", re.sub(r"\{[a-z]+\}", " ", text)):
            if word not in words:
                words.append(word)
    return words


def template_pattern(template: str, fields: dict[str, str]) -> re.Pattern[str]:
    """A regex matching a whole caption of ``template``: each ``{field}`` a named group of ``fields[field]``.

    Shared with the moving-shapes world (``accel.zoo.video_world``)."""
    pattern = re.escape(template)
    for name, regex in fields.items():
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>{regex})")
    return re.compile(f"^{pattern}$")


_FIELDS = {"colour": "[a-z]+", "shape": "[a-z]+", "where": "(?:on|at|in) the [a-z]+", "background": "[a-z]+"}
_CAPTION_PATTERNS = [template_pattern(template, _FIELDS) for template in TEMPLATES]
_PHRASE_TO_POSITION = {phrase: name for name, phrase in POSITION_PHRASES.items()}


def parse_caption(caption: str) -> Scene | None:
    """The scene a caption names, or None if it is not a caption of this world."""
    text = " ".join(caption.strip().lower().split())
    for pattern in _CAPTION_PATTERNS:
        match = pattern.match(text)
        if not match:
            continue
        parts = match.groupdict()
        position = _PHRASE_TO_POSITION.get(parts["where"]) if "where" in parts else None
        if "where" in parts and position is None:
            continue
        if parts["colour"] in PALETTE and parts["background"] in PALETTE and parts["shape"] in SHAPES:
            return Scene(parts["background"], parts["colour"], parts["shape"], position)
    return None


def _shape_points(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]] | None:
    if shape == "square":
        h = 0.9 * r
        return [(cx - h, cy - h), (cx + h, cy - h), (cx + h, cy + h), (cx - h, cy + h)]
    if shape == "triangle":
        w = 1.1 * r
        return [(cx, cy - r), (cx + w, cy + r), (cx - w, cy + r)]
    return None


def render(scene: Scene, seed: int = 0, size: int = IMAGE_SIZE, jitter: bool = True) -> Image.Image:
    """Draw ``scene`` (anti-aliased, size and position jittered from ``seed``) as an RGB image."""
    if scene.position is None:
        raise ValueError(f"{scene}: a scene without a position cannot be drawn")
    rng = random.Random(f"{WORLD_VERSION}:{seed}:{scene}")
    radius = rng.uniform(*RADIUS_RANGE) if jitter else sum(RADIUS_RANGE) / 2
    ax, ay = POSITIONS[scene.position]
    dx, dy = (rng.uniform(-JITTER, JITTER), rng.uniform(-JITTER, JITTER)) if jitter else (0.0, 0.0)
    big = size * SUPERSAMPLE
    cx, cy, r = (ax + dx) * big, (ay + dy) * big, radius * big
    image = Image.new("RGB", (big, big), PALETTE[scene.background])
    draw = ImageDraw.Draw(image)
    points = _shape_points(scene.shape, cx, cy, r)
    if points is None:
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=PALETTE[scene.colour])
    else:
        draw.polygon(points, fill=PALETTE[scene.colour])
    return image.resize((size, size), Image.Resampling.BOX)


def render_array(scene: Scene, seed: int = 0, size: int = IMAGE_SIZE) -> np.ndarray:
    """``render`` as a float32 array in [-1, 1], channels first (the VAE's input convention)."""
    pixels = np.asarray(render(scene, seed, size), dtype=np.float32) / 127.5 - 1.0
    channels_first: np.ndarray = pixels.transpose(2, 0, 1).copy()
    return channels_first
