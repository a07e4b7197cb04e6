"""The command line as a user calls it: zoo, features, and the embedded default profile."""

from __future__ import annotations

from pathlib import Path

from conftest import invoke

from accel import zoo
from accel.profile import default_profile_path, load_profile


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    return invoke(monkeypatch, capsys, *args)


def test_zoo_path_build_and_list(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(tmp_path))
    # Not built: no path to hand to from_pretrained, exit 2 with the command that builds it.
    code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err == (
        f"error: zoo path: 'tiny-wan' is not built yet (it would be {zoo.entry_path('tiny-wan')}): run "
        "`omni-accel zoo build tiny-wan` first, or pass --allow-unbuilt to print where it would be built\n"
    )
    code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan", "--allow-unbuilt")
    assert code == 0 and out.strip() == str(zoo.entry_path("tiny-wan"))
    assert "is not built yet: run `omni-accel zoo build tiny-wan` to build it" in err
    assert not zoo.entry_path("tiny-wan").exists()
    code, out, _ = cli(monkeypatch, capsys, "zoo", "build", "tiny-wan")
    assert code == 0 and out.strip() == f"tiny-wan: {zoo.entry_path('tiny-wan')}"
    assert (zoo.entry_path("tiny-wan") / "model_index.json").is_file()
    for flags in ((), ("--allow-unbuilt",)):
        code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan", *flags)
        assert code == 0 and out.strip() == str(zoo.entry_path("tiny-wan")) and err == ""
    code, out, _ = cli(monkeypatch, capsys, "zoo", "list")
    assert code == 0 and "tiny-qwen-image" in out and "WanPipeline" in out
    # A built directory whose files changed since: zoo path refuses it as loading would, never prints it.
    (zoo.entry_path("tiny-wan") / "model_index.json").write_text("{}")
    code, out, err = cli(monkeypatch, capsys, "zoo", "path", "tiny-wan")
    assert code == 2 and out == "" and "model_index.json: modified since zoo entry 'tiny-wan' was built" in err


def test_zoo_unknown_name_exits_2(monkeypatch, capsys):
    for command in (("build",), ("path",), ("path", "--allow-unbuilt")):
        code, _, err = cli(monkeypatch, capsys, "zoo", *command, "tiny-sd9")
        assert code == 2 and err.startswith("error: unknown zoo model 'tiny-sd9'")


def test_features_lists_support_on_this_machine(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "features")
    assert code == 0
    assert "vae_use_tiling" in out and "vae_use_slicing" in out
    assert "backend=_native_math" in out and "needs a CUDA GPU" in out


def test_unknown_command_is_a_usage_error(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "swep")
    assert code == 2 and "No such command 'swep'" in err


def test_embedded_default_profile_is_mini_flux_and_the_coverage_profile_has_every_core_family():
    profile = load_profile(default_profile_path())
    # The quickstart is mini-flux alone (a first run in under two minutes); the random tiny models of the
    # other families, VAE tiling and slicing (on a batch) among their variants, are the coverage profile's.
    assert [m.source for m in profile.models] == ["mini-flux"]
    features = {name for v in profile.variants for name in v.features}
    assert {"attention_backend", "cache_dit", "tea_cache"} <= features
    assert profile.measure.threads == 1  # dispatch-bound: as fast, half the spread (benchmarks/cpu_threads.py)
    assert profile.workload.num_images_per_prompt >= 2  # eight images for the adherence score
    coverage = load_profile(Path(__file__).resolve().parent.parent / "profiles" / "coverage.yaml")
    core = {zoo.ZOO[name].pipeline_class for name in zoo.CORE_ENTRIES}
    assert core <= {zoo.ZOO[m.source].pipeline_class for m in coverage.models}
    assert {"vae_use_slicing", "vae_use_tiling"} <= {name for v in coverage.variants for name in v.features}
    assert coverage.workload.num_images_per_prompt >= 2  # so that slicing has a batch to slice
