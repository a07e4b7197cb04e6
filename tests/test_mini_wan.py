"""mini-wan: the moving-shapes world and its video scorer, the committed weights (hash, recipe), the expert
split of the schedule, a few steps of the training code, and the trained model's adherence on held-out
captions with both experts and with one. No full training in CI."""

from __future__ import annotations

import copy
import itertools
import math
import shutil

import numpy as np
import pytest

from accel.errors import ConfigError
from accel.measure import adherence
from accel.measure.video_adherence import VIDEO_ATTRIBUTES, analyse_video, score_video
from accel.zoo import mini_wan, mini_wan_train, video_world

# The benchmark's set (benchmarks/mini_wan_adherence.py --seeds 0 1, the numbers docs/zoo.md quotes): every
# held-out combination at two seeds, 48 videos, about 8 s a setting. (Every other combination at one seed, 12
# videos, could not tell the low-noise expert alone from both: lost 0.083 and gained 0.083 where the 48 give 0.109
# and 0.026.)
SCENES = list(video_world.HELD_OUT_SCENES)
SEEDS = [0, 1]


def _short_recipe(videos: int, steps: int) -> dict:
    """mini-wan's recipe cut to ``videos`` videos and ``steps`` steps a stage (batch 4), with the decoder's
    fine-tune beside the experts whether or not the committed recipe has it."""
    config = copy.deepcopy(mini_wan.MINI_WAN_CONFIG)
    config["train"]["videos"] = videos
    config["train"].setdefault("vae_decoder", copy.deepcopy(config["train"]["vae_videos"]))
    for stage in ("text", "vae_frames", "vae", "vae_videos", "vae_decoder", "expert"):
        config["train"][stage].update(steps=steps, warmup=1, batch=4)
    config["train"]["expert"]["steps_by_expert"] = {}
    return config


# ---- the world and its scorer -------------------------------------------------------------------------------


def test_the_scorer_recovers_every_attribute_of_the_world_s_own_videos():
    scenes = video_world.all_scenes()
    scores = [score_video(scene, video_world.render(scene, seed=i)) for i, scene in enumerate(scenes)]
    summary = adherence.summarise(scores, attributes=VIDEO_ATTRIBUTES)
    assert summary["n"] == len(scenes) == 224
    for kind in (*VIDEO_ATTRIBUTES, "overall"):
        assert summary[kind] >= 0.98, (kind, summary[kind])


def test_held_out_combinations_never_appear_in_training_and_every_value_does():
    held = set(video_world.HELD_OUT_SCENES)
    assert len(held) == video_world.HELD_OUT_COUNT
    assert not held & set(video_world.training_scenes())
    assert len(video_world.training_scenes()) + len(held) == len(video_world.all_scenes())
    for kind, values in (("background", video_world.PALETTE), ("direction", video_world.DIRECTIONS)):
        assert {getattr(s, kind) for s in video_world.training_scenes()} == set(values)


@pytest.mark.parametrize("template", range(len(video_world.TEMPLATES)))
def test_captions_parse_back_to_their_scene(template):
    for scene in video_world.all_scenes()[::17]:
        assert video_world.parse_caption(scene.caption(template)) == scene
    assert video_world.parse_caption("a red ball moving sideways on a blue background") is None
    assert video_world.parse_caption("a red fox in the snow") is None


def test_rendering_is_deterministic_jittered_by_seed_and_moves_the_named_way():
    scene = video_world.VideoScene("blue", "red", "up")
    assert np.array_equal(video_world.render_array(scene, 3), video_world.render_array(scene, 3))
    assert not np.array_equal(video_world.render_array(scene, 3), video_world.render_array(scene, 4))
    assert video_world.render_array(scene).shape == (3, video_world.FRAMES, 64, 64)
    assert (video_world.FRAMES - 1) % 4 == 0, "Wan's VAE takes 4k + 1 frames"
    for seed in range(40):
        centres, _ = video_world.trajectory(scene, seed)
        steps = [(b[0] - a[0], (b[1] - a[1] + 0.5) % 1.0 - 0.5) for a, b in itertools.pairwise(centres)]
        assert all(dx == 0 and dy < 0 for dx, dy in steps), (seed, centres)  # up, the short way round the torus


