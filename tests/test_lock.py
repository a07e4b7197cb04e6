"""A run directory is owned by one sweep at a time: a live owner refuses a second sweep or resume (exit 2,
naming its PID and host); the lock of a killed sweep is stale and taken over by --resume."""

from __future__ import annotations

import json
import os
import socket
from collections import Counter

import yaml
from conftest import invoke, small_profile

from accel.profile import parse_profile
from accel.results import read_results
from accel.sweep.lock import LOCK_FILE, RunLock
from accel.sweep.runner import run_sweep


def _profile(**measure):
    profile = small_profile(["tiny-flux"], [{"name": "v", "features": {"vae_use_slicing": True}}])
    profile["measure"] = {**profile["measure"], "noise_floor": False, **measure}
    return profile


def test_a_live_sweep_owns_its_run_directory(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_profile()))
    run = tmp_path / "run"
    run.mkdir()
    resolved = parse_profile(_profile()).model_dump(mode="json")
    (run / "profile.resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    owner = f"pid {os.getpid()} on host {socket.gethostname()}"
    with RunLock(run):  # another sweep, alive, holds the directory
        for args in (("sweep", str(path), "--out", str(run)), ("sweep", "--resume", str(run))):
            code, _, err = invoke(monkeypatch, capsys, *args)
            assert code == 2 and err.count("\n") == 1, err
            assert err.startswith(f"error: {run}: in use by another sweep: {owner} (")
            assert f"continue with 'omni-accel sweep --resume {run}'" in err
    assert not (run / "results.jsonl").exists()
    assert not (run / LOCK_FILE).exists()  # released with its owner


def test_a_stale_lock_is_taken_over_by_resume_and_no_cell_is_recorded_twice(tmp_path, capsys):
    profile = parse_profile(_profile())
    run_sweep(profile, "p.yaml", tmp_path, show_progress=False)
    assert not (tmp_path / LOCK_FILE).exists()
    results = tmp_path / "results.jsonl"
    results.write_text(results.read_text().splitlines(keepends=True)[0])  # killed before 'v' was recorded
    dead = {"pid": 2**22 + 17, "host": socket.gethostname(), "started": 0, "command": "omni-accel sweep p.yaml"}
    (tmp_path / LOCK_FILE).write_text(json.dumps(dead))  # left by the killed sweep: nobody holds its flock
    capsys.readouterr()
    run_sweep(profile, "p.yaml", tmp_path, show_progress=False, resume=True)
    err = capsys.readouterr().err
    assert f"note: {tmp_path}: taking over the lock of a sweep that is no longer running: pid {2**22 + 17}" in err
    counts = Counter(r["variant"] for r in read_results(tmp_path))
    assert counts == {"baseline": 1, "v": 1}
    assert not (tmp_path / LOCK_FILE).exists()
