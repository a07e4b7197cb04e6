"""Shared fixtures: a session-wide zoo directory and small profiles for fast sweeps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# One zoo for the whole session (and the forkserver workers it starts), unless the caller set one.
os.environ.setdefault("OMNI_ACCEL_ZOO_DIR", str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "zoo"))
os.environ["HF_HUB_OFFLINE"] = "1"

from accel.sweep.preload import quiet_libraries

quiet_libraries()


def small_profile(models: list[str] | None = None, variants: list[dict[str, Any]] | None = None, **workload: Any):
    """A profile dict with a short workload (1 prompt, 1 seed, 2 steps) for fast sweeps."""
    return {
        "name": "test",
        "models": [{"name": m, "source": m} for m in (models or ["tiny-flux"])],
        "workload": {"prompts": ["a red fox"], "seeds": [0], "steps": 2, "height": 64, "width": 64, **workload},
        "variants": variants or [],
        # One look at 6 pairs (no sequential sampling beyond it): fast and the same in every run.
        "measure": {"warmup": 0, "repeats": 1, "executor": "inline", "pairs": 6, "max_pairs": 6},
    }


def profile_with(**changes: Any) -> dict[str, Any]:
    """``small_profile()`` with ``section__key=value`` (one key of a section) or ``section=value`` changes."""
    profile = small_profile()
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            profile[section][key] = value
        else:
            profile[section] = value
    return profile


def one_error_line(code: int, err: str, pattern: str) -> str:
    """Assert what every bad input promises (exit 2, one line starting ``error: `` that matches ``pattern``,
    no traceback) and return that line."""
    import re

    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and re.search(pattern, lines[0]), lines[0]
    return lines[0]


@pytest.fixture
def write_profile(tmp_path):
    """Write a profile (dict or raw text) to a YAML file and return its path."""
    import yaml

    def write(content: Any, name: str = "profile.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return path

    return write


def invoke(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Call the console entry point in-process: (exit code, stdout, stderr)."""
    from accel.cli import main

    monkeypatch.setattr(sys, "argv", ["omni-accel", *args])
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess (as a user would) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "accel", *args], capture_output=True, text=True, cwd=cwd, timeout=600, check=False
    )
