"""Every bad input exits 2 with one line naming the location, and no traceback."""

from __future__ import annotations

import itertools

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
    "wrong-type": (
        _with(workload__steps="four"),
        r"workload.steps: Input should be a valid integer, .*got 'four' \(allowed: a whole number > 0 and <= 10000\)",
    ),
    "zero-steps": (
        _with(workload__steps=0),
        r"workload.steps: Input should be greater than 0, got 0 \(allowed: a whole number > 0 and <= 10000\)",
    ),
    "negative-height": (_with(workload__height=-64), "workload.height: Input should be greater than 0, got -64"),
    "option-out-of-range": (
        _with(variants=[{"name": "v", "features": {"quantization": {"min_quantized_share": 2}}}]),
        r"variants\[0\].features.quantization.min_quantized_share: Input should be less than or equal to 1, "
        r"got 2 \(allowed: a number > 0 and <= 1\)",
    ),
    "union-field": (
        _with(measure__gpus_per_cell="x"),  # pydantic's union tag (gpus_per_cell.float) is not a key of the file
        r"measure.gpus_per_cell: Input should be a valid number, got 'x' \(allowed: a number >= 0 or one of auto\)",
    ),
    "list-element": (
        _with(variants=[{"name": "v", "features": {"tea_cache": {"rel_l1_thresh": 0.2, "coefficients": [1, "a"]}}}]),
        r"tea_cache.coefficients\[1\]: Input should be a valid number, got 'a' \(allowed: a number\)$",
    ),
    "yaml-exponent-as-text": (
        _with(variants=[{"name": "v", "features": {"cache_dit": {"residual_diff_threshold": "5e-2"}}}]),
        r"got '5e-2' \(allowed: a number > 0\); YAML reads 5e-2 as text: write it with a decimal point \(0.05\)",
    ),
    "cache-cap-below-minus-one": (
        _with(variants=[{"name": "v", "features": {"cache_dit": {"max_continuous_cached_steps": -5}}}]),
        r"max_continuous_cached_steps: Input should be greater than or equal to -1, got -5",
    ),
    "option-wrong-type": (
        _with(variants=[{"name": "v", "features": {"cache_dit": {"max_warmup_steps": 1.5}}}]),
        r"cache_dit.max_warmup_steps: Input should be a valid integer.*, got 1.5 \(allowed: a whole number >= 0\)",
    ),
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


# Issue 13 (hard edges): each case below passed validation on main and failed later, or not at all.
STRICT_CASES = {
    "string-for-bool": (
        {"cache_dit": {"taylorseer": "yes"}},
        r"variants\[0\].features.cache_dit.taylorseer: Input should be a valid boolean",
    ),
    "string-for-int": (
        {"cache_dit": {"max_warmup_steps": "3"}},
        r"variants\[0\].features.cache_dit.max_warmup_steps: Input should be a valid integer",
    ),
    "infinity": (
        {"tea_cache": {"rel_l1_thresh": float("inf")}},
        r"variants\[0\].features.tea_cache.rel_l1_thresh: Input should be a finite number",
    ),
}


@pytest.mark.parametrize("case", list(STRICT_CASES))
def test_feature_options_are_strict(case, write_profile, tmp_path, monkeypatch, capsys):
    features, pattern = STRICT_CASES[case]
    path = write_profile(_with(variants=[{"name": "v", "features": features}]))
    code, err = cli(monkeypatch, capsys, "plan", str(path))
    import re

    assert code == 2 and err.count("\n") == 1 and re.search(pattern, err), err


