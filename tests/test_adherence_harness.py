"""Adherence in the harness: which models are scored, prompt sets, the runner's scores from saved
outputs, the gate's bound on a lossy variant's loss, and the report's table."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accel.errors import ConfigError
from accel.gate import load_gate_data
from accel.profile import ModelSpec, Workload, parse_profile
from accel.results import outputs_path
from accel.sweep.adherence import attach_adherence, expected_scenes, model_world
from accel.zoo import world

PROMPTS = ["a red circle on the left, on a white background", "blue background, a yellow square at the top"]


def _profile(**changes):
    data = {
        "name": "t",
        "models": [{"name": "mini-flux", "source": "mini-flux"}, {"name": "tiny-wan", "source": "tiny-wan"}],
        "workload": {"prompts": PROMPTS},
        "variants": [{"name": "fast", "features": {"cache_dit": {}}, "models": ["mini-flux"]}],
    }
    data.update(changes)
    return parse_profile(data, "p.yaml")


def test_worlds_come_from_the_zoo_or_the_profile():
    assert model_world(ModelSpec(name="m", source="mini-flux")) == "shapes"
    assert model_world(ModelSpec(name="m", source="tiny-flux")) is None
    assert model_world(ModelSpec(name="m", source="/some/copy", world="shapes")) == "shapes"


def test_variant_models_filter_the_plan(tmp_path):
    from accel.sweep.runner import plan

    cells = [c.key for c in plan(_profile(), tmp_path)]
    assert "mini-flux/fast" in cells and "tiny-wan/fast" not in cells and "tiny-wan/baseline" in cells
    bad = [{"name": "fast", "features": {"cache_dit": {}}, "models": ["mini-flx"]}]
    with pytest.raises(ConfigError, match=r"variants\[0\]\.models: 'mini-flx' is not a model name\. Did you mean"):
        _profile(variants=bad)


def test_prompt_sets_fill_prompts_and_expectations(tmp_path):
    held = Workload(prompt_set="shapes-held-out")
    assert held.prompts == list(world.HELD_OUT_PROMPTS)
    assert expected_scenes(held) == list(world.HELD_OUT_EXPECTED)
    assert [scene.position is None for scene in expected_scenes(held)] == [
        "{where}" not in world.TEMPLATES[i % len(world.TEMPLATES)] for i in range(len(held.prompts))
    ]
    custom = tmp_path / "set.yaml"
    custom.write_text(
        "prompts:\n  - prompt: something red\n"
        "    expect: {background: blue, colour: red, shape: circle, position: left}\n"
        "  - prompt: something red anywhere\n"
        "    expect: {background: blue, colour: red, shape: circle}\n"
    )
    workload = Workload(prompt_set=str(custom))
    assert workload.prompts == ["something red", "something red anywhere"]
    assert expected_scenes(workload) == [
        world.Scene("blue", "red", "circle", "left"),
        world.Scene("blue", "red", "circle"),
    ]
    # Without a set, captions are parsed; a prompt of another world has no expectation.
    assert expected_scenes(Workload(prompts=[PROMPTS[0], "a fox"])) == [world.parse_caption(PROMPTS[0]), None]


def test_bad_prompt_sets_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"workload: .*prompt set 'nope' is neither a file nor a built-in set"):
        parse_profile({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": "nope"}}, "p.yaml")
    broken = tmp_path / "bad.yaml"
    broken.write_text("prompts:\n  - prompt: x\n    expect: {background: blue, colour: red}\n")
    with pytest.raises(
        ConfigError,
        match=r"prompts\[0\]\.expect: missing key 'shape'; keys must be background, colour, shape and optionally",
    ):
        parse_profile({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": str(broken)}})
    broken.write_text("prompts:\n  - prompt: x\n    expect: {background: blue, colour: pink, shape: circle}\n")
    with pytest.raises(
        ConfigError, match=r"prompts\[0\]\.expect\.colour: 'pink' is not one of the world's colours\. Allowed: red"
    ):
        parse_profile({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": str(broken)}})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "promts: []\nprompts:\n  - {prompt: x, expect: {background: blue, colour: red, shape: circle}}\n",
            "unknown key 'promts'. Allowed keys: prompts, description",
        ),
        (
            "prompts:\n  - {prompt: x, expected: {}, expect: {background: blue, colour: red, shape: circle}}\n",
            r"prompts\[0\]: unknown key 'expected'. Allowed keys: prompt, expect",
        ),
        (
            "prompts:\n  - {prompt: x, expect: {background: blue, color: red, shape: circle}}\n",
            r"prompts\[0\]\.expect: unknown key 'color'\. Did you mean 'colour'\? "
            r"Allowed keys: background, colour, shape, position$",
        ),
        (
            "prompts:\n  - {prompt: x, expect: {background: blue, hue: red, colour: red, shape: circle}}\n",
            r"prompts\[0\]\.expect: unknown key 'hue'\. Allowed keys: background, colour, shape, position$",
        ),
        (
            "prompts:\n  - {prompt: x, expect: {background: blue, colour: red, shape: circle}}\n"
            "  - {prompt: x, expect: {background: red, colour: blue, shape: circle}}\n",
            r"prompts\[1\]: 'x' is listed twice \(first at prompts\[0\]\)",
        ),
        (
            "prompts:\n  - {prompt: x, expect: {background: red, colour: red, shape: circle}}\n",
            r"prompts\[0\].expect: the background and the shape are both red",
        ),
    ],
)
def test_a_prompt_set_is_checked_at_load_even_beside_explicit_prompts(tmp_path, content, message):
    path = tmp_path / "set.yaml"
    path.write_text(content)
    models = [{"name": "m", "source": "mini-flux"}]
    for workload in ({"prompt_set": str(path)}, {"prompt_set": str(path), "prompts": ["a red circle"]}):
        with pytest.raises(ConfigError, match=message):
            parse_profile({"models": models, "workload": workload}, "p.yaml")


SET_TEXT = "prompts:\n  - {prompt: something red, expect: {background: blue, colour: red, shape: circle}}\n"


def test_a_relative_prompt_set_is_read_from_the_profiles_folder(tmp_path, monkeypatch):
    import yaml

    from accel.profile import load_profile

    folder = tmp_path / "x"
    (folder / "sets").mkdir(parents=True)
    (folder / "ps.yaml").write_text(SET_TEXT)
    (folder / "sets" / "other.yaml").write_text(SET_TEXT.replace("something red", "something else red"))
    profile_path = folder / "p.yaml"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for written, expected, prompt in (
        ("ps.yaml", folder / "ps.yaml", "something red"),
        ("sets/../sets/other.yaml", folder / "sets" / "other.yaml", "something else red"),
        ("shapes-held-out", "shapes-held-out", world.HELD_OUT_PROMPTS[0]),  # a built-in name is no path
    ):
        profile_path.write_text(
            yaml.safe_dump({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": written}})
        )
        for cwd in (folder, elsewhere):  # the same profile means the same from every working directory
            monkeypatch.chdir(cwd)
            profile = load_profile(profile_path)
            assert profile.workload.prompt_set == str(expected)
            assert profile.workload.prompts[0] == prompt
    # The resolved profile a run writes holds the absolute path: --resume reads it from any directory.
    profile_path.write_text(
        yaml.safe_dump({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": "ps.yaml"}})
    )
    monkeypatch.chdir(folder)
    profile = load_profile(profile_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    resolved = run_dir / "profile.resolved.yaml"
    resolved.write_text(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
    assert yaml.safe_load(resolved.read_text())["workload"]["prompt_set"] == str(folder / "ps.yaml")
    monkeypatch.chdir(elsewhere)
    assert load_profile(resolved).fingerprint() == profile.fingerprint()


def test_a_missing_relative_prompt_set_names_where_it_was_looked_for(tmp_path, monkeypatch):
    import yaml

    from accel.profile import load_profile

    (tmp_path / "ps.yaml").write_text(SET_TEXT)  # in the working directory, not beside the profile
    (tmp_path / "x").mkdir()
    path = tmp_path / "x" / "p.yaml"
    monkeypatch.chdir(tmp_path)
    for written, message in (
        ("ps.yaml", f"prompt set '{tmp_path / 'x' / 'ps.yaml'}' is neither a file nor a built-in set"),
        ("shapes-held-ot", "is neither a file nor a built-in set. Did you mean 'shapes-held-out'?"),
    ):
        path.write_text(
            yaml.safe_dump({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": written}})
        )
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_profile(path)


@pytest.mark.parametrize(
    ("content", "line", "byte"),
    [
        (SET_TEXT.encode() + b"  - {prompt: caf\xe9, expect: {}}\n", 3, 0xE9),  # Latin-1 text
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 1, 0x89),  # a binary file
    ],
)
def test_a_prompt_set_that_is_not_utf8_names_the_file_and_exits_2(content, line, byte, tmp_path, monkeypatch, capsys):
    from conftest import invoke

    prompt_set = tmp_path / "ps.yaml"
    prompt_set.write_bytes(content)
    profile = tmp_path / "p.yaml"
    profile.write_text("models: [{name: m, source: mini-flux}]\nworkload: {prompt_set: ps.yaml}\n")
    code, _, err = invoke(monkeypatch, capsys, "plan", str(profile))
    assert code == 2
    assert err == (
        f"error: {profile}: workload: {prompt_set}:{line}: not UTF-8 text (byte 0x{byte:02x}); "
        "a prompt set is a UTF-8 YAML file\n"
    )


def _write_outputs(run_dir, variant, images):
    path = outputs_path(run_dir, "mini-flux", variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"p{i}_s0_n0": np.asarray(im, dtype=np.float32)[None] / 255.0 for i, im in enumerate(images)}
    np.savez_compressed(path, **arrays)
    return {"model": "mini-flux", "variant": variant, "outputs_file": str(path.relative_to(run_dir))}


def test_runner_scores_saved_outputs_and_the_loss_against_the_baseline(tmp_path):
    workload = Workload(prompts=PROMPTS)
    scenes = expected_scenes(workload)
    model = ModelSpec(name="mini-flux", source="mini-flux")
    keys = ["p0_s0_n0", "p1_s0_n0"]
    baseline = _write_outputs(tmp_path, "baseline", [world.render(s, 0) for s in scenes])
    attach_adherence(baseline, model, workload, None, tmp_path, keys)
    assert baseline["adherence"]["overall"] == 1.0 and baseline["adherence"]["n"] == 2
    assert "adherence_loss" not in baseline
    wrong = world.Scene(scenes[1].background, scenes[1].colour, scenes[1].shape, "bottom")
    variant = _write_outputs(tmp_path, "v", [world.render(scenes[0], 0), world.render(wrong, 0)])
    attach_adherence(variant, model, workload, baseline, tmp_path, keys)
    assert variant["adherence"]["position"] == 0.5
    assert variant["adherence_loss"] == pytest.approx(1 / 8)
    # A model without a world gets nothing.
    other = {"model": "tiny-wan", "variant": "baseline", "outputs_file": baseline["outputs_file"]}
    attach_adherence(other, ModelSpec(name="tiny-wan", source="tiny-wan"), workload, None, tmp_path, keys)
    assert "adherence" not in other


def test_a_variants_gains_on_other_images_do_not_offset_what_it_lost(tmp_path):
    # Image 0 loses its colour; image 1's position, wrong in the baseline, comes out right in the variant.
    # The net change of overall adherence is zero, yet the variant lost an attribute the baseline had.
    workload = Workload(prompts=PROMPTS)
    scenes = expected_scenes(workload)
    model = ModelSpec(name="mini-flux", source="mini-flux")
    keys = ["p0_s0_n0", "p1_s0_n0"]
    misplaced = world.Scene(scenes[1].background, scenes[1].colour, scenes[1].shape, "bottom")
    baseline = _write_outputs(tmp_path, "baseline", [world.render(scenes[0], 0), world.render(misplaced, 0)])
    attach_adherence(baseline, model, workload, None, tmp_path, keys)
    other = next(c for c in world.PALETTE if c not in (scenes[0].colour, scenes[0].background))
    recoloured = world.Scene(scenes[0].background, other, scenes[0].shape, scenes[0].position)
    variant = _write_outputs(tmp_path, "v", [world.render(recoloured, 0), world.render(scenes[1], 0)])
    attach_adherence(variant, model, workload, baseline, tmp_path, keys)
    assert variant["adherence"]["overall"] == baseline["adherence"]["overall"]
    assert variant["adherence_loss"] == pytest.approx(1 / 8)
    paired = variant["adherence"]["vs_baseline"]
    assert paired["gained"] == pytest.approx(1 / 8) and paired["images"] == 2
    assert paired["by_kind"]["colour"] == pytest.approx(1 / 2) and paired["by_kind"]["position"] == 0.0
    assert baseline["adherence"]["per_image"]["p1_s0_n0"]["position"] == 0


def test_a_variant_missing_an_image_has_lost_what_the_baseline_got_right_there():
    from accel.measure.adherence import paired_loss

    baseline = {"p0_s0_n0": {"background": 1, "colour": 1}, "p1_s0_n0": {"background": 1, "colour": 0}}
    variant = {"p0_s0_n0": {"background": 1, "colour": 1}}
    paired = paired_loss(baseline, variant)
    assert paired["loss"] == pytest.approx(1 / 4) and paired["missing"] == 1 and paired["images"] == 2
    assert paired_loss(baseline, baseline)["loss"] == 0.0


def test_the_overall_interval_counts_images_not_attributes():
    from accel.measure.adherence import summarise

    # 20 images with four attributes each, 3 of them wrong on every attribute: 80 trials if attributes were
    # independent, 20 images in fact; the interval is the one for 17 of 20.
    scores = [dict.fromkeys(("background", "colour", "shape", "position"), 1.0) for _ in range(17)]
    scores += [dict.fromkeys(("background", "colour", "shape", "position"), 0.0) for _ in range(3)]
    for entry in scores:
        entry["overall"] = entry["background"]
    summary = summarise(scores)
    assert summary["overall"] == pytest.approx(0.85)
    assert summary["overall_ci"] == pytest.approx(summary["background_ci"])  # one trial per image
    low, high = summary["overall_ci"]
    assert high - low > 0.25  # 80 independent trials would give ~0.16


def _record(loss, features):
    return {
        "model": "mini-flux",
        "variant": "v",
        "status": "ok",
        "features": features,
        "parity": {"ssim": 0.99, "psnr": 40.0},
        "warm": {"median": 0.1, "cv": 0.01},
        "evidence": {name: {"engaged": True} for name in features},
        "adherence_loss": loss,
    }


def test_gate_bounds_a_lossy_variants_adherence_loss():
    from accel.gate import adherence_check, gate_cell

    data = load_gate_data()
    limit = data.thresholds["adherence"]["lossy"]["cache"]
    assert adherence_check(data, _record(limit / 2, {"cache_dit": {}})).ok
    failing = gate_cell(_record(limit + 0.1, {"cache_dit": {}}), data, None, "image")
    assert failing.outcome == "fail" and "adherence loss vs baseline" in failing.message()
    # Lossless features and cells without a score are not bounded by adherence.
    assert adherence_check(data, _record(0.5, {"attention_backend": "_native_math"})) is None
    assert adherence_check(data, _record(None, {"cache_dit": {}})) is None


def test_report_table_shows_each_attribute_and_the_loss():
    from accel.report.adherence import adherence_table

    summary = {"n": 8, "overall": 0.9, "overall_ci": [0.8, 0.95], "background": 1.0, "colour": 0.75}
    summary |= {"shape": 0.875, "position": 1.0}
    rows = [
        {"model": "m", "variant": "baseline", "adherence": summary, "warm": {"median": 1}},
        {
            "model": "m",
            "variant": "v",
            "adherence": summary,
            "adherence_loss": 0.05,
            "speedup": 1.5,
            "speedup_ci": {"ratio": 1.5, "low": 0.9, "high": 2.0, "verdict": "unverified"},
        },
    ]
    table = adherence_table(rows)
    assert "| v | 1.50x? |" in table and "0.750" in table and "0.900 [0.80, 0.95] | 0.050 | – | 8 |" in table
    rows[1]["adherence"] = summary | {"vs_baseline": {"loss": 0.05, "gained": 0.025}}
    assert "0.900 [0.80, 0.95] | 0.050 | 0.025 | 8 |" in adherence_table(rows)


def test_a_resume_refuses_a_prompt_set_whose_ground_truth_was_edited(tmp_path):
    # The run scores every cell against the expectations it was started with: the resolved profile keeps them,
    # so an edited set cannot mix two ground truths in one run (a noise floor then "lost" 0.14 vs its baseline).
    import yaml

    from accel.profile import load_profile
    from accel.sweep.resume import check_same_profile

    (tmp_path / "ps.yaml").write_text(SET_TEXT)
    profile_path = tmp_path / "p.yaml"
    profile_path.write_text(
        yaml.safe_dump({"models": [{"name": "m", "source": "mini-flux"}], "workload": {"prompt_set": "ps.yaml"}})
    )
    started = load_profile(profile_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "profile.resolved.yaml").write_text(yaml.safe_dump(started.model_dump(mode="json"), sort_keys=False))
    check_same_profile(run_dir, load_profile(profile_path))  # unchanged: resumes
    resolved = load_profile(run_dir / "profile.resolved.yaml")
    assert resolved.workload.prompt_expectations == started.workload.prompt_expectations
    (tmp_path / "ps.yaml").write_text(SET_TEXT.replace("colour: red", "colour: green"))
    edited = load_profile(profile_path)
    assert edited.workload.prompts == started.workload.prompts  # the same prompt texts, another ground truth
    with pytest.raises(
        ConfigError, match=r"the profile changed since this run started \(workload\.prompt_expectations"
    ):
        check_same_profile(run_dir, edited)
    # Scoring uses the expectations frozen in the profile, not the file as it is now.
    assert expected_scenes(resolved.workload)[0].colour == "red"


def test_prompt_expectations_are_checked_like_a_prompt_set_and_only_come_with_one(tmp_path):
    models = [{"name": "m", "source": "mini-flux"}]
    (tmp_path / "ps.yaml").write_text(SET_TEXT)
    entries = [{"prompt": "something red", "expect": {"background": "blue", "colour": "pink", "shape": "circle"}}]
    with pytest.raises(ConfigError, match=r"workload: prompt_expectations\[0\]\.expect\.colour: 'pink' is not one"):
        parse_profile(
            {"models": models, "workload": {"prompt_set": str(tmp_path / "ps.yaml"), "prompt_expectations": entries}}
        )
    with pytest.raises(ConfigError, match=r"prompt_expectations is filled from prompt_set: give prompt_set instead"):
        parse_profile({"models": models, "workload": {"prompts": ["x"], "prompt_expectations": entries}})


def test_a_video_world_is_scored_video_by_video_with_its_own_kinds(tmp_path):
    from accel.measure.video_adherence import VIDEO_ATTRIBUTES
    from accel.report.adherence import adherence_table
    from accel.zoo import video_world

    prompts = [video_world.HELD_OUT_PROMPTS[0], video_world.HELD_OUT_PROMPTS[1]]
    workload = Workload(prompts=prompts)
    model = ModelSpec(name="mini-wan", source="mini-wan")
    assert model_world(model) == "moving-shapes"
    scenes = expected_scenes(workload, "moving-shapes")
    assert scenes == [video_world.parse_caption(p) for p in prompts] and None not in scenes

    def write(variant, videos):
        path = outputs_path(tmp_path, "mini-wan", variant)
        path.parent.mkdir(parents=True, exist_ok=True)
        # As the adapter saves a video: (frames, H, W, 3) floats in [0, 1].
        arrays = {f"p{i}_s0_n0": np.stack([np.asarray(f, np.float32) / 255 for f in v]) for i, v in enumerate(videos)}
        np.savez_compressed(path, **arrays)
        return {"model": "mini-wan", "variant": variant, "outputs_file": str(path.relative_to(tmp_path))}

    keys = ["p0_s0_n0", "p1_s0_n0"]
    baseline = write("baseline", [video_world.render(s, 0) for s in scenes])
    attach_adherence(baseline, model, workload, None, tmp_path, keys)
    assert baseline["adherence"]["overall"] == 1.0 and baseline["adherence"]["world"] == "moving-shapes"
    assert set(VIDEO_ATTRIBUTES) <= set(baseline["adherence"]) and "shape" not in baseline["adherence"]
    # The variant's second video plays backwards: it loses that video's direction, nothing else.
    variant = write("v", [video_world.render(scenes[0], 0), video_world.render(scenes[1], 0)[::-1]])
    attach_adherence(variant, model, workload, baseline, tmp_path, keys)
    assert variant["adherence"]["direction"] == 0.5
    assert variant["adherence_loss"] == pytest.approx(1 / 8)
    assert variant["adherence"]["vs_baseline"]["by_kind"]["direction"] == pytest.approx(1 / 2)
    table = adherence_table([baseline, variant])
    assert "direction ↑" in table and "persistence ↑" in table and "shape ↑" not in table
