"""The command line as a user calls it: zoo, features, and the embedded default profile."""

from __future__ import annotations

from conftest import invoke

from accel import zoo
from accel.profile import default_profile_path, load_profile


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    return invoke(monkeypatch, capsys, *args)


def test_zoo_path_build_and_list(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan")
    assert code == 0 and out.strip() == str(zoo.entry_path("tiny-wan"))
    assert "is not built yet: run `omni-accel zoo build tiny-wan` first" in err
    code, out, _ = cli(monkeypatch, capsys, "zoo", "build", "tiny-wan")
    assert code == 0 and out.strip() == f"tiny-wan: {zoo.entry_path('tiny-wan')}"
    assert (zoo.entry_path("tiny-wan") / "model_index.json").is_file()
    code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan")
    assert code == 0 and out.strip() == str(zoo.entry_path("tiny-wan")) and err == ""
    code, out, _ = cli(monkeypatch, capsys, "zoo", "list")
    assert code == 0 and "tiny-qwen-image" in out and "WanPipeline" in out


def test_zoo_unknown_name_exits_2(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "zoo", "build", "tiny-sd3")
    assert code == 2 and err.startswith("error: unknown zoo model 'tiny-sd3'")


def test_features_lists_support_on_this_machine(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "features")
    assert code == 0
    assert "vae_use_tiling" in out and "vae_use_slicing" in out
    assert "backend=_native_math" in out and "needs a CUDA GPU" in out


def test_unknown_command_is_a_usage_error(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "swep")
    assert code == 2 and "No such command 'swep'" in err


def test_embedded_default_profile_is_valid_and_covers_every_family():
    profile = load_profile(default_profile_path())
    # mini-flux first; random tiny models for the pipeline families it does not cover.
    assert profile.models[0].source == "mini-flux"
    assert {zoo.ZOO[m.source].pipeline_class for m in profile.models} == {e.pipeline_class for e in zoo.ZOO.values()}
    features = {name for v in profile.variants for name in v.features}
    assert {"vae_use_tiling", "vae_use_slicing", "attention_backend", "cache_dit", "tea_cache"} <= features
    assert profile.workload.num_images_per_prompt >= 2  # so that slicing has a batch to slice
