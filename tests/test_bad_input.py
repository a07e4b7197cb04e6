"""Every bad input exits 2 with one line naming the location, and no traceback."""

from __future__ import annotations

import itertools

import pytest
from conftest import invoke, one_error_line, profile_with, run_cli, small_profile


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    code, _, err = invoke(monkeypatch, capsys, *args)
    return code, err


_with = profile_with


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
    "max-pairs-below-pairs": (
        _with(measure={"executor": "inline", "pairs": 10, "max_pairs": 4}),
        r"measure: measure.max_pairs \(4\) is below measure.pairs \(10\)",
    ),
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
    "model-workload-out-of-range": (
        _with(models=[{"name": "m", "source": "tiny-flux", "workload": {"num_images_per_prompt": 0}}]),
        r"\.yaml: models\[0\].workload.num_images_per_prompt: Input should be greater than 0, got 0 \(allowed: a whole "
        r"number > 0 and <= 64\)",
    ),
    "model-workload-unknown-key": (
        _with(models=[{"name": "m", "source": "tiny-flux", "workload": {"step": 2}}]),
        r"\.yaml: models\[0\].workload: unknown key 'step'. Did you mean 'steps'\?",
    ),
    "quoted-number": (
        _with(workload__steps="4"),
        r"workload.steps: .*got '4' .*; it was written as text \(quoted\): write it without quotes \(4\)$",
    ),
    "exponent-for-a-whole-number": (
        _with(workload__seeds=["1e+23"]),
        r"workload.seeds\[0\]: .*got '1e\+23' .*; YAML reads it as text: write the whole number in digits$",
    ),
    "repeated-seed": (
        _with(workload__seeds=[3, 0, 3]),
        r"workload.seeds: seed 3 is given more than once: it would generate the same images again",
    ),
    "model-workload-resolution-factor": (
        _with(models=[{"name": "m", "source": "tiny-flux", "workload": {"width": 72}}]),
        r"models\[0\].workload.width: 72 is not a multiple of 16, the resolution factor of model 'm'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_profile_exits_2_with_one_line(case, write_profile, tmp_path, monkeypatch, capsys, measured_run):
    content, pattern = CASES[case]
    path = write_profile(content)
    before = {p.name: p.read_bytes() for p in measured_run.iterdir()}
    code, err = cli(monkeypatch, capsys, "sweep", str(path), "--out", str(tmp_path / "run"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in measured_run.iterdir()} == before
    assert not (tmp_path / "run").exists()  # refused before anything was written
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
    from accel.sweep.checks import check_inputs

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


# Issue 25 (hostile review, part B): every YAML through one strict loader, and every bad input found before any
# work. Each case is (setup, pattern): setup(tmp_path, run) writes what the case needs and returns the command
# line; ``run`` is a run directory that already holds measured results, which no case may change.
THRESHOLDS_TEXT = "lossy:\n  cache: {ssim: 0.9, psnr: 25.0}\n"


def _shipped_thresholds(tmp_path, edit=None, text: str | None = None):
    import yaml

    from accel.data import data_dir

    data = yaml.safe_load((data_dir("feature_matrix") / "thresholds.yaml").read_text())
    if edit is not None:
        edit(data)
    path = tmp_path / "t.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return path


def _file(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _gate(run, option: str, path) -> list[str]:
    return ["gate", str(run), option, str(path)]


def _set(data, dotted: str, value):
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    data[last] = value


def _ckpt_case(kind: str):
    """A copy of tiny-flux broken one way, planned (``omni-accel plan``) before any cell."""

    def setup(tmp_path, run):
        import json

        ckpt = _checkpoint(tmp_path)

        def edit(file, change):
            data = json.loads((ckpt / file).read_text())
            change(data)
            (ckpt / file).write_text(json.dumps(data))

        variants = []
        if kind == "pair":
            edit("model_index.json", lambda d: d.__setitem__("vae", "AutoencoderKL"))
        elif kind == "short-pair":
            edit("model_index.json", lambda d: d.__setitem__("vae", ["diffusers"]))
        elif kind == "pipeline-class":
            edit("model_index.json", lambda d: d.__setitem__("_class_name", "FluxPipelin"))
        elif kind == "component-class":
            edit("model_index.json", lambda d: d.__setitem__("vae", ["diffusers", "AutoencoderKLL"]))
        elif kind == "config-type":
            edit("transformer/config.json", lambda d: d.__setitem__("num_layers", "two"))
        elif kind == "heads":
            edit("transformer/config.json", lambda d: d.__setitem__("num_attention_heads", 3))
        elif kind == "dup-class":
            text = (ckpt / "model_index.json").read_text()
            (ckpt / "model_index.json").write_text(text.replace("{", '{"_class_name": "FluxPipeline", ', 1))
        elif kind == "layers":
            edit("transformer/config.json", lambda d: d.__setitem__("num_layers", 100000))
        elif kind == "encoder-layers":
            edit("text_encoder/config.json", lambda d: d.__setitem__("num_hidden_layers", 3000))
        elif kind == "negative":
            edit("transformer/config.json", lambda d: d.__setitem__("num_single_layers", -1))
        elif kind == "huge":
            edit("transformer/config.json", lambda d: d.__setitem__("joint_attention_dim", 10**23))
        elif kind == "components":
            variants = [{"name": "q", "features": {"quantization": {"components": ["transformr"]}}}]
        profile = tmp_path / "p.yaml"
        import yaml

        profile.write_text(yaml.safe_dump(_with(models=[{"name": "m", "source": str(ckpt)}], variants=variants)))
        return ["plan", str(profile)]

    return setup


def _profile_text(text: str):
    def setup(tmp_path, run):
        return ["plan", str(_file(tmp_path, "p.yaml", text))]

    return setup


PROFILE_HEAD = "name: x\nmodels: [{name: m, source: tiny-flux}]\n"

REVIEW_CASES = {
    # thresholds
    "thresholds-not-utf8": (
        lambda tmp, run: _gate(run, "--thresholds", _file(tmp, "t.yaml", b"lossy:\n  cache: {note: caf\xe9}\n")),
        r"t\.yaml:2: not UTF-8 text \(byte 0xe9\); save the thresholds file as UTF-8$",
    ),
    "thresholds-duplicate-key": (
        lambda tmp, run: _gate(run, "--thresholds", _file(tmp, "t.yaml", THRESHOLDS_TEXT * 2)),
        r"t\.yaml: \(top level\): duplicate key 'lossy' \(lines 1 and 3\)",
    ),
    "thresholds-text-limit": (
        lambda tmp, run: _gate(
            run, "--thresholds", _shipped_thresholds(tmp, lambda d: _set(d, "lossless_minimum.image.ssim", "NAN"))
        ),
        r"t\.yaml: lossless_minimum\.image\.ssim: 'NAN' is not allowed: expected a number from 0 to 1",
    ),
    "thresholds-yaml-nan": (
        lambda tmp, run: _gate(
            run,
            "--thresholds",
            _shipped_thresholds(tmp, text=_shipped_thresholds(tmp).read_text().replace("ssim: 0.9\n", "ssim: .nan\n")),
        ),
        r"t\.yaml: lossy\.\w+\.ssim: nan is not allowed: expected a number from 0 to 1$",
    ),
    "thresholds-negative": (
        lambda tmp, run: _gate(
            run, "--thresholds", _shipped_thresholds(tmp, lambda d: _set(d, "lossy.cache.psnr", -5))
        ),
        r"t\.yaml: lossy\.cache\.psnr: -5 is not allowed: expected a number of dB >= 0",
    ),
    "thresholds-a-directory": (
        lambda tmp, run: _gate(run, "--thresholds", tmp),
        r"is a directory, not a thresholds file \(give the YAML file itself\)$",
    ),
    # performance baseline
    "perf-rel-tolerance-text": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "rel_tolerance: x\n")),
        r"perf\.yaml: rel_tolerance: 'x' is not allowed: expected a number >= 0$",
    ),
    "perf-negative-tolerance": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "abs_tolerance_s: -1\n")),
        r"perf\.yaml: abs_tolerance_s: -1 is not allowed: expected a number >= 0$",
    ),
    "perf-refresh-of-one": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "refresh_if_faster_by: 1.0\n")),
        r"perf\.yaml: refresh_if_faster_by: 1\.0 is not allowed: expected a number >= 0 and < 1$",
    ),
    "perf-nan-tolerance": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "rel_tolerance: .nan\n")),
        r"perf\.yaml: rel_tolerance: nan is not allowed: expected a number >= 0$",
    ),
    "perf-devices-a-list": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "devices: [1, 2]\n")),
        r"perf\.yaml: devices: expected a mapping of device to model to variant to seconds, got \[1, 2\]$",
    ),
    "perf-string-latency": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "devices: {cpu: {wan: {compile: fast}}}\n")),
        r"perf\.yaml: devices\.cpu\.wan\.compile: 'fast' is not allowed: expected the warm median latency in "
        r"seconds, a finite number > 0$",
    ),
    "perf-unknown-key": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", "rel_tolerence: 0.1\n")),
        r"perf\.yaml: unknown key 'rel_tolerence'\. Did you mean 'rel_tolerance'\? Allowed: ",
    ),
    "perf-not-utf8": (
        lambda tmp, run: _gate(run, "--baseline", _file(tmp, "perf.yaml", b"devices:\n  caf\xe9: {}\n")),
        r"perf\.yaml:2: not UTF-8 text \(byte 0xe9\)",
    ),
    # claims
    "claims-models-a-list": (
        lambda tmp, run: _gate(run, "--claims", _file(tmp, "c.yaml", "models: [1, 2]\n")),
        r"c\.yaml: models: expected a mapping of model name to claims, got \[1, 2\]$",
    ),
    "claims-maybe": (
        lambda tmp, run: _gate(run, "--claims", _file(tmp, "c.yaml", "models: {flux: {attention_backend: maybe}}\n")),
        r"c\.yaml: models\.flux\.attention_backend: 'maybe' is not a claim \(allowed: true, false or "
        r"\{supported: true\|false, note: <text>\}\)$",
    ),
    "claims-supported-maybe": (
        lambda tmp, run: _gate(
            run, "--claims", _file(tmp, "c.yaml", "models: {flux: {attention_backend: {supported: maybe}}}\n")
        ),
        r"c\.yaml: models\.flux\.attention_backend\.supported: 'maybe' is not allowed \(allowed: true, false\)$",
    ),
    "claims-unknown-feature": (
        lambda tmp, run: _gate(run, "--claims", _file(tmp, "c.yaml", "models: {flux: {tea_cach: false}}\n")),
        r"c\.yaml: models\.flux: unknown feature 'tea_cach'\. Did you mean 'tea_cache'\? Allowed: ",
    ),
    "claims-duplicate-model": (
        lambda tmp, run: _gate(
            run, "--claims", _file(tmp, "c.yaml", "models:\n  flux: {compile: true}\n  flux: {compile: false}\n")
        ),
        r"c\.yaml: models: duplicate key 'flux' \(lines 2 and 3\)",
    ),
    "claims-not-utf8": (
        lambda tmp, run: _gate(run, "--claims", _file(tmp, "c.yaml", b"models:\n  flux: {compile: {note: \xff}}\n")),
        r"c\.yaml:2: not UTF-8 text \(byte 0xff\)",
    ),
    # gate and table outputs
    "gate-junit-a-directory": (
        lambda tmp, run: ["gate", str(run), "--junit", str(tmp)],
        r"--junit: is a directory; give the path of the file to write$",
    ),
    "gate-summary-a-directory": (
        lambda tmp, run: ["gate", str(run), "--summary", str(tmp)],
        r"--summary: is a directory; give the path of the file to write$",
    ),
    "table-inject-binary": (
        lambda tmp, run: ["table", str(run), "--inject", str(_file(tmp, "doc.md", b"\x89PNG\r\n\x1a\n\x00\xff"))],
        r"doc\.md:1: not UTF-8 text \(byte 0x89\); --inject fills markdown files, UTF-8 text$",
    ),
    "table-of-a-run-with-an-edited-resolved-profile": (
        lambda tmp, run: ["table", str(run)],
        r"profile\.resolved\.yaml: workload: duplicate key 'steps' \(lines \d+ and \d+\)",
    ),
    # profiles and prompt sets
    "profile-two-measure-sections": (
        _profile_text(PROFILE_HEAD + "workload: {prompts: [x]}\nmeasure: {warmup: 0}\nmeasure: {repeats: 1}\n"),
        r"p\.yaml: \(top level\): duplicate key 'measure' \(lines 4 and 5\)",
    ),
    "profile-duplicate-feature": (
        _profile_text(
            PROFILE_HEAD + "workload: {prompts: [x]}\nvariants:\n  - name: v\n    features:\n"
            "      tea_cache: {rel_l1_thresh: 0.2}\n      tea_cache: {rel_l1_thresh: 0.6}\n"
        ),
        r"p\.yaml: variants\[0\]\.features: duplicate key 'tea_cache' \(lines 7 and 8\)",
    ),
    "profile-duplicate-in-flow-mapping": (
        _profile_text(PROFILE_HEAD + "workload: {prompts: [x], steps: 2, steps: 200}\n"),
        r"p\.yaml: workload: duplicate key 'steps' \(twice on line 3\)",
    ),
    "steps-1e23": (
        _profile_text(PROFILE_HEAD + "workload: {prompts: [x], steps: 100000000000000000000000}\n"),
        r"workload\.steps: Input should be less than or equal to 10000, got 100000000000000000000000 "
        r"\(allowed: a whole number > 0 and <= 10000\)$",
    ),
    "seed-1e23": (
        _profile_text(PROFILE_HEAD + "workload: {prompts: [x], seeds: [0, 100000000000000000000000]}\n"),
        r"workload\.seeds\[1\]: Input should be less than or equal to 18446744073709551615, got "
        r"100000000000000000000000 \(allowed: a whole number >= 0 and <= 18446744073709551615\)$",
    ),
    "seed-negative": (
        _profile_text(PROFILE_HEAD + "workload: {prompts: [x], seeds: [-1]}\n"),
        r"workload\.seeds\[0\]: Input should be greater than or equal to 0, got -1",
    ),
    "prompt-set-duplicate-key": (
        lambda tmp, run: [
            "plan",
            str(
                _file(
                    tmp,
                    "p.yaml",
                    PROFILE_HEAD
                    + "workload: {prompt_set: "
                    + str(
                        _file(
                            tmp,
                            "ps.yaml",
                            "prompts:\n  - prompt: a red square\n    expect: {background: white, colour: red, "
                            "shape: square, colour: blue}\n",
                        )
                    )
                    + "}\n",
                )
            ),
        ],
        r"p\.yaml: workload: .*ps\.yaml: prompts\[0\]\.expect: duplicate key 'colour' \(twice on line 3\)",
    ),
    "resume-with-an-edited-resolved-profile": (
        lambda tmp, run: [
            "sweep",
            "--resume",
            str(run),
        ],
        r"profile\.resolved\.yaml: workload: duplicate key 'steps' \(lines \d+ and \d+\)",
    ),
    # checkpoints, at plan time
    "model-index-entry-not-a-pair": (
        _ckpt_case("pair"),
        r"model_index\.json: 'vae': 'AutoencoderKL' is not a component entry: expected \[library, class\]",
    ),
    "model-index-entry-one-item": (
        _ckpt_case("short-pair"),
        r"model_index\.json: 'vae': \['diffusers'\] is not a component entry",
    ),
    "unknown-pipeline-class": (
        _ckpt_case("pipeline-class"),
        r"model_index\.json: _class_name: unknown pipeline class 'FluxPipelin' \(diffusers .* has no such class\)\. "
        r"Did you mean 'FluxPipeline'\?",
    ),
    "unknown-component-class": (
        _ckpt_case("component-class"),
        r"model_index\.json: 'vae': library 'diffusers' has no class 'AutoencoderKLL' .*Did you mean 'AutoencoderKL'\?",
    ),
    "config-value-of-the-wrong-type": (
        _ckpt_case("config-type"),
        r"component 'transformer' \(FluxTransformer2DModel\): .*transformer/config\.json: num_layers: 'two' is not "
        r"allowed: FluxTransformer2DModel takes a whole number",
    ),
    "model-index-key-twice": (  # diffusers would take the last one, silently
        _ckpt_case("dup-class"),
        r"model_index\.json: model_index\.json gives the key '_class_name' twice: keep one",
    ),
    "perf-baseline-device-twice": (
        lambda tmp, run: _gate(
            run, "--baseline", _file(tmp, "b.yaml", "devices:\n  cpu: {m: {v: 1.0}}\n  CPU: {m: {v: 2.0}}\n")
        ),
        r"b\.yaml: devices: 'cpu' and 'CPU' name the same device \(keys match case-insensitively\)",
    ),
    "thresholds-section-not-a-mapping": (
        lambda tmp, run: _gate(run, "--thresholds", _shipped_thresholds(tmp, lambda d: _set(d, "lossless", 1))),
        r"t\.yaml: lossless: expected a mapping, got 1$",
    ),
    "config-asking-for-100000-layers": (  # building them on the meta device hung `plan`
        _ckpt_case("layers"),
        r"component 'transformer' \(FluxTransformer2DModel\): .*transformer/config\.json: num_layers: 100000 is not "
        r"allowed: at most 1024 layers or blocks",
    ),
    "text-encoder-config-asking-for-3000-layers": (  # its weights hold 2: 2998 random layers were timed
        _ckpt_case("encoder-layers"),
        r"component 'text_encoder' \(CLIPTextModel\): .*text_encoder/config\.json: num_hidden_layers: 3000 is not "
        r"allowed: at most 1024 layers or blocks",
    ),
    "config-with-a-negative-count": (
        _ckpt_case("negative"),
        r"transformer/config\.json: num_single_layers: -1 is not allowed: a size or count, 0 or more",
    ),
    "config-with-a-size-beyond-any-model": (
        _ckpt_case("huge"),
        r"transformer/config\.json: joint_attention_dim: 100000000000000000000000 is not allowed: a number within",
    ),
    "head-count-not-matching-the-weights": (
        _ckpt_case("heads"),
        r"component 'transformer' \(FluxTransformer2DModel\): .*diffusion_pytorch_model\.safetensors: '.*' has shape "
        r"\[32, \d+\] but config\.json builds \[48, \d+\]: the config does not describe these weights "
        r"\(.*num_attention_heads 3",
    ),
    "misspelt-quantization-component": (
        _ckpt_case("components"),
        r"p\.yaml: variant 'q': quantization\.components: model 'm' has no component 'transformr'\. "
        r"Did you mean 'transformer'\? Components with weights: text_encoder, text_encoder_2, transformer, vae$",
    ),
    # command line
    "zoo-train-zero-threads": (
        lambda tmp, run: ["zoo", "train", "mini-flux", "--threads", "0", "--out", str(tmp / "training")],
        r"--threads.*(greater than or equal to 1|>=1)",
    ),
}


