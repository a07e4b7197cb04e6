"""Records the gate must refuse (issue 41): options this omni-accel does not know, whatever the schema version,
and paths that leave the run directory.

The unknown-option case regressed in f470f3d (records carry ``feature_classes``, schema 2): ``check_record``
parsed a record's options only when it had no recorded classes, so ``attention_backend: nonsense`` in a record
of schema 1 or 3 that carries ``feature_classes`` passed the cell.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import invoke

COMMITTED = Path(__file__).resolve().parents[1] / "reports" / "quickstart"


def _run_with(tmp_path: Path, variant: str, **changes) -> Path:
    """A copy of the committed quickstart run whose record of ``variant`` has ``changes``."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("results.jsonl", "cells.planned.json", "profile.resolved.yaml"):
        shutil.copy(COMMITTED / name, run / name)
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert any(r["variant"] == variant for r in records), variant
    edited = [{**r, **changes} if r["variant"] == variant else r for r in records]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
    return run


def _gate_refuses(monkeypatch, capsys, run: Path, expected: str) -> str:
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.iterdir()}
    code, out, err = invoke(monkeypatch, capsys, "gate", str(run))
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.iterdir()} == before
    return err


@pytest.mark.parametrize("schema", [1, 3])
@pytest.mark.parametrize("options", ["nonsense", {"backend": "nonsense"}], ids=["string", "mapping"])
def test_an_unknown_attention_backend_in_a_record_is_refused(tmp_path, monkeypatch, capsys, schema, options):
    run = _run_with(
        tmp_path,
        "attn-native",
        schema_version=schema,
        features={"attention_backend": options},
        feature_classes={"attention_backend": "lossless"},
    )
    err = _gate_refuses(monkeypatch, capsys, run, "unknown attention backend 'nonsense'. Allowed: ")
    assert "results.jsonl:3: features.attention_backend" in err, err


def test_an_unknown_option_of_a_feature_in_a_record_is_refused(tmp_path, monkeypatch, capsys):
    run = _run_with(
        tmp_path,
        "cache-dit-0.5",
        features={"cache_dit": {"residual_diff_treshold": 0.5}},
        feature_classes={"cache_dit": "lossy"},
    )
    _gate_refuses(monkeypatch, capsys, run, "features.cache_dit.residual_diff_treshold: unknown option")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("outputs_file", "/etc/passwd"),
        ("outputs_file", "../x.npz"),
        ("outputs_file", "outputs/../../x.npz"),
        ("outputs_file", ""),
        ("outputs_file", "outputs\\..\\..\\x.npz"),
        ("images", ["images/ok.png", "/etc/passwd"]),
        ("images", ["../../etc/passwd"]),
    ],
)
def test_a_record_may_name_files_inside_its_run_directory_only(tmp_path, monkeypatch, capsys, key, value):
    run = _run_with(tmp_path, "cache-dit-0.5", **{key: value})
    shown = f"images[{len(value) - 1}]" if key == "images" else key
    _gate_refuses(monkeypatch, capsys, run, f"'{shown}' should be a path inside the run directory")


def test_the_committed_runs_paths_are_inside_their_run(tmp_path, monkeypatch, capsys):
    """The rule refuses only what leaves the run: the committed quickstart's records still gate."""
    run = _run_with(tmp_path, "baseline")
    code, _, err = invoke(monkeypatch, capsys, "gate", str(run))
    assert code in (0, 1) and "should be a path inside" not in err, err
