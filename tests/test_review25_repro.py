"""Reproductions from the hostile review on branch review-25 (issue 25): inputs that should be refused or
judged and are not. Each test fails on a1f9c2d; the fix is the lead's call (some are policy questions, said so)."""

from __future__ import annotations

import json

import pytest
from conftest import invoke, small_profile


def _errors(monkeypatch, capsys, *args: str) -> tuple[int, list[str]]:
    code, _, err = invoke(monkeypatch, capsys, *args)
    return code, err.strip().splitlines()


@pytest.mark.parametrize(
    "section, key, value",
    [
        # 1048576000 is a multiple of 16: the resolution-factor check lets it through, and nothing bounds it above
        ("workload", "height", 1048576000),
        ("workload", "width", 1048576000),
        ("workload", "num_images_per_prompt", 100_000_000),
    ],
)
def test_plan_refuses_a_workload_no_cell_can_run(section, key, value, write_profile, monkeypatch, capsys):
    """Issue 25 asks that values checkable before any cell be checked at plan time, with bounds, as steps (<= 10000)
    and seeds already are; an unbounded height or batch is found cell by cell (or by the OOM killer) instead."""
    profile = small_profile()
    profile[section][key] = value
    code, lines = _errors(monkeypatch, capsys, "plan", str(write_profile(profile)))
    assert code == 2 and len(lines) == 1, (code, lines)
    assert f"{section}.{key}" in lines[0]


def _measured(tmp_path):
    from synthetic import results

    run = tmp_path / "run"
    run.mkdir()
    return run, results()


def test_a_results_record_with_a_key_written_twice_is_refused(tmp_path, monkeypatch, capsys):
    """Every YAML file refuses a key written twice; a results line does not: a hand-edited record
    `{..., "status": "ok", ..., "status": "failed"}` is silently read with the last value."""
    run, records = _measured(tmp_path)
    lines = [json.dumps(r) for r in records]
    lines[2] = lines[2][:-1] + ', "status": "ok"}'
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    before = (run / "results.jsonl").read_bytes()
    code, err = _errors(monkeypatch, capsys, "gate", str(run))
    assert code == 2 and len(err) == 1 and "duplicate key 'status'" in err[0], (code, err)
    assert (run / "results.jsonl").read_bytes() == before


def test_a_gate_over_a_run_where_nothing_ran_does_not_pass(tmp_path, monkeypatch, capsys):
    """Every record, the baselines and noise floors included, says 'unsupported' in this environment: the gate
    printed "0 passed, 0 failed, N skipped" and exited 0, so a CI job whose runner lost its GPU (or a hand-edited
    file) was green with nothing measured. Decided: such a run fails (exit 1) with a line saying so and why."""
    run, records = _measured(tmp_path)
    for r in records:
        r.update(status="unsupported", unsupported_scope="environment", error="needs CUDA")
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert code == 1, out
    assert "0 passed, 0 failed, 20 skipped" in out
    first = records[0]
    assert (
        f"nothing was measured: none of the 20 record(s) ran, the baselines included; the first, "
        f"{first['model']}/{first['variant']}, is unsupported: needs CUDA" in out
    ), out
    assert '<testcase classname="omni-accel" name="nothing-measured">' in (run / "gate.junit.xml").read_text()


def test_the_plugin_fails_an_interrupted_run_as_the_gate_does(pytester, tmp_path):
    """`omni-accel gate` fails a planned cell without a record (cells.planned.json); the plugin's --accel-results
    used to build its items from the records alone, so the same interrupted run was green under pytest."""
    run, records = _measured(tmp_path)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    planned = [[r["model"], r["variant"]] for r in records] + [["flux", "never-measured"]]
    (run / "cells.planned.json").write_text(json.dumps(planned))
    result = pytester.runpytest_subprocess("--accel-results", str(run), "--accel-only")
    assert "never-measured" in result.stdout.str() and result.ret == 1
