"""Third-party features: registered through the ``omni_accel.features`` entry point, then used like built-ins.

A fake distribution (a ``.dist-info`` with ``entry_points.txt``) on ``sys.path`` registers the example feature
of ``tests/example_plugin``, as ``pip install`` of a plugin package would; the test then runs it through a tiny
profile, the gate, the tables, ``omni-accel features`` and ``apply``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke, small_profile

from accel.errors import ConfigError
from accel.features import ENTRY_POINT_GROUP, FEATURES

PLUGIN_DIR = Path(__file__).resolve().parent / "example_plugin"
NAME = "transformer_call_counter"


def _distribution(root: Path, entry: str) -> None:
    info = root / "omni_accel_example-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: omni-accel-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The example plugin installed (a dist-info on sys.path) and discovered; unregistered afterwards."""
    _distribution(tmp_path / "site", f"{NAME} = omni_accel_example:TransformerCallCounter")
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    FEATURES.discover()
    yield FEATURES[NAME]
    FEATURES.unregister(NAME)


def test_an_entry_point_feature_runs_through_a_profile_the_gate_and_the_tables(plugin, tmp_path):
    from accel.gate import PASS, gate_records, load_gate_data
    from accel.profile import parse_profile
    from accel.report.tables import render_tables
    from accel.sweep.runner import run_sweep

    assert FEATURES.source(NAME) == f"entry point '{NAME}' (omni_accel_example:TransformerCallCounter)"
    raw = small_profile(["tiny-flux"], [{"name": "counted", "features": {NAME: {"min_calls": 2}}}])
    raw["measure"]["noise_floor"] = False
    records = run_sweep(parse_profile(raw), "plugin.yaml", tmp_path / "run", show_progress=False).records
    counted = next(r for r in records if r["variant"] == "counted")
    assert counted["status"] == "ok", counted.get("error")
    evidence = counted["evidence"][NAME]
    assert evidence["engaged"] and all(n == 2 for n in evidence["calls_per_run"])  # 2 steps, 1 call each
    verdict = next(v for v in gate_records(records, load_gate_data()).verdicts if v.variant == "counted")
    assert verdict.outcome == PASS, verdict
    assert verdict.feature_states == {NAME: "engaged"}
    assert any("lossless (image, float32)" in check.name for check in verdict.checks), verdict.checks
    support = render_tables(records, load_gate_data())["support-matrix"]
    assert f"example<br>`{NAME}`" in support and "✅" in support


def test_an_entry_point_feature_is_listed_by_omni_accel_features(plugin, monkeypatch, capsys):
    code, out, _ = invoke(monkeypatch, capsys, "features")
    assert code == 0
    row = next(line for line in out.splitlines() if NAME in line)
    assert "example" in row and "lossless" in row and "supported" in row


def test_an_entry_point_feature_works_with_apply_and_its_config_type(plugin):
    from features_helpers import generate, loaded
    from omni_accel_example import TransformerCallCounterConfig

    from accel import apply

    target = loaded("tiny-flux")
    with apply(target.pipeline, TransformerCallCounterConfig()) as applied:
        generate(target)
    assert applied.evidence()[NAME]["calls_per_run"] == [2]


def test_a_broken_entry_point_is_an_error_that_names_it(tmp_path, monkeypatch):
    _distribution(tmp_path, "broken = omni_accel_no_such_module:Feature")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"feature entry point 'broken' .* failed to load: ModuleNotFoundError"):
        FEATURES.discover()


def test_a_name_taken_by_a_built_in_is_refused(tmp_path, monkeypatch):
    module = tmp_path / "omni_accel_clash.py"
    module.write_text("from accel.features.compile import Compile\n\nclass Clash(Compile):\n    pass\n")
    _distribution(tmp_path, "clash = omni_accel_clash:Clash")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="the name 'compile' is already registered by built-in; choose another"):
        FEATURES.discover()


def test_a_plugin_feature_that_does_not_engage_fails_its_cell_and_its_evidence_is_kept(plugin, tmp_path):
    """The gate's engagement rule fails the cell with the feature's own summary; the plugin's evidence keys
    (undeclared in the record) are written and read back as they are."""
    from accel.gate import FAIL, gate_records, load_gate_data
    from accel.profile import parse_profile
    from accel.results import read_results
    from accel.sweep.runner import run_sweep

    raw = small_profile(["tiny-flux"], [{"name": "counted", "features": {NAME: {"min_calls": 3}}}])
    raw["measure"]["noise_floor"] = False
    run_sweep(parse_profile(raw), "plugin.yaml", tmp_path / "run", show_progress=False)
    counted = next(r for r in read_results(tmp_path / "run") if r["variant"] == "counted")
    assert counted["status"] == "failed"
    assert counted["error"] == f"{NAME}: fewer than 3 transformer calls on a run"
    assert counted["evidence"][NAME]["calls_per_run"] and counted["evidence"][NAME]["engaged"] is False
    verdict = next(v for v in gate_records([counted], load_gate_data()).verdicts if v.variant == "counted")
    assert verdict.outcome == FAIL and verdict.feature_states == {NAME: "not engaged"}
