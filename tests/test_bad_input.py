"""Every bad input exits 2 with one line naming the location, and no traceback."""

from __future__ import annotations

import pytest
from conftest import invoke, run_cli, small_profile


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    code, _, err = invoke(monkeypatch, capsys, *args)
    return code, err


def _with(**changes):
    profile = small_profile()
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            profile[section][key] = value
        else:
            profile[section] = value
    return profile


CASES = {
    "malformed-yaml": ("models: [\n  - {name: x", r"malformed YAML at line \d+, column \d+"),
    "not-a-mapping": ("- just\n- a list\n", "expected a mapping with keys models, workload"),
    "unknown-top-key": ({**small_profile(), "variantz": []}, "unknown key 'variantz'. Did you mean 'variants'?"),
    "unknown-workload-key": (
        _with(workload={"prompts": ["x"], "step": 2}),
        r"workload: unknown key 'step'. Did you mean 'steps'\? Allowed keys: .*guidance_scale",
    ),
    "wrong-type": (_with(workload__steps="four"), "workload.steps: Input should be a valid integer"),
    "zero-steps": (_with(workload__steps=0), "workload.steps: Input should be greater than 0"),
    "negative-height": (_with(workload__height=-64), "workload.height: Input should be greater than 0"),
    "no-prompts": (_with(workload__prompts=[]), "workload.prompts: List should have at least 1 item"),
    "empty-prompt": (_with(workload__prompts=["  "]), "workload.prompts: prompts must not be empty strings"),
    "unknown-feature": (
        _with(variants=[{"name": "v", "features": {"vae_tilling": True}}]),
        r"variants\[0\].features: unknown feature 'vae_tilling'. Did you mean 'vae_use_tiling'\?",
    ),
    "unknown-option": (
        _with(variants=[{"name": "v", "features": {"vae_use_tiling": {"tile_sise": 32}}}]),
        r"variants\[0\].features.vae_use_tiling.tile_sise: unknown option Did you mean 'tile_size'\?",
    ),
    "unknown-backend": (
        _with(variants=[{"name": "v", "features": {"attention_backend": "flashy"}}]),
        r"variants\[0\].features.attention_backend.backend: .*unknown attention backend 'flashy'",
    ),
    "duplicate-variant": (
        _with(variants=[{"name": "v"}, {"name": "v"}]),
        "variants: duplicate name 'v'",
    ),
    "reserved-variant": (_with(variants=[{"name": "baseline"}]), r"variants\[0\].name: 'baseline' is reserved"),
    "unknown-model": (
        _with(models=[{"name": "m", "source": "tiny-flx"}]),
        r"models\[0\].source: model 'tiny-flx' is not a zoo name.* Did you mean 'tiny-flux'\?",
    ),
    "missing-path": (
        _with(models=[{"name": "m", "source": "/nonexistent/checkpoint"}]),
        r"models\[0\].source: path '/nonexistent/checkpoint' is not a zoo name, an existing checkpoint",
    ),
    "resolution-factor": (
        _with(workload__height=72),
        "workload.height: 72 is not a multiple of 16, the resolution factor of model 'tiny-flux'",
    ),
    "unknown-executor": (_with(measure={"executor": "threads"}), r"measure.executor: Input should be 'process'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_profile_exits_2_with_one_line(case, write_profile, tmp_path, monkeypatch, capsys):
    content, pattern = CASES[case]
    path = write_profile(content)
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {path}: ")
    import re

    assert re.search(pattern, lines[0]), lines[0]


def test_missing_profile_file(monkeypatch, capsys, tmp_path):
    code, err = cli(monkeypatch, capsys, "sweep", str(tmp_path / "nope.yaml"))
    assert code == 2 and err.strip() == f"error: {tmp_path / 'nope.yaml'}: profile file not found"


def test_unwritable_output_directory(write_profile, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = cli(monkeypatch, capsys, "sweep", str(write_profile(small_profile())), "--out", str(blocker / "run"))
    assert code == 2
    assert err.strip() == f"error: {blocker / 'run'}: output directory is not writable: Not a directory"


def test_unknown_executor_option(write_profile, monkeypatch, capsys):
    code, err = cli(monkeypatch, capsys, "sweep", str(write_profile(small_profile())), "--executor", "threads")
    assert code == 2 and "unknown executor 'threads'. Allowed: process, inline, ray" in err


def test_unreachable_hub_id_offline_names_the_id(write_profile, tmp_path, monkeypatch, capsys):
    profile = _with(models=[{"name": "m", "source": "black-forest-labs/FLUX.1-dev"}])
    path = write_profile(profile)
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "r"))
    assert code == 2
    assert err.startswith(f"error: {path}: models[0].source: hub id 'black-forest-labs/FLUX.1-dev' is not in")
    assert "use a local checkpoint directory or a zoo name" in err and err.count("\n") == 1


def test_real_entry_point_prints_no_traceback(write_profile):
    result = run_cli("sweep", str(write_profile(_with(workload__steps=-1))))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr and "workload.steps" in result.stderr
