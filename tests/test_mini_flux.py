"""mini-flux: the committed weights (hash, size, config), a few steps of the training code, and the
trained baseline's adherence on held-out prompts through plain diffusers. No training in CI."""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from conftest import invoke

from accel import zoo
from accel.errors import ConfigError
from accel.zoo import mini_flux, mini_flux_train, world

# Every fourth held-out prompt (combinations never seen in training), chosen before the shapes-v2 weights were
# scored: 12 prompts, every template, 5 of them leaving the position open (an open caption names a background,
# colour and shape that training saw at the other positions: it tests choosing a place, not generalisation).
PROMPTS = list(world.HELD_OUT_PROMPTS[::4])


def test_prompts_are_held_out():
    assert set(PROMPTS) <= set(world.HELD_OUT_PROMPTS)
    assert len(PROMPTS) == 12 and sum(world.parse_caption(p).position is None for p in PROMPTS) == 5


def test_committed_weights_match_their_hash_config_and_budget():
    manifest = mini_flux.verify_weights()
    # Pinned on the combined hash recomputed from the weight files (verify_weights holds the manifest's to it):
    # weights swapped together with a manifest rewritten to match them must still fail here (a retrain updates
    # this line, README and CHANGELOG in the same commit).
    recomputed = mini_flux.weights_hash()
    assert recomputed is not None and recomputed.startswith("4853816101d2e9a2"), recomputed
    assert manifest["sha256"] == recomputed
    # The manifest's settings the build reads besides the weights (the VAE's latent scaling), pinned beside the
    # hash: the committed run's values, which a retrain updates together with the hash above.
    assert mini_flux.BUILD_SETTINGS == ("latent",)
    assert manifest["latent"] == {"shift_factor": -0.002831, "scaling_factor": 0.805627}, manifest["latent"]
    assert manifest["config"] == mini_flux.MINI_FLUX_CONFIG, "config changed since training: retrain"
    assert manifest["world_version"] == world.WORLD_VERSION
    assert manifest["max_sequence_length"] == mini_flux.MAX_SEQUENCE_LENGTH == 32
    total = sum((mini_flux.WEIGHTS_DIR / f).stat().st_size for f in mini_flux.COMPONENT_FILES.values())
    assert total <= 25 * 2**20
    assert manifest["seconds"]["total"] <= 45 * 60, "the committed run took longer than the 45-minute budget"
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


def _zero_a_transformer_tensor(weights_dir: Path, *, rewrite_combined: bool) -> str:
    """Zero ``proj_out.weight`` in a weights directory and rewrite that file's manifest entry (and, if asked,
    the combined hash as training computes it); returns the new combined hash of the files."""
    from safetensors.torch import load_file, save_file

    path = weights_dir / mini_flux.COMPONENT_FILES["transformer"]
    tensors = load_file(str(path))
    tensors["proj_out.weight"].zero_()
    save_file(tensors, str(path))
    manifest = json.loads((weights_dir / mini_flux.MANIFEST_FILE).read_text())
    manifest["files"][path.name] = mini_flux.file_sha256(path)
    combined = mini_flux.combined_sha256(manifest["files"])
    if rewrite_combined:
        manifest["sha256"] = combined
    (weights_dir / mini_flux.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return combined


def test_a_manifest_whose_combined_hash_is_stale_is_refused(tmp_path):
    copy_dir = tmp_path / "weights"
    shutil.copytree(mini_flux.WEIGHTS_DIR, copy_dir)
    combined = _zero_a_transformer_tensor(copy_dir, rewrite_combined=False)
    # Every file matches its (rewritten) entry; only the combined hash still names the committed weights.
    with pytest.raises(ConfigError, match=r"manifest\.json: combined SHA-256 4853816101d2 is not .*retrain.*restore"):
        mini_flux.verify_weights(copy_dir)
    assert mini_flux.weights_hash(copy_dir) == combined != mini_flux.weights_hash()


@pytest.fixture
def copied_weights(tmp_path, monkeypatch):
    """The committed weights copied to a scratch directory that mini_flux reads instead, and an empty zoo."""
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path / "zoo"))
    weights = tmp_path / "weights"
    shutil.copytree(mini_flux.WEIGHTS_DIR, weights)
    monkeypatch.setattr(mini_flux, "WEIGHTS_DIR", weights)
    return weights