def test_the_world_is_a_torus_that_starts_anywhere():
    # The start says nothing of the direction (Wan's transformer has relative positions only, docs/zoo.md).
    starts = {d: [video_world.trajectory(video_world.VideoScene("blue", "red", d), s)[0][0] for s in range(200)]
              for d in video_world.DIRECTIONS}  # fmt: skip
    for direction, points in starts.items():
        xs, ys = zip(*points, strict=True)
        assert min(xs) < 0.1 and max(xs) > 0.9 and min(ys) < 0.1 and max(ys) > 0.9, direction
    # A ball crossing the right edge shows on both sides, and the scorer reads one ball moving right.
    scene = video_world.VideoScene("black", "white", "right")
    crossing = next(s for s in range(200) if video_world.trajectory(scene, s)[0][0][0] > 0.85)
    frames = np.stack([np.asarray(f) for f in video_world.render(scene, crossing)])
    ball = np.abs(frames.astype(int) - np.array(video_world.PALETTE["black"])).sum(axis=3) > 60
    assert any(frame[:, 0].any() and frame[:, -1].any() for frame in ball)
    assert score_video(scene, frames)["overall"] == 1.0


def _video(background: str, colour: str, xs: list[float | None], y: float = 32.0) -> np.ndarray:
    """Frames (F, H, W, 3, uint8) of a 12-pixel square of ``colour`` centred at each x (None: no square)."""
    frames = np.tile(np.array(video_world.PALETTE[background], dtype=np.uint8), (len(xs), 64, 64, 1))
    for frame, x in zip(frames, xs, strict=True):
        if x is not None:
            frame[int(y) - 6 : int(y) + 6, int(x) - 6 : int(x) + 6] = video_world.PALETTE[colour]
    return frames


def test_hand_made_videos_lose_exactly_what_they_get_wrong():
    rightwards = [12.0 + 5 * i for i in range(9)]
    scene = video_world.VideoScene("green", "yellow", "right")
    assert score_video(scene, _video("green", "yellow", rightwards))["overall"] == 1.0
    # Moving the other way loses the direction only.
    lost = score_video(scene, _video("green", "yellow", rightwards[::-1]))
    assert lost == {"background": 1.0, "colour": 1.0, "direction": 0.0, "persistence": 1.0, "overall": 0.75}
    # A ball that stands still has no direction; one missing from a frame is not persistent.
    assert analyse_video(_video("green", "yellow", [30.0] * 9)).direction is None
    gone = [*rightwards[:4], None, *rightwards[5:]]
    assert score_video(scene, _video("green", "yellow", gone)) == {
        "background": 1.0, "colour": 1.0, "direction": 1.0, "persistence": 0.0, "overall": 0.75,
    }  # fmt: skip
    assert score_video(scene, _video("blue", "yellow", rightwards))["background"] == 0.0
    assert score_video(scene, _video("green", "red", rightwards))["colour"] == 0.0


def test_a_ball_across_the_edge_is_one_ball_moving_the_short_way_round():
    # Squares moving right across the right edge: split in two regions at the crossing, one ball on the torus.
    across = [42.0 + 5 * i for i in range(9)]  # frame 4 centred at x = 62: split 8 pixels right, 4 left
    frames = np.tile(np.array(video_world.PALETTE["green"], dtype=np.uint8), (9, 64, 64, 1))
    for frame, x in zip(frames, across, strict=True):
        columns = [int(c) % 64 for c in range(int(x) - 6, int(x) + 6)]
        frame[26:38, columns] = video_world.PALETTE["yellow"]
    found = analyse_video(frames)
    assert found.direction == "right" and found.persistence
    assert found.centroids[4] is not None and found.centroids[4][0] == pytest.approx(62 / 64, abs=0.005)
    assert found.centroids[-1] is not None and found.centroids[-1][0] == pytest.approx((82 % 64) / 64, abs=0.005)
    assert analyse_video(frames[::-1]).direction == "left"


def test_vertical_motion_reads_as_up_or_down_in_image_coordinates():
    down = np.stack([_video("black", "white", [32.0], y=12.0 + 5 * i)[0] for i in range(9)])
    assert analyse_video(down).direction == "down"
    assert analyse_video(down[::-1]).direction == "up"


# ---- the expert split and the training code -----------------------------------------------------------------


def test_each_expert_learns_exactly_the_timesteps_the_pipeline_gives_it():
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    config = mini_wan.MINI_WAN_CONFIG
    shift, boundary = config["scheduler"]["shift"], config["boundary_ratio"]
    scheduler = FlowMatchEulerDiscreteScheduler(**config["scheduler"])
    scheduler.set_timesteps(50)
    ranges = {e: mini_wan.sigma_range(e, boundary, shift) for e in mini_wan.EXPERTS}
    seen = set()
    for t in scheduler.timesteps:
        # WanPipeline: transformer while t >= boundary_ratio * num_train_timesteps, transformer_2 below.
        expert = "transformer" if t >= boundary * scheduler.config.num_train_timesteps else "transformer_2"
        sigma = float(t) / scheduler.config.num_train_timesteps
        low, high = (float(mini_wan_train.shifted_sigma(torch.tensor(u), shift)) for u in ranges[expert])
        assert low - 1e-6 <= sigma <= high + 1e-6, (float(t), expert, low, high)
        seen.add(expert)
    assert seen == set(mini_wan.EXPERTS)
    assert ranges["transformer"][0] == ranges["transformer_2"][1]


