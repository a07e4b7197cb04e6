"""The curated mutation check itself: the list is well formed, points at code that exists, and the runner
calls a missing text an error, never a kill (``make mutation`` runs the mutations; this only checks the list)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mutation  # noqa: E402  (benchmarks/ is not a package)


def test_the_curated_list_covers_the_reviews_faults_and_every_judging_area():
    mutations = mutation.load_mutations()
    assert len(mutations) >= 25
    names = {m.name.split("-")[0] for m in mutations}
    assert {"F1", "F2", "F3", "F4", "F5a", "F5b", "F7", "F8"} <= names
    files = {m.file for m in mutations}
    judging = ("gate/judge.py", "gate/limits.py", "gate/evidence.py")  # the gate's verdicts, limits and evidence
    sweep = ("cell.py", "timed.py", "collect.py", "compare.py")  # the phase order, ABBA, stability, claims
    for module in (*judging, "speedup.py", "parity.py", "adherence.py", *sweep):
        assert any(f.endswith(module) for f in files), module
    for family in ("compile", "cache", "quant", "offload", "vae", "attention"):  # every family's evidence check
        assert f"accel/features/{family}.py" in files, family
    tests = {t for m in mutations for t in m.tests}
    assert "tests/test_judgements.py::test_tea_cache_needs_a_cached_step_on_every_run" in tests  # TeaCache's


def test_every_entry_points_at_text_that_is_in_its_file_once_and_at_tests_that_exist():
    for entry in mutation.load_mutations():
        text = (ROOT / entry.file).read_text(encoding="utf-8")
        assert text.count(entry.old) == 1, f"{entry.name}: old text found {text.count(entry.old)} times"
        for test in entry.tests:
            path, name = test.split("::")[:2]
            assert f"def {name.split('[')[0]}(" in (ROOT / path).read_text(encoding="utf-8"), (entry.name, test)


def test_old_text_not_found_or_found_twice_is_an_error_not_a_kill(tmp_path):
    (tmp_path / "mod.py").write_text("x = 1\nx = 1\n")
    missing = mutation.Mutation("m", "mod.py", "y = 2", "y = 3", ("tests/t.py::test_x",), "why")
    assert mutation.apply_mutation(tmp_path, missing, 10).status == mutation.ERROR
    twice = mutation.Mutation("m", "mod.py", "x = 1", "x = 2", ("tests/t.py::test_x",), "why")
    outcome = mutation.apply_mutation(tmp_path, twice, 10)
    assert outcome.status == mutation.ERROR and "found 2 times" in outcome.detail
    assert (tmp_path / "mod.py").read_text() == "x = 1\nx = 1\n"


def test_a_mutation_is_killed_by_a_failing_test_survives_a_passing_one_and_is_put_back(tmp_path):
    (tmp_path / "mod.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_f.py").write_text("from mod import f\n\n\ndef test_f():\n    assert f() == 1\n")
    killed = mutation.Mutation("k", "mod.py", "return 1", "return 2", ("tests/test_f.py::test_f",), "why")
    assert mutation.apply_mutation(tmp_path, killed, 120).status == mutation.KILLED
    survives = mutation.Mutation("s", "mod.py", "return 1", "return 0 + 1", ("tests/test_f.py::test_f",), "why")
    assert mutation.apply_mutation(tmp_path, survives, 120).status == mutation.SURVIVED
    assert (tmp_path / "mod.py").read_text() == "def f():\n    return 1\n"


@pytest.mark.parametrize("key", ["old", "tests"])
def test_a_malformed_entry_is_refused(tmp_path, key):
    entry = {"name": "m", "file": "f.py", "old": "a", "new": "b", "tests": ["t.py::test"], "why": "w"}
    entry.pop(key)
    path = tmp_path / "m.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"mutations": [entry]}))
    with pytest.raises(SystemExit, match="expected exactly the keys"):
        mutation.load_mutations(path)