def test_num_frames_on_an_image_model_is_a_profile_error(write_profile, tmp_path, monkeypatch, capsys):
    path = write_profile(_with(workload__num_frames=9))
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: workload.num_frames: no model of this profile makes videos (tiny-flux: ")
    assert "num_frames applies to video models only" in err
    assert not (tmp_path / "run").exists()  # refused before any work: no empty --out directory is left behind


def test_num_frames_with_a_video_model_among_image_models_is_fine():
    """The workload is shared: with a video model in the profile, num_frames is for it (as in quickstart)."""
    from accel.profile import parse_profile
    from accel.sweep.runner import check_inputs

    check_inputs(parse_profile(small_profile(["tiny-flux", "tiny-wan"], num_frames=9)), "p.yaml")


def test_a_directory_given_as_the_profile(tmp_path, monkeypatch, capsys):
    code, err = cli(monkeypatch, capsys, "sweep", str(tmp_path))
    assert (
        code == 2
        and err.strip() == f"error: {tmp_path}: is a directory, not a profile file (give the YAML file itself)"
    )


def test_a_profile_that_is_not_utf8(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"name: test\nmodels:\n  - {name: m, source: tiny-flux}\nworkload: {prompts: [caf\xe9]}\n")
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.strip() == f"error: {path}:4: not UTF-8 text (byte 0xe9); save the profile as UTF-8"


def alias_bomb(where: str = "call_kwargs", levels: int = 9, fanout: int = 9) -> str:
    """A profile whose ``where`` (models[0].call_kwargs or a top-level key) expands to fanout**levels values."""
    indent = "      " if where == "call_kwargs" else "  "
    letters = "abcdefghijklmnopqrstuvwxyz"[:levels]
    bomb = [f"{indent}{letters[0]}: &{letters[0]} [" + ", ".join(["lol"] * fanout) + "]"]
    for previous, current in itertools.pairwise(letters):
        bomb.append(f"{indent}{current}: &{current} [" + ", ".join([f"*{previous}"] * fanout) + "]")
    if where == "call_kwargs":
        lines = ["name: bomb", "models:", "  - name: m", "    source: tiny-flux", "    call_kwargs:", *bomb]
    else:
        lines = ["name: bomb", "models: [{name: m, source: tiny-flux}]", "lol:", *bomb]
    return "\n".join([*lines, "workload: {prompts: [x]}", ""])


@pytest.mark.parametrize("where", ["call_kwargs", "top-level"])
def test_a_yaml_alias_bomb_is_refused_before_any_work(where, write_profile, tmp_path, monkeypatch, capsys):
    import resource
    import time

    path = write_profile(alias_bomb(where))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1, err
    expected = "models[0].call_kwargs.f" if where == "call_kwargs" else "lol.f"
    assert err.startswith(f"error: {path}: {expected}: expands to more than 100000 YAML nodes"), err
    # Bounded work (CPU time, not wall time: the machine may be busy): 9**9 values take minutes and GBs.
    assert time.process_time() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024  # KiB
    assert not (tmp_path / "run").exists()


def test_recursive_and_deep_yaml_are_refused(write_profile, tmp_path, monkeypatch, capsys):
    recursive = write_profile("name: r\nmodels: &m [*m]\nworkload: {prompts: [x]}\n", "r.yaml")
    code, err = cli(monkeypatch, capsys, "plan", str(recursive))
    assert code == 2 and err.startswith(f"error: {recursive}: models: alias '*m' refers to a node that contains it")
    deep = write_profile("models: " + "[" * 5000 + "]" * 5000 + "\n", "d.yaml")
    code, err = cli(monkeypatch, capsys, "plan", str(deep))
    assert code == 2 and "nested more than 64 levels deep" in err and err.count("\n") == 1


def test_non_json_values_are_refused(write_profile, monkeypatch, capsys):
    path = write_profile(alias_bomb("call_kwargs", 1, 1).replace("a: &a [lol]", "when: 2024-01-01"))
    code, err = cli(monkeypatch, capsys, "plan", str(path))
    assert code == 2 and err.startswith(f"error: {path}: models[0].call_kwargs.when: a YAML date value"), err


def _checkpoint(tmp_path):
    import shutil

    from accel import zoo

    copy = tmp_path / "ckpt"
    shutil.copytree(zoo.build("tiny-flux"), copy)
    return copy


def _broken(kind: str, ckpt):
    if kind == "model-index":
        (ckpt / "model_index.json").write_text('{"_class_name": "FluxPipeline",')
        return r"models\[0\] \('m'\): .*model_index.json: model_index.json is not valid JSON"
    if kind == "missing-component":
        import shutil

        shutil.rmtree(ckpt / "vae")
        return r"models\[0\] \('m'\): component 'vae' \(AutoencoderKL\): folder .*/ckpt/vae is missing"
    if kind == "component-config":
        (ckpt / "transformer" / "config.json").write_bytes(b"\xff\xfe")
        return r"component 'transformer' \(FluxTransformer2DModel\): .*transformer/config.json: the config is not UTF-8"
    weights = ckpt / "transformer" / "diffusion_pytorch_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # an interrupted download
    return (
        r"component 'transformer' \(FluxTransformer2DModel\): .*/diffusion_pytorch_model.safetensors: "
        rf"truncated weight file: {len(data) // 2} bytes, its header describes {len(data)}"
    )


@pytest.mark.parametrize("kind", ["model-index", "missing-component", "component-config", "truncated-weights"])
def test_a_broken_checkpoint_stops_the_sweep_before_the_first_cell(kind, write_profile, tmp_path, monkeypatch, capsys):
    import re

    ckpt = _checkpoint(tmp_path)
    pattern = _broken(kind, ckpt)
    path = write_profile(_with(models=[{"name": "m", "source": str(ckpt)}]))
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: ") and re.search(pattern, err), err
    assert not (tmp_path / "run").exists()


def test_a_refused_sweep_keeps_an_out_directory_it_did_not_create(write_profile, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    path = write_profile(_with(workload__num_frames=9))
    code, _ = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(out))
    assert code == 2 and out.is_dir()


def test_native_target_without_a_native_pipeline_is_a_profile_error(write_profile, tmp_path, monkeypatch, capsys):
    path = write_profile(_with(models=[{"name": "w", "source": "tiny-wan", "target": "native"}]))
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: models[0].target: model 'w': ")
    assert "unknown native pipeline for _class_name 'WanPipeline'" in err and "use target: adapter" in err


def test_features_prints_the_gpu_extra(monkeypatch, capsys):
    code, out, _ = invoke(monkeypatch, capsys, "features")
    assert code == 0 and "'omni-accel[gpu]'" in out  # rich markup ate "[gpu]" on main
    assert "'omni-accel'" not in out


def test_a_relative_checkpoint_source_is_read_from_the_profiles_folder(tmp_path, monkeypatch, capsys):
    import yaml

    from accel.profile import load_profile

    folder = tmp_path / "x"
    (folder / "ckpt").mkdir(parents=True)
    (folder / "tiny-flux").mkdir()  # a zoo name stays a zoo name, even beside a folder of that name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = folder / "p.yaml"
    sources = ["ckpt", "./ckpt", "tiny-flux", "org/name", "synthetic:flux.1-dev", str(folder / "ckpt")]
    path.write_text(yaml.safe_dump(_with(models=[{"name": f"m{i}", "source": s} for i, s in enumerate(sources)])))
    for cwd in (folder, elsewhere):
        monkeypatch.chdir(cwd)
        got = [model.source for model in load_profile(path).models]
        assert got == [str(folder / "ckpt"), str(folder / "ckpt"), "tiny-flux", "org/name", sources[4], sources[5]]
    # A path written as one (./, ../) names where it was looked for, not the working directory.
    path.write_text(yaml.safe_dump(_with(models=[{"name": "m", "source": "./missing"}])))
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1, err
    assert f"models[0].source: path '{folder / 'missing'}' is not a zoo name" in err