def test_changed_weights_are_never_served_from_a_zoo_directory_built_before(copied_weights):
    weights = copied_weights
    from safetensors.torch import load_file

    built = zoo.build("mini-flux")
    # A weight file changed with only its own manifest entry: refused, not the directory built before.
    _zero_a_transformer_tensor(weights, rewrite_combined=False)
    with pytest.raises(ConfigError, match=r"manifest\.json: combined SHA-256"):
        zoo.build("mini-flux")
    # A consistent manifest (as a retrain writes): a new directory, holding the new weights.
    _zero_a_transformer_tensor(weights, rewrite_combined=True)
    rebuilt = zoo.build("mini-flux")
    assert rebuilt != built and zoo.build("mini-flux") == rebuilt
    saved = load_file(str(rebuilt / "transformer" / "diffusion_pytorch_model.safetensors"))
    assert not saved["proj_out.weight"].any()
    assert load_file(str(built / "transformer" / "diffusion_pytorch_model.safetensors"))["proj_out.weight"].any()


def _rewrite_manifest(weights_dir: Path, change) -> None:
    """Apply ``change`` to a weights directory's manifest (a dict, changed in place) and write it back."""
    path = weights_dir / mini_flux.MANIFEST_FILE
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def test_a_changed_latent_setting_builds_a_new_zoo_directory_with_it(copied_weights):
    weights = copied_weights
    built = zoo.build("mini-flux")
    committed = mini_flux.read_manifest()["latent"]["scaling_factor"]
    # The weight files and their hashes unchanged; only the latent scaling the VAE is configured with doubles.
    _rewrite_manifest(weights, lambda m: m["latent"].update(scaling_factor=2 * m["latent"]["scaling_factor"]))
    assert mini_flux.weights_fingerprint()["latent"]["scaling_factor"] == 2 * committed
    rebuilt = zoo.build("mini-flux")
    assert rebuilt != built and zoo.build("mini-flux") == rebuilt
    for directory, scaling in ((rebuilt, 2 * committed), (built, committed)):
        assert json.loads((directory / "vae" / "config.json").read_text())["scaling_factor"] == scaling, directory


def _config_of(module) -> dict:
    """A diffusers (FrozenDict) or transformers (PretrainedConfig) module's config as a plain dict."""
    config = module.config
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def test_the_build_reads_nothing_from_the_manifest_but_the_fingerprinted_settings(monkeypatch):
    import torch

    # Given a manifest holding only BUILD_SETTINGS (what the zoo fingerprints besides the files' hash), the
    # build must give the same pipeline: anything else it read would be served unfingerprinted.
    full = mini_flux.build_mini_flux(mini_flux.MINI_FLUX_CONFIG)
    settings = mini_flux.build_settings(mini_flux.verify_weights())
    monkeypatch.setattr(mini_flux, "verify_weights", lambda weights_dir=None: copy.deepcopy(settings))
    only_settings = mini_flux.build_mini_flux(mini_flux.MINI_FLUX_CONFIG)
    for name, module in full.items():
        if isinstance(module, torch.nn.Module):
            assert _config_of(module) == _config_of(only_settings[name]), name
            loaded = only_settings[name].state_dict()
            assert all(torch.equal(value, loaded[key]) for key, value in module.state_dict().items()), name


def test_a_built_trained_entry_is_refused_once_its_manifest_goes_stale(copied_weights, monkeypatch, capsys):
    weights = copied_weights
    built = zoo.build("mini-flux")
    # The files (so their recomputed hash, and the zoo directory's name) unchanged; the manifest's stored
    # combined hash no longer theirs, as a manifest put back from another training leaves it.
    _rewrite_manifest(weights, lambda m: m.update(sha256="0" * 64))
    assert zoo.entry_path("mini-flux") == built and zoo.is_built("mini-flux")
    with pytest.raises(ConfigError, match=r"manifest\.json: combined SHA-256 000000000000 is not .*retrain"):
        zoo.build("mini-flux")
    code, out, err = invoke(monkeypatch, capsys, "zoo", "build", "mini-flux")
    assert code != 0 and str(built) not in out and "combined SHA-256 000000000000" in err, (code, out, err)
    # Restored: served from the directory built before.
    _rewrite_manifest(weights, lambda m: m.update(sha256=mini_flux.weights_hash(weights)))
    assert zoo.build("mini-flux") == built


