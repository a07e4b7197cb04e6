"""No command writes over a file the run owns, an input, the profile or a checkpoint, whatever path it is given
(issue 41: ``gate RUN --junit RUN/results.jsonl`` wrote its XML over the records it judged).

Each output option is tried with each such path, directly and through a symlink; the command exits 2 with one
line naming the option and the path, and every byte under the test's directory is unchanged.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import invoke, small_profile

COMMITTED = Path(__file__).resolve().parents[1] / "reports" / "quickstart"


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) -> its sha256: what must be byte-identical."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A run (the committed quickstart with an outputs/ file), a profile, a checkpoint and a zoo cache."""
    run = tmp_path / "run"
    shutil.copytree(COMMITTED, run)
    (run / "outputs" / "mini-flux").mkdir(parents=True)
    (run / "outputs" / "mini-flux" / "baseline.npz").write_bytes(b"outputs")
    (run / "steps" / "mini-flux").mkdir(parents=True)
    (run / "steps" / "mini-flux" / "baseline.npz").write_bytes(b"per-step latents")
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "vae").mkdir(parents=True)
    (checkpoint / "model_index.json").write_text("{}")
    (checkpoint / "vae" / "config.json").write_text("{}")
    zoo = tmp_path / "zoo"
    (zoo / "tiny-flux-0").mkdir(parents=True)
    (zoo / "tiny-flux-0" / "model_index.json").write_text("{}")
    monkeypatch.setenv("OMNI_ACCEL_ZOO_DIR", str(zoo))
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(small_profile()))
    claims = tmp_path / "claims.yaml"
    shutil.copy(Path(__file__).resolve().parents[1] / "feature_matrix" / "claims.yaml", claims)
    return tmp_path


# What a run owns, the inputs, a checkpoint and the zoo cache, relative to the world.
PROTECTED = [
    "run/results.jsonl",
    "run/results.parquet",
    "run/profile.resolved.yaml",
    "run/environment.json",
    "run/cells.planned.json",
    "run/report.md",
    "run/omni-accel.log",
    "run/outputs/mini-flux/baseline.npz",
    "run/outputs/mini-flux/new.npz",
    "run/steps/mini-flux/baseline.npz",
    "run/steps/mini-flux/new.npz",
    "run/images/mini-flux/baseline/p0_s0_n0.png",
    "run/figures/bars-mini-flux.png",
    "checkpoint/model_index.json",
    "checkpoint/vae/config.json",
    "checkpoint/new.txt",
    "zoo/tiny-flux-0/model_index.json",
    "zoo/gate.md",
    "claims.yaml",
]


def _refused(monkeypatch, capsys, world: Path, args: list[str], option: str, target: str) -> None:
    before = _tree(world)
    code, out, err = invoke(monkeypatch, capsys, *args)
    assert code == 2, (args, out, err)
    assert err.count("\n") == 1 and err.startswith(f"error: {option} ") and "refusing to write" in err, err
    assert target in err and "Traceback" not in err
    assert _tree(world) == before, f"{args} changed files"


def _cases(world: Path, relative: str) -> list[str]:
    """The protected path itself, and a symlink to it beside the world (resolved through the link)."""
    target = world / relative
    link = world / f"link-{relative.replace('/', '-')}"
    link.symlink_to(target)
    return [str(target), str(link)]


@pytest.mark.parametrize("relative", PROTECTED)
@pytest.mark.parametrize("option", ["--junit", "--summary"])
def test_the_gate_never_writes_over_what_it_judges(world, monkeypatch, capsys, relative, option):
    for path in _cases(world, relative):
        args = ["gate", str(world / "run"), "--claims", str(world / "claims.yaml"), option, path]
        _refused(monkeypatch, capsys, world, args, option, path)


@pytest.mark.parametrize("relative", PROTECTED)
def test_table_inject_never_writes_over_what_it_reads(world, monkeypatch, capsys, relative):
    if not (world / relative).exists():
        (world / relative).parent.mkdir(parents=True, exist_ok=True)
        (world / relative).write_text("<!-- omni-accel:begin support -->\n<!-- omni-accel:end support -->\n")
    for path in _cases(world, relative):
        args = ["table", str(world / "run"), "--claims", str(world / "claims.yaml"), "--inject", path]
        _refused(monkeypatch, capsys, world, args, "--inject", path)


@pytest.mark.parametrize("relative", PROTECTED)
def test_roofline_json_never_writes_over_a_run_or_a_checkpoint(world, monkeypatch, capsys, relative):
    if relative == "claims.yaml":
        pytest.skip("roofline reads no claims file")
    for path in _cases(world, relative):
        _refused(monkeypatch, capsys, world, ["roofline", "synthetic:flux.1-dev", "--json", path], "--json", path)