def test_the_video_vae_starts_as_the_image_vae_applied_frame_by_frame():
    import torch

    vae = mini_wan_train.per_frame_init(mini_wan.build_components(mini_wan.MINI_WAN_CONFIG)["vae"])
    frame = torch.rand(1, 3, 1, 32, 32) * 2 - 1
    with torch.no_grad():
        still = vae.decode(vae.encode(frame.repeat(1, 1, 5, 1, 1)).latent_dist.mean).sample
        alone = vae.decode(vae.encode(frame).latent_dist.mean).sample
    # A clip that does not move decodes, frame by frame, to what the single frame decodes to.
    assert still.shape[2] == 5
    assert torch.allclose(still, alone.expand_as(still), atol=1e-5), float((still - alone).abs().max())


def test_the_text_stage_tags_one_token_per_word_with_its_role():
    tokenizer = mini_wan.build_components(mini_wan.MINI_WAN_CONFIG)["tokenizer"]
    scene = video_world.VideoScene("blue", "red", "left")
    for template in range(len(video_world.TEMPLATES)):
        caption = scene.caption(template)
        tags = mini_wan_train.caption_tags(scene, template)
        ids = tokenizer(caption).input_ids
        assert len(ids) == len(tags) + 1 <= mini_wan.MAX_SEQUENCE_LENGTH  # one token a word, then </s>
        assert tags.count("colour:red") == tags.count("background:blue") == tags.count("direction:left") == 1
        assert set(tags) <= set(mini_wan_train.word_roles())


def test_a_few_training_steps_write_a_checkpoint_the_zoo_loader_accepts(tmp_path):
    from accel.measure import mini_wan_eval

    config = _short_recipe(16, 2)
    config["train"]["expert"]["steps_by_expert"] = {"transformer": 3}  # the recipe's per-expert step count
    config["boundary_ratio"] = 0.5  # not the committed recipe's: the retrain's pipeline switches where it trained
    manifest = mini_wan.train(tmp_path, config, threads=1, progress=False)
    assert mini_wan.verify_weights(tmp_path) == manifest
    assert mini_wan_eval.load_pipeline(tmp_path).config.boundary_ratio == 0.5
    assert manifest["expert_steps"] == {"transformer": 3, "transformer_2": 2}
    # The recipe's compile reached each expert's stage, through the path `zoo train` takes (forked workers where two
    # cores are free), and inductor compiled it: another backend, or the flag lost on the way, compiles none.
    assert config["train"]["expert"]["compile"] is True
    assert all(manifest["expert_inductor_graphs"][e] >= 1 for e in mini_wan.EXPERTS), manifest["expert_inductor_graphs"]
    # What decides the bits besides the recipe: the libraries, the data's renderer and the CPU (docs/zoo.md, wave 11).
    assert {"torch", "diffusers", "transformers", "numpy", "Pillow"} <= set(manifest["versions"])
    assert manifest["cpu"] and isinstance(manifest["cpu"], str)
    log = (tmp_path / mini_wan.LOG_FILE).read_text()
    assert "transformer step 3/3" in log and "transformer_2 step 2/2" in log, log
    stages = {"text", "vae_frames", "vae", "vae_videos", "vae_decoder", *mini_wan.EXPERTS}
    assert set(manifest["final_losses"]) == stages
    assert manifest["expert_sigma_ranges"]["transformer"][0] == pytest.approx(config["boundary_ratio"])
    components = mini_wan.build_mini_wan(config, weights_dir=tmp_path)
    assert components["boundary_ratio"] == config["boundary_ratio"]
    assert list(components["vae"].config.latents_std) == manifest["latent"]["latents_std"]


def test_the_experts_trained_side_by_side_are_the_experts_trained_one_after_the_other(tmp_path, monkeypatch):
    config = _short_recipe(8, 3)
    hashes = {}
    for cores in (1, 2):
        monkeypatch.setattr(mini_wan_train, "usable_cores", lambda n=cores: n)
        manifest = mini_wan.train(tmp_path / str(cores), config, threads=1, progress=False)
        # The decoder's fine-tune runs beside the experts too: the VAE's file is the same either way.
        hashes[cores] = {name: manifest["files"][mini_wan.COMPONENT_FILES[name]] for name in (*mini_wan.EXPERTS, "vae")}
        log = (tmp_path / str(cores) / "train_log.txt").read_text()
        assert all(f"{expert} step 3/3" in log for expert in mini_wan.EXPERTS), log
        assert log.count("vae step 3/3") == 4, log  # frames, clips, whole videos, then the decoder alone
    assert hashes[1] == hashes[2]


