"""Quiet by default (issue 41): a fresh ``omni-accel`` run in a subprocess, as a user starts it, prints no
third-party warning before its own first line (torchao's ``_C_mxfp8`` load failure, a deprecated enum and a
transformers notice about torchvision once came first)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml
from conftest import small_profile

THIRD_PARTY = re.compile(r"warn|deprecat|torchvision|_C_mxfp8|site-packages|Traceback", re.IGNORECASE)


def _first_line(args: list[str], cwd) -> str:
    """The first non-empty line of stdout and stderr together; the process is stopped once it has one."""
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # a user's shell: nothing silenced beforehand
    process = subprocess.Popen(
        [sys.executable, "-m", "accel", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip():
                return line
        return ""
    finally:
        process.kill()
        process.wait()


def test_a_fresh_sweep_prints_its_own_line_first(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(small_profile()))
    first = _first_line(["sweep", str(profile), "--out", str(tmp_path / "run"), "--executor", "inline"], tmp_path)
    assert first and not THIRD_PARTY.search(first), first


def test_plan_prints_its_own_line_first(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(small_profile()))
    first = _first_line(["plan", str(profile)], tmp_path)
    assert first.startswith(("tiny-flux/baseline", f"note: {profile}: ")), first  # a cell, or our sampling note
