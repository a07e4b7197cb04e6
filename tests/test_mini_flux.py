"""mini-flux: the committed weights (hash, size, config), a few steps of the training code, and the
trained baseline's adherence on held-out prompts through plain diffusers. No training in CI."""

from __future__ import annotations

import copy
import math
import shutil

import pytest
from conftest import invoke

from accel import zoo
from accel.errors import ConfigError
from accel.zoo import mini_flux, world

# Every fourth held-out prompt (combinations never seen in training), chosen before the shapes-v2 weights were
# scored: 12 prompts, every template, 5 of them leaving the position open (an open caption names a background,
# colour and shape that training saw at the other positions: it tests choosing a place, not generalisation).
PROMPTS = list(world.HELD_OUT_PROMPTS[::4])


def test_prompts_are_held_out():
    assert set(PROMPTS) <= set(world.HELD_OUT_PROMPTS)
    assert len(PROMPTS) == 12 and sum(world.parse_caption(p).position is None for p in PROMPTS) == 5


def test_committed_weights_match_their_hash_config_and_budget():
    manifest = mini_flux.verify_weights()
    # Pinned: weights swapped together with a manifest rewritten to match them must still fail here (a retrain
    # updates this line, README and CHANGELOG in the same commit).
    assert manifest["sha256"].startswith("1eba4d0507010dee"), manifest["sha256"]
    assert manifest["config"] == mini_flux.MINI_FLUX_CONFIG, "config changed since training: retrain"
    assert manifest["world_version"] == world.WORLD_VERSION
    assert manifest["max_sequence_length"] == mini_flux.MAX_SEQUENCE_LENGTH == 32
    total = sum((mini_flux.WEIGHTS_DIR / f).stat().st_size for f in mini_flux.COMPONENT_FILES.values())
    assert total <= 25 * 2**20
    assert all(math.isfinite(v) for v in manifest["final_losses"].values())
    assert (mini_flux.WEIGHTS_DIR / mini_flux.LOG_FILE).read_text().strip()


def test_tampered_weights_are_refused(tmp_path):
    copy_dir = tmp_path / "weights"
    shutil.copytree(mini_flux.WEIGHTS_DIR, copy_dir)
    path = copy_dir / mini_flux.COMPONENT_FILES["transformer"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"transformer\.safetensors: SHA-256 .* does not match"):
        mini_flux.verify_weights(copy_dir)


def test_a_few_training_steps_write_a_loadable_checkpoint(tmp_path):
    config = copy.deepcopy(mini_flux.MINI_FLUX_CONFIG)
    config["train"]["images"] = 16
    config["train"]["vae"] |= {"steps": 2, "batch": 4}
    config["train"]["transformer"] |= {"steps": 3, "batch": 4, "warmup": 1}
    config["train"]["text"] |= {"steps": 2, "batch": 4, "warmup": 1}
    manifest = mini_flux.train(tmp_path, config, threads=1, progress=False)
    assert all(math.isfinite(v) for v in manifest["final_losses"].values())
    log = (tmp_path / mini_flux.LOG_FILE).read_text()
    assert "vae step 2/2" in log and "transformer step 3/3" in log and "text step 2/2" in log
    assert set(manifest["text_held_out_accuracy"]) == {"t5", "clip"}
    components = mini_flux.build_mini_flux(config, weights_dir=tmp_path)
    assert components["vae"].config.scaling_factor == manifest["latent"]["scaling_factor"]


def test_only_trained_entries_can_be_trained(monkeypatch, capsys):
    code, _, err = invoke(monkeypatch, capsys, "zoo", "train", "tiny-flux")
    assert code == 2 and "Trainable: mini-flux" in err


@pytest.fixture(scope="module")
def pipe():
    import torch
    from diffusers import DiffusionPipeline

    torch.set_num_threads(1)
    pipeline = DiffusionPipeline.from_pretrained(str(zoo.build("mini-flux")))
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def _held_out_scores(pipe, **guidance):
    import torch

    from accel.measure.adherence import score, summarise

    scores = []
    for prompt in PROMPTS:
        generator = torch.Generator().manual_seed(0)
        image = pipe(prompt, height=64, width=64, max_sequence_length=32, generator=generator, **guidance).images[0]
        scores.append(score(world.parse_caption(prompt), image))
    return summarise(scores)


@pytest.fixture(scope="module")
def held_out(pipe):
    return _held_out_scores(pipe)


def test_plain_diffusers_call_gets_the_background_of_held_out_prompts(held_out):
    # Twelve held-out combinations, one seed, the pipeline's defaults (no guidance). Only the background is
    # claimed without guidance on shapes-v2 (README, "What it learned", on all 48 x 2 seeds: background 1.00,
    # colour 0.875, position 0.95; on these 12 when the weights were committed: colour 9 of 12, position 5 of
    # the 7 that name one, below the 11/12 and 6/7 registered before scoring). The guided test below holds
    # colour and position to the target; issue 12 keeps the unguided shortfall open.
    assert held_out["n"] == 12
    assert held_out["background"] >= 11 / 12, held_out


def test_the_recommended_guidance_follows_colour_position_and_background(pipe):
    # README: true CFG 2 with an empty negative prompt is the guidance that works best (on all 48: background
    # 1.00, colour 0.96, position 1.00, shape class 0.83). On these 12: at most one miss per kind (position on
    # the 7 prompts that name it), and the shape class, the weakest attribute at 64x64, right on at least 8.
    guided = _held_out_scores(pipe, true_cfg_scale=2.0, negative_prompt="")
    assert guided["shape"] >= 8 / 12, guided
    for kind in ("background", "colour"):
        assert guided[kind] >= 11 / 12, (kind, guided)
    assert guided["position"] >= 6 / 7, guided