def test_side_by_side_workers_inherit_their_jobs_and_pickle_only_their_results(monkeypatch):
    import os

    # Pickled, a job's tensors would go through /dev/shm (the decoder stage's 1.3 GB of videos; a container's default
    # is 64 MB): the jobs here cannot be pickled at all (a local function, a lambda), so only inheriting them works.
    monkeypatch.setattr(mini_wan_train, "usable_cores", lambda: 2)

    def job(arguments, log_path):
        make, value = arguments
        return {}, {"value": make(value), "pid": os.getpid()}, [f"job {value}"]

    jobs = [(job, (lambda v: v * 10, value)) for value in (1, 2, 3)]
    results = mini_wan_train._side_by_side(jobs, None)
    assert [r[1]["value"] for r in results] == [10, 20, 30]
    assert all(r[1]["pid"] != os.getpid() for r in results)  # each ran in a forked worker
    assert mini_wan_train._FORKED_JOBS == []  # the next stage's fork does not carry these along


def test_a_recipe_with_compile_trains_the_expert_through_torch_compile_and_one_without_does_not():
    import torch
    from torch._dynamo.utils import counters

    from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog

    config = _short_recipe(8, 2)
    model = mini_wan_train.build_components(config)["transformer"]
    compiled = mini_wan_train.training_forward(model, compile=True)
    assert compiled._orig_mod is model  # the optimiser and the EMA see the expert's own parameters
    assert mini_wan_train.training_forward(model, compile=False) is model
    data = torch.randn(8, 8, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    masks, embeds, index = torch.zeros(8, 1, 3, 8, 8), torch.randn(2, 16, 64), torch.zeros(8, dtype=torch.long)
    graphs, inductor = [], []
    for compile in (False, True):
        config["train"]["expert"]["compile"] = compile
        torch._dynamo.reset()
        counters.clear()
        result = mini_wan_train._train_expert(
            "transformer", model, data, masks, embeds, index, 1, config, torch.Generator().manual_seed(1),
            ThreadPicker([1]), TrainLog(None), progress=False,
        )  # fmt: skip
        assert math.isfinite(result["final_loss"])
        graphs.append(counters["stats"]["unique_graphs"])
        inductor.append(result["inductor_graphs"])
    assert graphs[0] == 0 and graphs[1] >= 1, graphs
    assert inductor[0] == 0 and inductor[1] >= 1, inductor  # inductor's graphs: not dynamo with another backend
    assert mini_wan.MINI_WAN_CONFIG["train"]["expert"]["compile"] is True  # the committed recipe's


def test_the_decoder_stage_trains_the_decoder_and_leaves_the_encoder_and_so_every_latent(tmp_path):
    import torch

    from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog

    # The stage's loop runs on the one thread it is given: the latents compared are taken on one thread too (a
    # convolution's sums split over two threads round otherwise; it passed only after a test that left one thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    vae = mini_wan_train.build_components(mini_wan.MINI_WAN_CONFIG)["vae"]
    videos = torch.from_numpy(mini_wan_train.make_dataset(4, seed=0)[0])
    before = {name: p.detach().clone() for name, p in vae.named_parameters()}
    with torch.no_grad():
        latents = vae.encode(videos).latent_dist.mean
    cfg = {**mini_wan.MINI_WAN_CONFIG["train"]["vae_videos"], "steps": 3, "warmup": 1, "batch": 2}
    result = mini_wan_train._train_decoder(
        vae, videos, cfg, torch.Generator().manual_seed(0), ThreadPicker([1]), TrainLog(None), progress=False
    )
    assert math.isfinite(result["final_loss"])
    decoding = {id(p) for p in mini_wan_train.decoder_parameters(vae)}
    changed = {name for name, p in vae.named_parameters() if not torch.equal(p, before[name])}
    trained = {name for name, p in vae.named_parameters() if id(p) in decoding}
    assert changed and changed <= trained, sorted(changed - trained)
    assert any(name.startswith("decoder.") for name in changed)
    with torch.no_grad():
        assert torch.equal(vae.encode(videos).latent_dist.mean, latents)
    assert all(p.requires_grad for p in vae.parameters())  # the freeze does not outlast the stage
    torch.set_num_threads(threads)


def test_the_ball_weight_changes_what_the_experts_learn(tmp_path):
    config = _short_recipe(8, 3)
    del config["train"]["vae_decoder"]
    hashes = []
    for weight in (0.0, 4.0):
        config["train"]["expert"]["ball_weight"] = weight
        manifest = mini_wan.train(tmp_path / str(weight), config, threads=1, progress=False)
        hashes.append({name: manifest["files"][mini_wan.COMPONENT_FILES[name]] for name in mini_wan.EXPERTS})
    assert all(hashes[0][name] != hashes[1][name] for name in mini_wan.EXPERTS)


def test_the_ball_masks_mark_the_ball_on_the_pixel_and_the_latent_grid():
    import torch

    scene = video_world.VideoScene("blue", "red", "right")
    video = torch.from_numpy(video_world.render_array(scene, seed=3))[None]
    mask = mini_wan_train.ball_mask(video)
    assert mask.shape == (1, 1, video_world.FRAMES, 64, 64)
    centres, radius = video_world.trajectory(scene, 3)
    area = math.pi * (radius * 64) ** 2
    assert all(abs(float(frame.sum()) - area) < 0.25 * area for frame in mask[0, 0])
    x, y = (int(v * 64) for v in centres[0])
    assert mask[0, 0, 0, y, x] == 1 and mask[0, 0, 0, (y + 32) % 64, (x + 32) % 64] == 0
    latent = mini_wan_train.latent_ball_mask(video)
    assert latent.shape == (1, 1, 3, 8, 8)
    assert latent[0, 0, 0, y // 8, x // 8] == 1 and 0 < float(latent.mean()) < 0.3
    weights = mini_wan_train.ball_weighting(4.0)(video)
    assert set(torch.unique(weights).tolist()) == {1.0, 5.0}


def test_zoo_train_mini_wan_runs_mini_wan_s_training_and_prints_the_committed_losses(monkeypatch, capsys, tmp_path):
    from conftest import invoke

    calls = []

    def fake_train(target, threads=None):
        calls.append((target, threads))
        return {"final_losses": {"transformer_2": 0.5}, "seconds": {"total": 60.0}, "sha256": "f" * 64}

    monkeypatch.setattr(mini_wan, "train", fake_train)
    code, out, _ = invoke(monkeypatch, capsys, "zoo", "train", "mini-wan", "--out", str(tmp_path), "--threads", "1")
    assert code == 0 and calls == [(tmp_path, 1)]
    committed = mini_wan.read_manifest()["final_losses"]["transformer_2"]
    assert f"transformer_2: final loss 0.50000 (committed: {committed:.5f})" in out


# ---- the committed weights ----------------------------------------------------------------------------------


def test_the_committed_manifest_matches_the_recipe_and_the_weights():
    manifest = mini_wan.verify_weights()
    assert manifest["sha256"] == mini_wan.weights_hash()
    assert manifest["config"] == mini_wan.MINI_WAN_CONFIG, "the recipe changed since training: retrain"
    assert manifest["world_version"] == video_world.WORLD_VERSION
    assert manifest["max_sequence_length"] == mini_wan.MAX_SEQUENCE_LENGTH
    assert manifest["config"]["train"]["seed"] == 0
    stages = {"text", "vae_frames", "vae", "vae_videos", "vae_decoder", *mini_wan.EXPERTS}
    assert set(manifest["final_losses"]) == stages
    assert all(math.isfinite(v) for v in manifest["final_losses"].values())
    assert manifest["seconds"]["total"] <= 45 * 60, "the committed run took longer than issue 43's 45 minutes"
    assert manifest["threads"] == 1, "the committed run fixed one thread (docs/zoo.md says why)"
    # What a reproduction must match besides the recipe (docs/zoo.md, wave 11): the libraries, the renderer, the CPU.
    assert {"torch", "diffusers", "transformers", "numpy", "Pillow"} <= set(manifest["versions"])
    assert manifest["cpu"] and isinstance(manifest["cpu"], str)
    # Each expert's own step count (train.expert.steps_by_expert, else steps), declared and as the log ran it:
    # the high-noise expert learns the direction word only after 10000 steps (docs/zoo.md, waves 9-10).
    expert_cfg = manifest["config"]["train"]["expert"]
    assert manifest["expert_steps"] == {e: mini_wan_train.expert_steps(expert_cfg, e) for e in mini_wan.EXPERTS}
    assert manifest["expert_steps"] == {"transformer": 22000, "transformer_2": 18000}
    # The low-noise expert's draws lean to the top of its range (docs/zoo.md, wave 14).
    assert mini_wan_train.expert_settings(expert_cfg, "transformer_2")["sigma_power"] == 0.5
    assert expert_cfg["compile"] is True  # what buys those steps within the 45 minutes (docs/zoo.md, wave 13)
    log = (mini_wan.WEIGHTS_DIR / mini_wan.LOG_FILE).read_text()
    assert all(f"{e} step {n}/{n} " in log for e, n in manifest["expert_steps"].items())
    mini_wan.build_settings(manifest)
    total = sum((mini_wan.WEIGHTS_DIR / f).stat().st_size for f in mini_wan.COMPONENT_FILES.values())
    assert total <= 10 * 2**20
    assert (mini_wan.WEIGHTS_DIR / mini_wan.LOG_FILE).read_text().strip()


def test_a_recipe_that_switches_the_experts_elsewhere_than_the_weights_learnt_is_refused():
    # Wave 12's first diagnosis table was taken with a recipe edit in the working tree (boundary 0.6) on weights
    # trained at 0.75: the experts ran sigmas they never learnt and nothing said so.
    config = copy.deepcopy(mini_wan.MINI_WAN_CONFIG)
    config["boundary_ratio"] = 0.6
    with pytest.raises(ConfigError, match=r"manifest\.json: .*boundary_ratio 0\.6 \(trained: 0\.75\).*load_pipeline"):
        mini_wan.build_mini_wan(config)
    config = copy.deepcopy(mini_wan.MINI_WAN_CONFIG)
    config["train"]["expert"]["lr"] = 0.5  # the training recipe is not what the weights fix
    assert set(mini_wan.build_mini_wan(config)) >= {"transformer", "transformer_2", "vae"}


def test_tampered_weights_are_refused(tmp_path):
    copy_dir = tmp_path / "weights"
    shutil.copytree(mini_wan.WEIGHTS_DIR, copy_dir)
    path = copy_dir / mini_wan.COMPONENT_FILES["transformer_2"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"transformer_2\.safetensors: SHA-256 .* does not match"):
        mini_wan.verify_weights(copy_dir)


# ---- what the committed model learned (benchmarks/mini_wan_adherence.py has the full numbers) ----------------


@pytest.fixture(scope="module")
def pipe():
    import torch

    from accel.measure import mini_wan_eval

    torch.set_num_threads(1)
    return mini_wan_eval.load_pipeline()


@pytest.fixture(scope="module")
def both_experts(pipe):
    from accel.measure import mini_wan_eval

    return mini_wan_eval.held_out_adherence(pipe, SCENES, SEEDS, guidance_scale=5.0)


# The guidance the target is held at: each expert its own (WanPipeline's guidance_scale for the high-noise steps,
# guidance_scale_2 for the low-noise ones), chosen on 96 videos of *training* combinations (docs/zoo.md, waves 11
# and 13), never on the held-out ones.
TARGET_GUIDANCE = (12.0, 3.0)


@pytest.fixture(scope="module")
def at_target_guidance(pipe):
    from accel.measure import mini_wan_eval

    high, low = TARGET_GUIDANCE
    return mini_wan_eval.held_out_adherence(pipe, SCENES, SEEDS, guidance_scale=high, guidance_scale_2=low)


def test_held_out_captions_with_guidance_reach_the_colour_and_direction_targets(at_target_guidance):
    # Issue 43's target, at the guidance chosen on training combinations (12 / 3, docs/zoo.md): wave 14's weights
    # give colour 0.938 [0.83, 0.98] (45 of 48) and direction 0.917 [0.80, 0.97] (44 of 48; a strict xfail until
    # then: wave 13's 0.917 and 0.875, wave 11's 0.90 and 0.81).
    assert at_target_guidance["colour"] >= 0.9 and at_target_guidance["direction"] >= 0.9, at_target_guidance


def test_held_out_captions_with_guidance_move_the_ball_the_asked_way_well_above_chance(both_experts):
    # Wave 14's weights at guidance 5: 46 of 48 held-out videos (0.958 [0.86, 0.99]) move the asked way (wave 13: 42,
    # wave 11: 35, wave 10: 31; wave 7's 10000-step high-noise expert moved 13 (0.27 [0.17, 0.41]), about chance).
    assert both_experts["direction"] >= 0.5, both_experts
    assert both_experts["colour"] >= 0.7 and both_experts["persistence"] >= 0.9, both_experts


def test_each_expert_guided_apart_is_wan_s_own_argument_and_changes_the_video(pipe):
    """guidance_scale_2 reaches only the low-noise expert's steps: it changes the video, and set to guidance_scale
    it is the pipeline's default (one scale for both)."""
    from accel.measure import mini_wan_eval

    prompt = SCENES[0].caption(0)
    same = mini_wan_eval.generate(pipe, prompt, 0, 5.0, 20)
    assert (mini_wan_eval.generate(pipe, prompt, 0, 5.0, 20, guidance_scale_2=5.0) == same).all()
    assert not (mini_wan_eval.generate(pipe, prompt, 0, 5.0, 20, guidance_scale_2=3.0) == same).all()


def test_finishing_from_the_first_step_is_the_pipeline_s_own_video(pipe):
    import torch

    from accel.measure import mini_wan_eval
    from accel.zoo.mini_wan import MAX_SEQUENCE_LENGTH

    noise = torch.randn(1, 8, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    prompt = SCENES[0].caption(0)
    high, low = TARGET_GUIDANCE
    video = pipe(prompt, height=64, width=64, num_frames=9, num_inference_steps=20, guidance_scale=high,
                 guidance_scale_2=low, max_sequence_length=MAX_SEQUENCE_LENGTH, latents=noise.clone(),
                 output_type="np").frames[0]  # fmt: skip
    finished = mini_wan_eval.finish(pipe, noise.clone(), prompt, 0, high, low)
    assert float(abs(video - finished).max()) < 1e-4  # float rounding only (2.4e-6 measured)
    # The guidance reaches the experts as the pipeline's does: another low-noise guidance, another video.
    assert float(abs(mini_wan_eval.finish(pipe, noise.clone(), prompt, 0, high, 5.0) - video).max()) > 0.05
    # At guidance 1 the pipeline guides neither expert, whatever guidance_scale_2 says.
    unguided = pipe(prompt, height=64, width=64, num_frames=9, num_inference_steps=20, guidance_scale=1.0,
                    guidance_scale_2=low, max_sequence_length=MAX_SEQUENCE_LENGTH, latents=noise.clone(),
                    output_type="np").frames[0]  # fmt: skip
    assert float(abs(unguided - mini_wan_eval.finish(pipe, noise.clone(), prompt, 0, 1.0, low)).max()) < 1e-4


def test_finishing_the_truth_from_sigma_0_is_the_vae_s_round_trip_of_the_same_videos(pipe):
    import torch

    from accel.measure import mini_wan_eval

    scenes = SCENES[:6]
    finished: list = []
    kept = mini_wan_eval.finish_from_truth(pipe, scenes, [1], 0.0, *TARGET_GUIDANCE, videos=finished)
    assert kept["start_sigma"] == 0.0 and kept["n"] == len(finished) == len(scenes)
    for i, scene in enumerate(scenes):  # no step left to run: what is scored is the decoder's drawing of the truth
        video = torch.from_numpy(video_world.render_array(scene, seed=20_000 + 100 + i))[None]
        with torch.no_grad():
            decoded = pipe.vae.decode(pipe.vae.encode(video).latent_dist.mean).sample.clamp(-1, 1)[0]
        frames = ((decoded.permute(1, 2, 3, 0).numpy() + 1.0) / 2.0).astype(np.float32)
        # Each scene its own render seed: one seed for every scene would give them all one trajectory.
        assert float(abs(finished[i] - frames).max()) < 1e-4, i  # normalised and back: float rounding only
        scored = score_video(scene, frames)
        assert kept["per_image"][f"p{i}_s1"] == {kind: int(scored[kind]) for kind in VIDEO_ATTRIBUTES}, i


def test_finishing_the_truth_part_way_noises_each_scene_with_its_own_draw_as_flow_matching_does(pipe):
    # From sigma 0 the noise is multiplied by 0: only a start part way sees how the truth is noised. Each scene's
    # noise is its own draw (seed 100 * seed + i), mixed as rectified flow trains and samples: (1 - s) x0 + s noise.
    import torch

    from accel.measure import mini_wan_eval

    scenes, steps = SCENES[:2], 20
    finished: list = []
    kept = mini_wan_eval.finish_from_truth(pipe, scenes, [1], 0.6, *TARGET_GUIDANCE, steps=steps, videos=finished)
    pipe.scheduler.set_timesteps(steps)
    sigmas = [float(s) for s in pipe.scheduler.sigmas]
    start = next(k for k, s in enumerate(sigmas) if s <= 0.6)
    assert 0 < start < steps and kept["start_sigma"] == sigmas[start]
    config = pipe.vae.config
    mean, std = (torch.tensor(v).view(1, -1, 1, 1, 1) for v in (config.latents_mean, config.latents_std))
    for i, scene in enumerate(scenes):
        video = torch.from_numpy(video_world.render_array(scene, seed=20_000 + 100 + i))[None]
        with torch.no_grad():
            x0 = (pipe.vae.encode(video).latent_dist.mean - mean) / std
        noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(100 + i))
        latents = (1 - sigmas[start]) * x0 + sigmas[start] * noise
        expected = mini_wan_eval.finish(pipe, latents, scene.caption(i), start, *TARGET_GUIDANCE, steps=steps)
        assert float(abs(finished[i] - expected).max()) < 1e-5, i


def test_the_high_noise_expert_alone_loses_more_than_it_gains_video_by_video(pipe, both_experts):
    from accel.measure import mini_wan_eval

    with mini_wan_eval.only_expert(pipe, "transformer"):
        alone = mini_wan_eval.held_out_adherence(pipe, SCENES, SEEDS, guidance_scale=5.0)
    assert pipe.config.boundary_ratio == mini_wan.MINI_WAN_CONFIG["boundary_ratio"]
    paired = adherence.paired_loss(both_experts["per_image"], alone["per_image"])
    assert paired["loss"] > paired["gained"], paired
    assert alone["overall"] < both_experts["overall"], (alone["overall"], both_experts["overall"])


def test_the_low_noise_expert_alone_loses_more_than_it_gains_video_by_video(pipe, both_experts):
    from accel.measure import mini_wan_eval

    with mini_wan_eval.only_expert(pipe, "transformer_2"):
        alone = mini_wan_eval.held_out_adherence(pipe, SCENES, SEEDS, guidance_scale=5.0)
    paired = adherence.paired_loss(both_experts["per_image"], alone["per_image"])
    assert paired["loss"] > paired["gained"], paired


# ---- what limits it: the VAE's round trip and the high-noise expert's response to a caption's words -----------


@pytest.fixture(scope="module")
def round_trip(pipe):
    from accel.measure import mini_wan_eval

    return mini_wan_eval.vae_round_trip_adherence(pipe.vae, SCENES, SEEDS)


def test_the_vae_draws_the_held_out_videos_background_and_ball(round_trip):
    assert round_trip["n"] == len(SCENES) * len(SEEDS)
    for kind in ("background", "persistence"):
        assert round_trip[kind] >= 0.9, (kind, round_trip)


# The wave 11 VAE drew a dark blob near the middle of red backgrounds, which the scorer took for the ball (round
# trip of these 48 videos: colour 0.854, direction 0.833, every direction miss on red). The recipe's decoder-only
# fine-tune on whole videos (train.vae_decoder, wave 13) removes most of it: colour 44 of 48 (0.917), direction
# 45 of 48 (0.938; docs/zoo.md).
def test_the_vae_lets_the_held_out_motion_through(round_trip):
    assert round_trip["direction"] >= 0.9, round_trip


def test_the_vae_lets_the_held_out_colours_through(round_trip):
    assert round_trip["colour"] >= 0.9, round_trip


def _preference(pipe, scene, other):
    from accel.measure import mini_wan_eval

    return mini_wan_eval.caption_preference(pipe, scene, other, "transformer", sigma=0.85)


def test_the_high_noise_expert_reads_the_ball_colour_word(pipe):
    # The right colour word brings the expert's prediction closer to the truth. Wave 13's expert: wrong/right caption
    # MSE 1.699, the right caption closer on 29 of 32 draws (the nearest miss 2.2% from a tie, the nearest hit
    # 7.3%: far beyond another CPU's rounding); wave 11's read it on 28 (1.539), wave 10's on 32 (1.805).
    response = _preference(
        pipe, video_world.VideoScene("blue", "red", "left"), video_world.VideoScene("blue", "green", "left")
    )
    assert response["ratio"] > 1.1 and response["right_closer"] >= 0.9, response


def test_the_low_noise_expert_reads_the_ball_colour_word(pipe):
    # The probe's positive control, on the expert that draws the ball's colour (sigma 0.5, inside its range).
    from accel.measure import mini_wan_eval

    response = mini_wan_eval.caption_preference(
        pipe,
        video_world.VideoScene("blue", "red", "left"),
        video_world.VideoScene("blue", "green", "left"),
        "transformer_2",
        sigma=0.5,
    )
    assert response["ratio"] > 1.1 and response["right_closer"] >= 0.9, response


def test_the_high_noise_expert_reads_the_direction_word(pipe):
    # The world's start is anywhere, so the direction is the motion between frames: the relation Wan's relative
    # positions can express (the v1 world asked for an absolute placement and its expert ignored the word).
    # Wave 13's expert: wrong/right caption MSE 2.649, right closer on 1.00 of draws (wave 11's: 2.363, 1.00; wave
    # 10's: 1.532, 0.97); wave 7's 10000-step one ignored the word (1.000, 0.50; docs/zoo.md).
    response = _preference(
        pipe, video_world.VideoScene("blue", "red", "left"), video_world.VideoScene("blue", "red", "right")
    )
    assert response["ratio"] > 1.3 and response["right_closer"] >= 0.9, response
