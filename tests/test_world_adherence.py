"""The shapes world and its ground-truth adherence score: the generator's own images score (nearly)
perfectly, hand-made counter-examples lose exactly the attributes they get wrong."""

from __future__ import annotations

import numpy as np
import pytest

from accel.measure import adherence
from accel.zoo import world


def test_generator_images_recover_every_attribute():
    # Every third combination (280, every attribute value many times) keeps the test fast.
    scores = [adherence.score(scene, world.render(scene, seed=7)) for scene in world.all_scenes()[::3]]
    summary = adherence.summarise(scores)
    assert len(scores) == 280
    for kind in (*adherence.ATTRIBUTES, "overall"):
        assert summary[kind] >= 0.99, (kind, summary[kind])


def test_rendering_is_deterministic_and_jittered_by_seed():
    scene = world.Scene("blue", "red", "circle", "left")
    assert np.array_equal(np.asarray(world.render(scene, 3)), np.asarray(world.render(scene, 3)))
    assert not np.array_equal(np.asarray(world.render(scene, 3)), np.asarray(world.render(scene, 4)))
    assert world.render_array(scene).shape == (3, 64, 64)


def test_held_out_combinations_never_appear_in_training():
    held = set(world.HELD_OUT_SCENES)
    assert len(held) == world.HELD_OUT_COUNT
    assert not held & set(world.training_scenes())
    assert len(world.training_scenes()) + len(held) == len(world.all_scenes())
    # Every attribute value still occurs in training.
    for kind, values in (("background", world.PALETTE), ("shape", world.SHAPES), ("position", world.POSITIONS)):
        assert {getattr(s, kind) for s in world.training_scenes()} == set(values)


@pytest.mark.parametrize("template", range(len(world.TEMPLATES)))
def test_captions_parse_back_to_their_scene(template):
    for scene in world.all_scenes()[::37]:
        named = world.parse_caption(scene.caption(template))
        assert named == scene.named_by(template)
        # An open template names everything but the position; a full one names the whole scene.
        assert (named.position is None) == ("{where}" not in world.TEMPLATES[template])
        assert named.caption(template) == scene.caption(template)
    assert world.parse_caption("a red fox in the snow") is None
    assert world.parse_caption("a pink circle on the left, on a blue background") is None


def _canvas(background: str) -> np.ndarray:
    return np.tile(np.array(world.PALETTE[background], dtype=np.uint8), (64, 64, 1))


def test_hand_drawn_square_is_recovered():
    image = _canvas("green")
    image[24:40, 6:22] = world.PALETTE["yellow"]  # a 16-pixel square around x = 14 of 64: left
    assert adherence.analyse(image).as_dict() == {
        "background": "green",
        "colour": "yellow",
        "shape": "square",
        "position": "left",
    }


@pytest.mark.parametrize(
    ("drawn", "wrong"),
    [
        (world.Scene("blue", "green", "circle", "left"), "colour"),
        (world.Scene("blue", "red", "circle", "right"), "position"),
        (world.Scene("white", "red", "circle", "left"), "background"),
        (world.Scene("blue", "red", "square", "left"), "shape"),
    ],
)
def test_counter_examples_lose_the_wrong_attribute(drawn, wrong):
    prompt = world.Scene("blue", "red", "circle", "left")
    result = adherence.score(prompt, world.render(drawn, seed=1))
    assert result[wrong] == 0.0
    assert all(result[k] == 1.0 for k in adherence.ATTRIBUTES if k != wrong)
    assert result["overall"] == 0.75


def test_an_empty_image_only_has_its_background():
    result = adherence.score(world.Scene("red", "blue", "triangle", "top"), _canvas("red"))
    assert result == {"background": 1.0, "colour": 0.0, "shape": 0.0, "position": 0.0, "overall": 0.25}


def test_summary_intervals_cover_the_mean():
    scores = [{"background": 1.0, "colour": float(i % 2), "shape": 1.0, "position": 1.0} for i in range(10)]
    for s in scores:
        s["overall"] = sum(s[k] for k in adherence.ATTRIBUTES) / 4
    summary = adherence.summarise(scores)
    assert summary["colour"] == 0.5 and summary["n"] == 10
    low, high = summary["colour_ci"]
    assert 0.15 < low < 0.5 < high < 0.85
    assert summary["overall"] == pytest.approx(35 / 40)
    assert summary["background_ci"][1] == pytest.approx(1.0)