@pytest.fixture
def measured_run(tmp_path):
    """A run directory holding measured results (and its resolved profile, edited to hold a duplicate key)."""
    import json

    from synthetic import results

    run = tmp_path / "measured"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results()))
    resolved = "name: x\nmodels: [{name: m, source: tiny-flux}]\nworkload:\n  prompts: [x]\n  steps: 2\n  steps: 3\n"
    (run / "profile.resolved.yaml").write_text(resolved)
    return run


@pytest.mark.parametrize("case", list(REVIEW_CASES))
def test_review_bad_inputs_exit_2_with_one_line_and_keep_results(case, measured_run, tmp_path, monkeypatch, capsys):
    setup, pattern = REVIEW_CASES[case]
    work = tmp_path / "case"
    work.mkdir()
    before = {p.name: p.read_bytes() for p in measured_run.iterdir()}
    args = setup(work, measured_run)
    code, err = cli(monkeypatch, capsys, *args)
    one_error_line(code, err, pattern)
    assert {p.name: p.read_bytes() for p in measured_run.iterdir()} == before  # nothing measured changed
    assert not (work / "training").exists()


def _holding_a_semaphore(scratch) -> bool:
    import contextlib

    for phase in scratch.glob("*.phase"):
        with contextlib.suppress(OSError):  # the baseline's phase file is removed when its cell ends
            if "holding a semaphore" in phase.read_text():
                return True
    return False