@pytest.mark.parametrize(
    "relative",
    ["profile.yaml", "checkpoint", "checkpoint/vae", "checkpoint/new-run", "zoo", "zoo/new-run", "run/outputs"],
)
def test_sweep_out_never_writes_over_the_profile_a_checkpoint_or_a_run(world, monkeypatch, capsys, relative):
    for path in _cases(world, relative):
        _refused(monkeypatch, capsys, world, ["sweep", str(world / "profile.yaml"), "--out", path], "--out", path)


def test_sweep_out_never_writes_a_run_file_over_the_profile(world, monkeypatch, capsys):
    """The profile is named like a file the sweep writes (report.md) in the directory it writes to."""
    target = world / "sweep-here"
    target.mkdir()
    shutil.copy(world / "profile.yaml", target / "report.md")
    before = _tree(world)
    code, _, err = invoke(monkeypatch, capsys, "sweep", str(target / "report.md"), "--out", str(target))
    assert code == 2 and "refusing to write report.md there: it is the profile being run" in err, err
    assert _tree(world) == before


def test_two_options_naming_one_file_are_refused(world, monkeypatch, capsys):
    same = str(world / "gate-both.txt")
    before = _tree(world)
    code, _, err = invoke(monkeypatch, capsys, "gate", str(world / "run"), "--junit", same, "--summary", same)
    assert code == 2 and "--summary" in err and "--junit writes the same file" in err, err
    assert _tree(world) == before


def test_a_free_path_is_still_written(world, monkeypatch, capsys):
    """The rule refuses only what it must: the gate's own default files and a path beside the run are written."""
    out = world / "elsewhere" / "gate.xml"
    out.parent.mkdir()
    code, _, err = invoke(
        monkeypatch, capsys, "gate", str(world / "run"), "--claims", str(world / "claims.yaml"), "--junit", str(out)
    )
    assert code in (0, 1) and "refusing" not in err, err
    assert out.read_text().startswith("<?xml") and (world / "run" / "gate.md").is_file()


def test_a_run_directory_may_be_resumed_but_not_through_a_link_to_the_profile(world):
    """The run's own files are the sweep's to write (resume appends to results.jsonl); a run file that is a link
    is judged where it leads."""
    from accel.errors import ConfigError
    from accel.outputs import check_run_dir

    run = world / "run"
    check_run_dir(run, "--resume", run / "profile.resolved.yaml", resume=True)
    check_run_dir(run, "--out", world / "profile.yaml")
    (run / "report.md").unlink()
    (run / "report.md").symlink_to(world / "profile.yaml")
    with pytest.raises(ConfigError, match=r"--out .*run: refusing to write report\.md there: it is the profile"):
        check_run_dir(run, "--out", world / "profile.yaml")


def _no_training(monkeypatch) -> None:
    """Training would start where the rule failed to refuse (and write there): fail the test at once instead."""
    from accel.zoo import mini_flux, mini_wan

    def refused_too_late(out_dir, **_):
        pytest.fail(f"zoo train started training into {out_dir}: the output rule let it through")

    monkeypatch.setattr(mini_flux, "train", refused_too_late)
    monkeypatch.setattr(mini_wan, "train", refused_too_late)


@pytest.mark.parametrize(
    "relative",
    ["run", "run/outputs", "run/outputs/mini-flux", "checkpoint", "checkpoint/vae", "zoo", "zoo/tiny-flux-0"],
)
def test_zoo_train_out_never_writes_into_a_run_a_checkpoint_or_the_zoo_root(world, monkeypatch, capsys, relative):
    _no_training(monkeypatch)
    for path in _cases(world, relative):
        _refused(monkeypatch, capsys, world, ["zoo", "train", "mini-flux", "--out", path], "--out", path)


@pytest.mark.parametrize("name", ["mini-flux", "mini-wan"])
def test_zoo_train_out_never_writes_over_the_committed_weights(world, monkeypatch, capsys, name):
    """The committed weights are checked by their hash at every build: training over them would replace them
    before anyone compared the losses. Refused there, inside them and through a link to them; each trained
    entry's, whichever entry is trained."""
    from accel.zoo.mini_flux import WEIGHTS_DIR as FLUX_WEIGHTS
    from accel.zoo.mini_wan import WEIGHTS_DIR as WAN_WEIGHTS

    WEIGHTS_DIR = WAN_WEIGHTS if name == "mini-wan" else FLUX_WEIGHTS
    _no_training(monkeypatch)
    paths = dict.fromkeys([WEIGHTS_DIR, WEIGHTS_DIR / "new-run", WEIGHTS_DIR.parent, FLUX_WEIGHTS, WAN_WEIGHTS])
    for number, path in enumerate(paths):
        before = _tree(WEIGHTS_DIR.parent)
        link = world / f"link-{number}"
        link.symlink_to(path)
        for given in (path, link):
            code, _, err = invoke(monkeypatch, capsys, "zoo", "train", name, "--out", str(given))
            assert code == 2 and "committed weights" in err and err.count("\n") == 1, err
        assert _tree(WEIGHTS_DIR.parent) == before and not (WEIGHTS_DIR / "new-run").exists()


