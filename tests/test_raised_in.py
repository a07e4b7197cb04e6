"""A failed cell names whose code raised (issue 40: a failure is attributed as a refusal is): the innermost frame
outside torch and the standard library, in the record (``raised_in``) and beside the ❌ in the tables."""

from __future__ import annotations

import pytest
from features_helpers import generate, loaded
from synthetic import CLAIMS, results

from accel.gate import GateData, gate_records, load_gate_data
from accel.raised_in import HARNESS, HARNESS_ROOT, raised_in
from accel.report import tables


def _raise_from(filename: str) -> BaseException:
    namespace: dict = {}
    source = "def fails():\n    import torch\n    torch.split(torch.ones(3), [1, 1])\n"  # raises inside torch's Python
    exec(compile(source, filename, "exec"), namespace)  # a frame whose file is ``filename``
    try:
        namespace["fails"]()
    except RuntimeError as error:
        return error
    raise AssertionError("did not raise")


def test_torch_raising_for_its_caller_names_the_caller():
    error = _raise_from("/venv/lib/python3.11/site-packages/diffusers/hooks/faster_cache.py")
    assert raised_in(error) == {"package": "diffusers", "where": "hooks/faster_cache.py:3 in fails"}
    error = _raise_from(str(HARNESS_ROOT / "features" / "timestep_caches.py"))
    assert raised_in(error) == {"package": HARNESS, "where": "accel/features/timestep_caches.py:3 in fails"}


def test_only_omni_accels_own_files_are_the_harness():
    """A user's script in some other folder named ``accel`` is theirs, not a harness defect; installed in
    site-packages, omni-accel's files are still the harness's."""
    error = _raise_from("/home/someone/accel/run_my_model.py")
    assert raised_in(error) == {"package": "run_my_model", "where": "run_my_model.py:3 in fails"}
    error = _raise_from("/venv/lib/python3.11/site-packages/accel_plugins/hooks.py")
    assert raised_in(error) == {"package": "accel_plugins", "where": "hooks.py:3 in fails"}


def test_the_harness_installed_in_site_packages_or_reached_through_a_link_is_still_the_harness(tmp_path, monkeypatch):
    """omni-accel installed (not editable) lives under site-packages: its frames are still the harness's, not a
    package called ``accel``; a frame whose file is reached through a symlink to it too. Generated code
    (``<string>``) is nobody's, even run from inside the package folder."""
    import accel.raised_in as module

    installed = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "accel"
    (installed / "features").mkdir(parents=True)
    monkeypatch.setattr(module, "HARNESS_ROOT", installed)
    error = _raise_from(str(installed / "features" / "x.py"))
    assert raised_in(error) == {"package": HARNESS, "where": "accel/features/x.py:3 in fails"}
    (tmp_path / "link").symlink_to(installed, target_is_directory=True)
    error = _raise_from(str(tmp_path / "link" / "features" / "x.py"))
    assert raised_in(error) == {"package": HARNESS, "where": "accel/features/x.py:3 in fails"}
    monkeypatch.chdir(installed)
    assert module._package("<string>") is None and module._package("<eval_with_key>.3") is None


def test_fastercache_on_a_unet_fails_inside_diffusers():
    """diffusers' FasterCache splits the UNet's 0-d timestep into halves: the crash is diffusers', named so."""
    from accel import apply
    from accel.features import FEATURES

    target = loaded("tiny-sd15")
    config = FEATURES["faster_cache"].parse_options({})
    with apply(target.pipeline, config, num_inference_steps=8), pytest.raises(RuntimeError) as caught:
        generate(target, steps=8)
    raised = raised_in(caught.value)
    assert raised is not None and raised["package"] == "diffusers", raised
    assert raised["where"].startswith("hooks/faster_cache.py:"), raised


ERROR = "RuntimeError: chunk expects at least a 1-dimensional tensor"


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (
            {"package": "diffusers", "where": "hooks/faster_cache.py:276 in new_forward"},
            f"failed inside diffusers (hooks/faster_cache.py:276 in new_forward): {ERROR}",
        ),
        (
            {"package": HARNESS, "where": "accel/features/work.py:1 in f"},
            f"failed inside omni-accel (accel/features/work.py:1 in f), a harness defect: {ERROR}",
        ),
        (None, ERROR),
    ],
)
def test_the_tables_say_whose_code_failed(raised, reason):
    records = results()
    cell = next(r for r in records if r["model"] == "flux" and r["variant"] == "compile")
    cell.update(status="failed", error=ERROR, raised_in=raised)
    shipped = load_gate_data()
    report = gate_records(records, GateData(shipped.thresholds, CLAIMS))
    verdict = next(v for v in report.verdicts if v.key == "flux/compile")
    assert tables.classify(cell, verdict) == (tables.FAILED, reason)


def test_a_failed_cell_records_whose_code_raised(tmp_path):
    """The sweep's own cell path: FasterCache on tiny-sd15 fails inside diffusers, and the record says so."""
    from conftest import small_profile

    from accel.profile import parse_profile
    from accel.sweep.cell import run_cell
    from accel.sweep.runner import plan as plan_cells

    raw = small_profile(["tiny-sd15"], [{"name": "faster-cache", "features": {"faster_cache": {}}}], steps=8)
    cells = {cell.variant: cell for cell in plan_cells(parse_profile(raw), tmp_path)}
    record = run_cell(cells["faster-cache"])
    assert record["status"] == "failed", record.get("error")
    assert record["raised_in"]["package"] == "diffusers", record["raised_in"]
    assert record["raised_in"]["where"].startswith("hooks/faster_cache.py:"), record["raised_in"]