@pytest.fixture
def short_scratch():
    """A private temporary folder with a short path, removed afterwards: the sweep's forkserver binds a Unix
    socket inside TMPDIR, and a socket path may not exceed 107 bytes; under tmp_path (with pytest-xdist's
    ``popen-gw1/`` level in it) the forkserver's listener path did (``OSError: AF_UNIX path too long``)."""
    import shutil
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="oa-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_after_ctrl_c_the_last_line_is_the_resume_command(tmp_path, short_scratch):
    """A worker killed by the interrupt leaves a named semaphore (as a library's multiprocessing lock does); the
    resource tracker's warning about it came after the promised ``--resume`` line. A subprocess: Ctrl-C goes
    to the whole process group, forkserver and tracker included."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    profile = small_profile(["tiny-flux"], [{"name": "v", "features": {"vae_use_slicing": True}}])
    profile["measure"] = {"warmup": 0, "repeats": 1, "executor": "process", "noise_floor": False}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(profile))
    run_dir = tmp_path / "run"
    scratch = short_scratch  # the sweep's temporary files, among them each worker's phase file
    env = {**os.environ, "OMNI_ACCEL_FAULT": "hang-holding-a-semaphore:tiny-flux/v", "TMPDIR": str(scratch)}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # see test_resilience: not ignored
    try:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "accel", "sweep", str(path), "--out", str(run_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + 600  # generous: the machine may be shared
    while time.monotonic() < deadline and not _holding_a_semaphore(scratch):  # the variant's worker, hanging
        assert sweep.poll() is None, sweep.communicate()[1]
        time.sleep(0.1)
    measured = results.read_bytes()
    os.killpg(sweep.pid, signal.SIGINT)
    try:
        _, stderr = sweep.communicate(timeout=120)  # a hang guard, not a speed requirement
    except subprocess.TimeoutExpired:
        os.killpg(sweep.pid, signal.SIGKILL)
        raise
    assert sweep.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: 1 cell(s) recorded in {results} are kept; continue with 'omni-accel sweep --resume {run_dir}'"
    ), stderr
    assert results.read_bytes() == measured


RULE = "  - match: [{family: cache}, {family: cache}]\n    reason: one cache\n"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("rules:\n" + RULE + "rules: []\n", r"r\.yaml: \(top level\): duplicate key 'rules' \(lines 1 and 4\)"),
        ("rules:\n" + RULE.replace("reason", "reson"), r"r\.yaml: rules\[0\]: unknown key 'reson'\. Did you mean"),
        ("rules: {a: 1}\n", r"r\.yaml: rules: expected a list of rules"),
        ("rules: [just text]\n", r"r\.yaml: rules\[0\]: expected a mapping with keys match, reason, source"),
        ("rules:\n" + RULE.replace("{family: cache}]", "[cache]]"), r"r\.yaml: rules\[0\]\.match: \['cache'\] must"),
        ("rulez: []\n", r"r\.yaml: unknown key 'rulez'\. Did you mean 'rules'\?"),
    ],
)
def test_a_rules_file_is_read_strictly(tmp_path, text, pattern):
    from accel.errors import ConfigError
    from accel.features.rules import load_rules

    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=pattern) as error:
        load_rules(path)
    assert "\n" not in str(error.value)


def test_an_engine_mapping_with_a_duplicate_key_is_refused(tmp_path):
    from accel.engines.mapping import load_mapping
    from accel.errors import ConfigError

    path = tmp_path / "m.yaml"
    path.write_text("features:\n  compile: {}\nfeatures: {}\n")
    with pytest.raises(ConfigError, match=r"m\.yaml: \(top level\): duplicate key 'features' \(lines 1 and 3\)"):
        load_mapping("vllm-omni", path)