def _small_config(text=None, vae=None, transformer=None) -> dict:
    """mini-flux's training config on 16 images, each stage a few steps unless given (merged into its own)."""
    config = copy.deepcopy(mini_flux.MINI_FLUX_CONFIG)
    config["train"]["images"] = 16
    config["train"]["text"] |= text or {"steps": 2, "batch": 4, "warmup": 1}
    config["train"]["vae"] |= vae or {"steps": 2, "batch": 4}
    config["train"]["transformer"] |= transformer or {"steps": 2, "batch": 4, "warmup": 1}
    return config


def test_a_few_training_steps_write_a_loadable_checkpoint(tmp_path):
    # Model guidance from the second step, so its extra uncaptioned pass runs too.
    config = _small_config(
        transformer={"steps": 3, "batch": 4, "warmup": 1, "model_guidance": {"weight": 0.5, "from_step": 1}}
    )
    manifest = mini_flux.train(tmp_path, config, threads=1, progress=False)
    assert all(math.isfinite(v) for v in manifest["final_losses"].values())
    log = (tmp_path / mini_flux.LOG_FILE).read_text()
    assert "vae step 2/2" in log and "transformer step 3/3" in log and "text step 2/2" in log
    assert set(manifest["text_held_out_accuracy"]) == {"t5", "clip"}
    components = mini_flux.build_mini_flux(config, weights_dir=tmp_path)
    assert components["vae"].config.scaling_factor == manifest["latent"]["scaling_factor"]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A 100-step transformer run (batch 8, model guidance from step 50) on tiny text and VAE stages.

    Each EMA update is watched: the raw weights after the step, and the EMA this test computes from them with
    its own formula (decay ``min(0.998, (1 + step) / (10 + step))``), independently of the training code. The
    calls to the noising and target functions that the scheduler test checks are counted.
    """
    import torch

    config = _small_config(
        transformer={"steps": 100, "batch": 8, "warmup": 10, "model_guidance": {"weight": 0.5, "from_step": 50}}
    )
    watched: dict = {"steps": 0}
    update = mini_flux.ema_update

    def watching(ema, state, decay):
        raw = {key: value.detach().clone() for key, value in state.items()}
        if "expected" not in watched:
            watched["expected"] = {key: value.clone() for key, value in ema.items()}
        step = watched["steps"]
        own_decay = min(0.998, (1 + step) / (10 + step))
        for key, value in raw.items():
            previous = watched["expected"][key]
            watched["expected"][key] = (
                own_decay * previous + (1 - own_decay) * value if value.is_floating_point() else value
            )
        watched["raw"] = raw
        watched["steps"] += 1
        update(ema, state, decay)

    def counted(name):
        function = getattr(mini_flux, name)

        def call(*args):
            watched[name] = watched.get(name, 0) + 1
            return function(*args)

        return call

    out = tmp_path_factory.mktemp("short-run")
    with pytest.MonkeyPatch.context() as patch:
        # Where train() looks them up (accel.zoo.mini_flux re-exports them).
        patch.setattr(mini_flux_train, "ema_update", watching)
        for name in ("noised_sample", "velocity_target"):
            patch.setattr(mini_flux_train, name, counted(name))
        torch_threads = torch.get_num_threads()
        try:
            mini_flux.train(out, config, threads=1, progress=False)
        finally:
            torch.set_num_threads(torch_threads)
    return config, out, watched


def _saved_transformer(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / mini_flux.COMPONENT_FILES["transformer"]))


def _largest_difference(a: dict, b: dict) -> float:
    return max(float((a[key].float() - b[key].float()).abs().max()) for key in a)


def test_a_short_transformer_run_lowers_its_loss_and_moves_the_weights(short_run):
    config, out, watched = short_run
    # The log's loss is the mean of the last 50 steps: steps 1-50, then 51-100 (no overlap).
    losses = [
        float(v)
        for v in re.findall(r"transformer step (?:50|100)/100 loss ([0-9.]+)", (out / "train_log.txt").read_text())
    ]
    assert len(losses) == 2 and losses[1] < 0.9 * losses[0], losses
    initial = mini_flux.build_components(config)["transformer"].state_dict()
    saved = _saved_transformer(out)
    assert set(saved) == set(initial)
    assert _largest_difference(watched["raw"], initial) > 1e-3
    assert _largest_difference(saved, initial) > 1e-3


def test_the_checkpoint_holds_the_ema_weights_not_the_last_step_s(short_run):
    import torch

    _, out, watched = short_run
    saved = _saved_transformer(out)
    assert watched["steps"] == 100 and set(saved) == set(watched["expected"])
    for key, value in saved.items():
        assert torch.allclose(value, watched["expected"][key], rtol=1e-5, atol=1e-6), key
    # The EMA (decay 100/109 after the last step) is not the last step's raw weights: they differ by ~1.7e-3,
    # thousands of times the EMA match's rounding (~4e-7).
    assert _largest_difference(saved, watched["raw"]) > 1e-4


def test_each_transformer_step_noises_and_targets_through_the_checked_functions(short_run):
    # The scheduler test below checks mini_flux.noised_sample and velocity_target: training must use them.
    _, _, watched = short_run
    assert watched.get("noised_sample") == watched.get("velocity_target") == 100


# What the wrapped noising and target functions add to their real value in ``stage_run``: a loss computed
# against anything but exactly what they returned (the target negated, or recomputed inline) misses it.
OFFSETS = {"noised_sample": 3.0, "velocity_target": 10.0}
# Added to the transformer stage's packed latents in ``stage_run``, so the data (mean ~50) cannot pass for
# the noise (mean ~0).
LATENT_OFFSET = 50.0


@pytest.fixture(scope="module")
def stage_run(tmp_path_factory):
    """100 text-encoder steps (batch 16) and 100 VAE steps (batch 4), then one transformer step.

    At that step ``noised_sample`` and ``velocity_target`` return their real value plus ``OFFSETS``; what they
    returned, and the transformer's input and output (a forward hook: no change to arithmetic or RNG), are
    recorded. Returns the config, the output directory, the manifest and the records.
    """
    import torch

    config = _small_config(
        text={"steps": 100, "batch": 16, "warmup": 10},
        vae={"steps": 100, "batch": 4, "warmup": 10},
        transformer={"steps": 1, "batch": 4, "warmup": 1},
    )
    recorded: dict = {}
    build_components = mini_flux.build_components

    def record(module, args, kwargs, output):
        recorded.setdefault("hidden_states", kwargs["hidden_states"].detach().clone())
        recorded.setdefault("timestep", kwargs["timestep"].detach().clone())
        recorded.setdefault("prediction", output[0].detach().clone())

    def building(model_config):
        components = build_components(model_config)
        components["transformer"].register_forward_hook(record, with_kwargs=True)
        return components

    def offset(name):
        function = getattr(mini_flux, name)

        def call(*args):
            recorded.setdefault(f"{name}_args", tuple(arg.detach().clone() for arg in args))
            value = function(*args) + OFFSETS[name]
            recorded.setdefault(name, value.detach().clone())
            return value

        return call

    out = tmp_path_factory.mktemp("stage-run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mini_flux_train, "build_components", building)  # where train() looks it up
        from diffusers import FluxPipeline

        pack = FluxPipeline._pack_latents  # the transformer stage's (normalised) latents, packed into tokens
        patch.setattr(FluxPipeline, "_pack_latents", staticmethod(lambda *args: pack(*args) + LATENT_OFFSET))
        for name in OFFSETS:
            patch.setattr(mini_flux_train, name, offset(name))
        torch_threads = torch.get_num_threads()
        try:
            manifest = mini_flux.train(out, config, threads=1, progress=False)
        finally:
            torch.set_num_threads(torch_threads)
    return config, out, manifest, recorded


def test_the_transformer_learns_against_exactly_what_the_checked_functions_return(stage_run):
    import torch

    # Calling the functions is not enough (test above): the transformer must be given the noised sample they
    # returned and its loss taken against the target they returned, offsets and all.
    _, _, manifest, recorded = stage_run
    assert {*OFFSETS, "hidden_states", "prediction"} <= set(recorded)
    assert torch.equal(recorded["hidden_states"], recorded["noised_sample"])
    expected = float(torch.nn.functional.mse_loss(recorded["prediction"], recorded["velocity_target"]))
    loss = manifest["final_losses"]["transformer"]  # the only step's
    assert loss == pytest.approx(expected, rel=1e-6) and loss > OFFSETS["velocity_target"] ** 2 / 2, (loss, expected)


def test_the_training_gives_the_checked_functions_the_data_the_noise_and_the_time_in_their_places(stage_run):
    import torch

    # The functions are right (the scheduler test) and their results are used (above); they must also be
    # called right: velocity_target(noise, x0) or noised_sample(noise, x0, t) or (x0, noise, 1 - t) would
    # reverse the flow while every other test passes.
    _, _, _, recorded = stage_run
    x0, noise, t = recorded["noised_sample_args"]
    assert float(x0.mean()) > LATENT_OFFSET / 2 and abs(float(noise.mean())) < 0.5, (x0.mean(), noise.mean())
    target_x0, target_noise = recorded["velocity_target_args"]
    assert torch.equal(target_x0, x0) and torch.equal(target_noise, noise)
    assert torch.equal(recorded["timestep"], t)  # the time the sample was noised at is the one the model is told


@pytest.mark.parametrize(("stage", "components"), [("text", ["text_encoder", "text_encoder_2"]), ("vae", ["vae"])])
def test_short_text_encoder_and_vae_runs_lower_their_loss_and_move_the_weights(stage_run, stage, components):
    from safetensors.torch import load_file

    config, out, _, _ = stage_run
    # The log's loss is the mean of the last 50 steps: steps 1-50, then 51-100 (no overlap).
    pattern = rf"{stage} step (?:50|100)/100 loss ([0-9.]+)"
    losses = [float(v) for v in re.findall(pattern, (out / mini_flux.LOG_FILE).read_text())]
    assert len(losses) == 2 and losses[1] < 0.9 * losses[0], losses
    initial = mini_flux.build_components(config)
    for component in components:
        saved = load_file(str(out / mini_flux.COMPONENT_FILES[component]))
        assert _largest_difference(saved, initial[component].state_dict()) > 1e-3, component


def test_training_noises_and_targets_as_the_pipeline_s_scheduler_denoises():
    """FluxPipeline starts from noise at sigma 1 and takes Euler steps of the transformer's velocity, which
    it is given at ``timestep / 1000``: training must noise at that sigma and target that velocity."""
    import numpy as np
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    settings = mini_flux.MINI_FLUX_CONFIG["scheduler"]
    scheduler = FlowMatchEulerDiscreteScheduler(**settings)
    steps, tokens = 8, 16  # a 64x64 image: 8x8 latents, 2x2-packed into 16 tokens
    mu = calculate_shift(
        tokens,
        settings["base_image_seq_len"],
        settings["max_image_seq_len"],
        settings["base_shift"],
        settings["max_shift"],
    )
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    # Training gives the transformer its t as the timestep; the pipeline gives the scheduler's sigma.
    assert torch.allclose(scheduler.timesteps / 1000, scheduler.sigmas[:-1])
    generator = torch.Generator().manual_seed(0)
    x0, noise = (torch.randn(2, tokens, 64, generator=generator) for _ in range(2))
    # Training's own velocity for this (x0, noise), as an oracle transformer: Euler steps from the pipeline's
    # start follow training's noised samples at every sigma the pipeline visits, and land on x0.
    velocity = mini_flux.velocity_target(x0, noise)
    sample = noise
    for i, timestep in enumerate(scheduler.timesteps):
        at_sigma = mini_flux.noised_sample(x0, noise, scheduler.sigmas[i].repeat(2))
        assert torch.allclose(sample, at_sigma, atol=1e-5), i
        sample = scheduler.step(velocity, timestep, sample, return_dict=False)[0]
    assert torch.allclose(sample, x0, atol=1e-5)


def test_model_guidance_targets_true_cfg_at_one_over_one_minus_the_weight():
    import torch

    generator = torch.Generator().manual_seed(0)
    velocity, uncaptioned = (torch.randn(4, 16, 64, generator=generator) for _ in range(2))
    dropped = torch.tensor([False, False, True, False])
    weight = 0.5
    # A model that already draws true CFG at scale 1 / (1 - w) = 2 from the data's velocity is the fixed point:
    # the guided target is its own prediction, for every captioned sample.
    cfg = uncaptioned + (velocity - uncaptioned) / (1 - weight)
    target = mini_flux.model_guidance_target(velocity, cfg, uncaptioned, dropped, weight)
    assert torch.allclose(target[~dropped], cfg[~dropped], atol=1e-5)
    # A sample whose caption was dropped keeps the plain target (the uncaptioned velocity stays the data's).
    assert torch.equal(target[dropped], velocity[dropped])
    # An unguided model (prediction = data velocity) is pushed further from the uncaptioned velocity, never back.
    pushed = mini_flux.model_guidance_target(velocity, velocity, uncaptioned, dropped, weight)
    assert torch.allclose(pushed[~dropped] - velocity[~dropped], weight * (velocity - uncaptioned)[~dropped], atol=1e-5)


@pytest.mark.parametrize(("others_cores", "threads"), [(0.0, 2), (0.2, 2), (1.0, 1)])
def test_the_thread_picker_counts_other_processes_not_its_own_threads(monkeypatch, others_cores, threads):
    # Each check: 10 s of wall time in which this process kept two cores busy (20 CPU seconds, a load average
    # near 2 on its own) and other processes ``others_cores``. Probe steps: two threads twice as fast.
    clock = iter(range(100))

    def snapshot():
        t = next(clock) * 10.0
        return t, t * (2.0 + others_cores), t * 2.0

    monkeypatch.setattr(mini_flux.ThreadPicker, "_cpu_snapshot", staticmethod(snapshot))
    picker = mini_flux.ThreadPicker([1, 2], every=10, probe=2)
    for step in range(10):
        picker.before_step(step)
        picker.after_step(step, 1.0 / picker.current)
    assert picker.current == threads


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


def _held_out_scores(pipe):
    import torch

    from accel.measure.adherence import score, summarise

    scores = []
    for prompt in PROMPTS:
        generator = torch.Generator().manual_seed(0)
        image = pipe(prompt, height=64, width=64, max_sequence_length=32, generator=generator).images[0]
        scores.append(score(world.parse_caption(prompt), image))
    return summarise(scores)


@pytest.fixture(scope="module")
def held_out(pipe):
    return _held_out_scores(pipe)


def test_plain_diffusers_call_follows_held_out_prompts(held_out):
    # Twelve held-out combinations, one seed, the pipeline's defaults (28 steps, no true CFG: the model was
    # trained with model guidance, so one pass is guided). The thresholds registered for shapes-v2 before its
    # first weights were scored (then held by a true-CFG-2 test), set here before the committed weights were
    # scored: at most one miss per kind (position on the 7 prompts that name it), and the shape class, the
    # weakest attribute at 64x64, right on at least 8.
    assert held_out["n"] == 12
    for kind in ("background", "colour"):
        assert held_out[kind] >= 11 / 12, (kind, held_out)
    assert held_out["position"] >= 6 / 7, held_out
    assert held_out["shape"] >= 8 / 12, held_out


@pytest.mark.parametrize("latent", [{"scaling_factor": "abc", "shift_factor": 0.0}, {"scaling_factor": 1.0}, [1, 2],
                                    {"scaling_factor": float("nan"), "shift_factor": 0.0},
                                    {"scaling_factor": 1.0, "shift_factor": 0.0, "bogus": 1}])  # fmt: skip
def test_a_manifest_with_bad_latent_settings_is_refused_in_one_line(copied_weights, latent):
    _rewrite_manifest(copied_weights, lambda m: m.update(latent=latent))
    with pytest.raises(ConfigError, match=r"manifest\.json: latent: expected finite numbers scaling_factor and"):
        mini_flux.weights_fingerprint(copied_weights)