def test_zoo_train_may_write_a_new_folder_inside_the_zoo_cache(world):
    """Its default (``<zoo>/<name>-training``) is inside the zoo cache: allowed, where a built entry is not."""
    from accel.outputs import check_training_dir
    from accel.zoo.mini_flux import WEIGHTS_DIR

    check_training_dir(world / "zoo" / "mini-flux-training", "--out", WEIGHTS_DIR.parent)  # no error


def test_a_sweep_whose_outputs_folder_links_into_another_run_is_refused(world, monkeypatch, capsys):
    """A run directory whose ``outputs/`` (or ``images/``) is a link into another run's: the sweep would write
    its cells' files among the other run's. Refused before anything is written."""
    for folder in ("outputs", "steps", "images"):
        mine = world / f"mine-{folder}"
        mine.mkdir()
        (mine / folder).symlink_to(world / "run" / folder)
        before = _tree(world)
        code, _, err = invoke(monkeypatch, capsys, "sweep", str(world / "profile.yaml"), "--out", str(mine))
        assert code == 2 and f"refusing to write {folder} there" in err and "run directory" in err, err
        assert _tree(world) == before


@pytest.mark.parametrize("folder", ["outputs", "steps"])
def test_a_sweep_whose_run_folder_links_into_a_checkpoint_is_refused(world, monkeypatch, capsys, folder):
    """A run directory whose ``steps/`` (per-step latents) or ``outputs/`` is a link to a checkpoint folder: the
    sweep would write its cells' files among the checkpoint's weights."""
    mine = world / "mine"
    mine.mkdir()
    (mine / folder).symlink_to(world / "checkpoint" / "vae", target_is_directory=True)
    before = _tree(world)
    code, _, err = invoke(monkeypatch, capsys, "sweep", str(world / "profile.yaml"), "--out", str(mine))
    assert code == 2 and f"refusing to write {folder} there" in err and "checkpoint" in err, err
    assert _tree(world) == before


def _calibration_world(world: Path) -> Path:
    """A profile calibrate accepts (3 steps) whose variant reads a calibration file: both inputs of calibrate."""
    shutil.copy(Path(__file__).resolve().parents[1] / "calibration" / "tiny-flux.yaml", world / "calibrated.yaml")
    variant = {"name": "fbc", "features": {"cache_dit": {"calibration": str(world / "calibrated.yaml")}}}
    profile = world / "calib.yaml"
    profile.write_text(yaml.safe_dump(small_profile(variants=[variant], steps=3)))
    return profile


@pytest.mark.parametrize(
    "relative",
    ["calib.yaml", "calibrated.yaml", "run/results.jsonl", "run/steps/mini-flux/baseline.npz", "checkpoint/new.txt"],
)
def test_calibrate_out_never_writes_over_its_inputs_a_run_or_a_checkpoint(world, monkeypatch, capsys, relative):
    """``calibrate p.yaml --out p.yaml`` replaced the profile with calibration YAML; refused before the model
    loads (a load here means the rule let the path through)."""
    from accel.targets.adapter import AdapterTarget

    profile = _calibration_world(world)
    monkeypatch.setattr(AdapterTarget, "load", lambda self: pytest.fail("calibrate loaded the model: not refused"))
    for path in _cases(world, relative):
        args = ["calibrate", str(profile), "--model", "tiny-flux", "--out", path]
        _refused(monkeypatch, capsys, world, args, "--out", path)


def _no_tune(monkeypatch) -> None:
    import accel.tune

    monkeypatch.setattr(accel.tune, "tune", lambda *a, **k: pytest.fail("the tune started: --out not refused"))


@pytest.mark.parametrize("name", ["recommended.yaml", "tune.md", "tune.json", "pareto.png"])
def test_tune_out_never_writes_over_the_profile_it_tunes(world, monkeypatch, capsys, name):
    """``tune D/recommended.yaml --out D`` overwrote the profile being tuned with its recommendation."""
    _no_tune(monkeypatch)
    (world / "tuned").mkdir()
    shutil.copy(world / "profile.yaml", world / "tuned" / name)
    for path in _cases(world, "tuned"):
        args = ["tune", str(world / "tuned" / name), "--out", path]
        _refused(monkeypatch, capsys, world, args, "--out", path)


