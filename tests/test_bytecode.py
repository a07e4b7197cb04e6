"""accel.bytecode: what `make sweep`'s setup byte-compiles instead of pip, and that it fails loudly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from accel import bytecode


def test_the_imported_modules_get_their_bytecode_even_where_writing_it_is_switched_off(tmp_path, monkeypatch):
    (tmp_path / "first_group_module.py").write_text("VALUE = 1\n")
    (tmp_path / "second_group_module.py").write_text("VALUE = 2\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as on our machines
    monkeypatch.setattr(bytecode, "IMPORT_GROUPS", (("first_group_module",), ("second_group_module",)))
    monkeypatch.setattr(bytecode, "COMPILE_ACCEL", "pass")

    assert bytecode.main() == 0
    for name in ("first_group_module", "second_group_module"):
        cached = importlib.util.cache_from_source(str(tmp_path / f"{name}.py"))
        assert Path(cached).exists(), name


def test_a_failed_import_fails_the_setup_naming_the_group(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bytecode, "IMPORT_GROUPS", (("json",), ("no_such_module_here",)))
    monkeypatch.setattr(bytecode, "COMPILE_ACCEL", "pass")

    assert bytecode.main() == 1
    error = capsys.readouterr().err
    assert "importing no_such_module_here failed" in error
    assert "ModuleNotFoundError" in error


def test_the_groups_name_the_preload_and_modules_that_exist():
    # The forkserver's preload is what every worker forks with: it must be compiled first of all.
    assert bytecode.IMPORT_GROUPS[0] == ("accel.sweep.preload",)
    for group in bytecode.IMPORT_GROUPS:
        for name in group:
            assert importlib.util.find_spec(name) is not None, name
