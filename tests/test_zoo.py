"""The offline zoo: determinism, bit-identical reload through from_pretrained, versioned rebuilds."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from accel import zoo
from accel.errors import ConfigError
from accel.profile import ModelSpec
from accel.targets.adapter import AdapterTarget, Request, resolution_factor

REQUEST = Request(prompt="a red fox", seed=0, steps=2, height=64, width=64, guidance_scale=3.5, num_frames=5)


def _generate(pipeline, name: str) -> np.ndarray:
    target = AdapterTarget(ModelSpec(name=name, source=name))
    target.pipeline = pipeline
    pipeline.set_progress_bar_config(disable=True)
    return target.generate(REQUEST)[0]


@pytest.mark.parametrize("name", zoo.CORE_ENTRIES)
def test_reload_is_bit_identical_to_the_in_memory_pipeline(name):
    in_memory = zoo.build_pipeline_in_memory(name)
    target = AdapterTarget(ModelSpec(name=name, source=name))
    reloaded = target.load()
    for component, module in in_memory.components.items():
        if isinstance(module, torch.nn.Module):
            loaded = reloaded.components[component].state_dict()
            for key, tensor in module.state_dict().items():
                assert torch.equal(tensor, loaded[key]), f"{name}.{component}.{key} differs after reload"
    first = target.generate(REQUEST)[0]
    assert np.array_equal(first, _generate(in_memory, name))
    assert np.array_equal(first, target.generate(REQUEST)[0]), "same seed must give a bit-identical output"


@pytest.mark.parametrize("name", zoo.CORE_ENTRIES)
def test_outputs_are_float_rgb_frames_in_unit_range(name):
    target = AdapterTarget(ModelSpec(name=name, source=name))
    target.load()
    outputs = target.generate(dataclasses.replace(REQUEST, num_images_per_prompt=2))
    frames = 5 if zoo.ZOO[name].modality == "video" else 1
    assert len(outputs) == 2
    for output in outputs:
        assert output.dtype == np.float32 and output.shape == (frames, 64, 64, 3)
        assert output.min() >= 0.0 and output.max() <= 1.0


def test_rebuild_gives_the_same_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    first = zoo.build("tiny-flux")
    before = (first / "transformer" / "diffusion_pytorch_model.safetensors").read_bytes()
    again = zoo.build("tiny-flux", force=True)
    assert again == first
    assert (again / "transformer" / "diffusion_pytorch_model.safetensors").read_bytes() == before


def test_build_is_idempotent_and_versioned_by_config(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    path = zoo.build("tiny-flux")
    stamp = (path / zoo.MARKER_FILE).stat().st_mtime_ns
    assert zoo.build("tiny-flux") == path and (path / zoo.MARKER_FILE).stat().st_mtime_ns == stamp
    entry = zoo.ZOO["tiny-flux"]
    changed = dataclasses.replace(entry, config={**entry.config, "scheduler": {"shift": 2.0}})
    monkeypatch.setitem(zoo.ZOO, "tiny-flux", changed)
    assert zoo.entry_path("tiny-flux") != path
    assert not zoo.is_built("tiny-flux")


@pytest.mark.parametrize("change", ["modified", "missing", "added"])
def test_a_checkpoint_changed_after_building_is_refused(tmp_path, monkeypatch, change):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    path = zoo.build("tiny-flux")
    weights = path / "transformer" / "diffusion_pytorch_model.safetensors"
    if change == "modified":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif change == "missing":
        weights.unlink()
    else:
        (path / "transformer" / "extra.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigError, match=rf"{change} since zoo entry 'tiny-flux' was built; .*--force"):
        zoo.build("tiny-flux")
    assert zoo.build("tiny-flux", force=True) == path
    assert zoo.build("tiny-flux") == path  # the rebuilt checkpoint verifies


def test_a_checkpoint_whose_marker_names_another_fingerprint_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    entry = zoo.ZOO["tiny-flux"]
    monkeypatch.setitem(zoo.ZOO, "tiny-flux", dataclasses.replace(entry, config={**entry.config, "scheduler": {}}))
    other = zoo.build("tiny-flux")  # built for another config: its files match its marker
    monkeypatch.setitem(zoo.ZOO, "tiny-flux", entry)
    path = zoo.entry_path("tiny-flux")
    assert other != path
    other.rename(path)  # e.g. copied in under the current fingerprint's name
    recorded = other.name.removeprefix("tiny-flux-")
    with pytest.raises(ConfigError, match=rf"omni_accel_zoo\.json: records .* fingerprint {recorded}, not .*--force"):
        zoo.build("tiny-flux")
    assert zoo.build("tiny-flux", force=True) == path
    assert zoo.build("tiny-flux") == path  # the rebuilt checkpoint's marker names it


def test_vaes_keep_the_real_8x_downsampling():
    for name in zoo.CORE_ENTRIES:
        assert resolution_factor(str(zoo.build(name))) == 16, name


def test_building_an_entry_leaves_its_fingerprint_and_marker_naming_its_directory(tmp_path, monkeypatch):
    # A builder that fills the config it is given in place (transformers' Qwen config adds rope_theta) used to
    # change the entry's fingerprint once built: the marker then named another directory than its own.
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    entry = zoo.ZOO["tiny-flux"]

    def filling_builder(config):
        config["filled_in_by_the_builder"] = True  # as a library constructor may do to what it is given
        return entry.builder(config)

    monkeypatch.setitem(zoo.ZOO, "tiny-flux", dataclasses.replace(entry, builder=filling_builder))
    for name in ("tiny-qwen-image", "tiny-flux"):
        before = zoo.entry_path(name)
        built = zoo.build(name)
        assert built == before == zoo.entry_path(name), name
        marker = json.loads((built / zoo.MARKER_FILE).read_text())
        assert marker["fingerprint"] == built.name.removeprefix(f"{name}-"), name
    assert "filled_in_by_the_builder" not in zoo.ZOO["tiny-flux"].config


def test_unknown_zoo_name_lists_the_entries():
    with pytest.raises(ConfigError, match=r"unknown zoo model 'tiny-flx'\. Did you mean 'tiny-flux'"):
        zoo.get_entry("tiny-flx")


def test_parallel_builds_of_one_entry_build_once_and_never_remove_a_folder_in_use(tmp_path, monkeypatch):
    """Cells starting together on a fresh node each asked for the same zoo model: each built it, and one
    build's ``rmtree`` of the target deleted the folder another cell was loading from."""
    import threading
    import time

    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    builds = []

    class SlowPipeline:
        def save_pretrained(self, path):
            builds.append(path)
            time.sleep(0.3)  # both builders are past the "already built?" check before either finishes
            (path / "model_index.json").write_text("{}")

    monkeypatch.setattr(zoo, "build_pipeline_in_memory", lambda name: SlowPipeline())
    results = []
    threads = [threading.Thread(target=lambda: results.append(zoo.build("tiny-flux"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(set(results)) == 1 and len(results) == 3
    target = results[0]
    held = (target / "model_index.json").open()  # a cell loading from the checkpoint
    zoo.build("tiny-flux", force=True)
    assert held.read() == "{}" and (target / "model_index.json").is_file()
    held.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [target.name]  # no staging left behind
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o777 & ~umask  # as mkdir makes it, not mkdtemp's 0700


def test_a_pipeline_that_ignores_num_images_per_prompt_is_refused_with_that_reason():
    """CogVideoXPipeline sets num_videos_per_prompt = 1 inside its call: asked for two videos it gives one.
    The cell is unsupported on the model with the reason, not a crash in the harness's bookkeeping."""
    from accel.errors import ModelUnavailable

    target = AdapterTarget(ModelSpec(name="cogvideox", source="tiny-cogvideox"))
    target.load()
    with pytest.raises(ModelUnavailable, match=r"CogVideoXPipeline gave 1 output\(s\) for 2 asked"):
        target.generate(dataclasses.replace(REQUEST, steps=2, num_images_per_prompt=2, num_frames=5))