def test_tune_out_never_writes_over_its_calibration_file(world, monkeypatch, capsys):
    _no_tune(monkeypatch)
    (world / "tuned").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "calibration" / "tiny-flux.yaml", world / "tuned" / "tune.md")
    for path in _cases(world, "tuned"):
        args = ["tune", str(world / "profile.yaml"), "--out", path, "--calibration", str(world / "tuned" / "tune.md")]
        _refused(monkeypatch, capsys, world, args, "--out", path)


@pytest.mark.parametrize("name", ["diverge.json", "diverge.md"])
def test_diverge_out_never_writes_over_its_mapping(world, monkeypatch, capsys, name):
    """``diverge ... --mapping mo/diverge.json --out mo`` wrote its JSON over the mapping it read."""
    import accel.diverge

    monkeypatch.setattr(accel.diverge, "diverge", lambda *a, **k: pytest.fail("diverge ran: --out not refused"))
    (world / "mo").mkdir()
    (world / "mo" / name).write_text('{"ff.net.2": "ff.fc2"}\n')
    for path in _cases(world, "mo"):
        args = ["diverge", str(world / "profile.yaml"), "--model", "tiny-flux", "--against", "tiny-flux"]
        args += ["--mapping", str(world / "mo" / name), "--out", path]
        _refused(monkeypatch, capsys, world, args, "--out", path)


def test_figures_of_a_run_missing_some_models_outputs_are_drawn_for_the_rest_and_kept_for_the_others(tmp_path):
    """A committed run directory keeps no outputs (they are ignored by git); re-measuring one model there with
    --resume writes that model's outputs only. The report's image grids are then drawn for the models whose
    outputs are there, and the others get their charts alone: the resume crashed on the first missing file
    (FileNotFoundError, wave 10, after re-measuring the coverage run's mini-wan cells)."""
    import numpy as np
    from synthetic import record

    from accel.report.figures import write_figures

    key = "p0_s0_n0"
    image = np.random.default_rng(0).random((1, 16, 16, 3), dtype=np.float32)
    cells = [
        {**record(model, variant, {}), "outputs_file": f"outputs/{model}/{variant}.npz"}
        for model in ("gone", "here")
        for variant in ("baseline", "tiled")
    ]
    for variant in ("baseline", "tiled"):
        (tmp_path / "outputs" / "here").mkdir(parents=True, exist_ok=True)
        np.savez(tmp_path / "outputs" / "here" / f"{variant}.npz", **{key: image})
    figures = write_figures(tmp_path, cells, [key])
    assert [f for f in figures["here"] if "grid-" in f] == ["figures/grid-here-p0.png"]
    assert not [f for f in figures["gone"] if "grid-" in f]
    # The grids an earlier sweep of the folder drew from outputs since deleted stay in the report (the coverage
    # report lost every other model's grid); another model whose name extends this one's keeps its own.
    (tmp_path / "figures" / "grid-gone-p0.png").write_bytes(b"png")
    (tmp_path / "figures" / "grid-gone-too-p0.png").write_bytes(b"png")
    cells += [{**record("gone-too", "baseline", {}), "outputs_file": "outputs/gone-too/baseline.npz"}]
    figures = write_figures(tmp_path, cells, [key])
    assert [f for f in figures["gone"] if "grid-" in f] == ["figures/grid-gone-p0.png"]
    assert [f for f in figures["gone-too"] if "grid-" in f] == ["figures/grid-gone-too-p0.png"]
    assert [f for f in figures["here"] if "grid-" in f] == ["figures/grid-here-p0.png"]  # drawn anew


def test_table_and_gate_list_a_resumed_runs_cells_in_the_profiles_order(tmp_path, monkeypatch, capsys):
    """A resumed run appends the cells it measured to results.jsonl; its report lists every cell in the
    profile's order, and the tables and the gate must too (the coverage matrix listed mini-wan's re-measured
    cells after every other family's)."""
    run = tmp_path / "run"
    shutil.copytree(COMMITTED, run, ignore=shutil.ignore_patterns("images", "figures"))
    expected = {}
    for command in ("table", "gate"):
        code, out, _ = invoke(monkeypatch, capsys, command, str(run))
        assert code in (0, 1), out
        expected[command] = out
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    (run / "results.jsonl").write_text("".join(lines[1:] + lines[:1]))  # the baseline re-measured last
    for command in ("table", "gate"):
        code, out, _ = invoke(monkeypatch, capsys, command, str(run))
        assert out == expected[command], command
