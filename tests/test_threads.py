"""``measure.threads``: the torch threads a cell runs with, the CPU peak measured with as many, the parent's
own count left as it was."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from conftest import small_profile

from accel import env
from accel.errors import ConfigError
from accel.measure.timing import torch_threads
from accel.profile import parse_profile
from accel.sweep.runner import run_sweep


@pytest.fixture
def two_threads():
    """The machine may have one core: the tests need a count to move away from."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def test_torch_threads_sets_the_count_inside_and_restores_it(two_threads):
    with torch_threads(1) as used:
        assert used == torch.get_num_threads() == 1
    assert torch.get_num_threads() == two_threads
    with torch_threads(None) as used:  # unset: as they are
        assert used == two_threads
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("a failing block")
    assert torch.get_num_threads() == two_threads


def test_a_cell_runs_with_the_profiles_thread_count_and_its_peak_matches(tmp_path, two_threads):
    data = small_profile(variants=[{"name": "same", "features": {}}])
    data["measure"].update(threads=1, noise_floor=False)
    run = run_sweep(parse_profile(data), "t.yaml", tmp_path, show_progress=False)
    assert [r["status"] for r in run.records] == ["ok", "ok"]
    assert {r["timing"]["threads"] for r in run.records} == {1}
    assert torch.get_num_threads() == two_threads  # the inline executor's parent keeps its own
    environment = json.loads((tmp_path / "environment.json").read_text())
    assert environment[env.CPU_PEAKS_KEY]["threads"] == 1  # MFU's peak is one thread's, as the cells ran


def test_the_sweeps_cpu_peak_says_its_thread_count_and_another_count_does_not_use_it(two_threads):
    peaks = env.measure_cpu_peaks(["float32"], threads=1)
    assert peaks["threads"] == 1 and peaks["host"] == socket.gethostname()
    assert torch.get_num_threads() == two_threads
    with torch_threads(1):
        assert env.recorded_cpu_peak(peaks, "float32") == peaks["flops"]["float32"]
    assert env.recorded_cpu_peak(peaks, "float32") is None  # two threads: this peak is not theirs


def test_threads_must_be_a_positive_count():
    data = small_profile()
    data["measure"]["threads"] = 0
    with pytest.raises(ConfigError, match=r"measure\.threads"):
        parse_profile(data, "p.yaml")


def test_more_threads_than_cores_is_refused_before_anything_runs(tmp_path):
    import os

    data = small_profile()
    data["measure"]["threads"] = (os.cpu_count() or 1) + 1
    with pytest.raises(ConfigError, match=r"t\.yaml: measure\.threads: \d+ is more than this machine's \d+ core"):
        run_sweep(parse_profile(data), "t.yaml", tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_resumed_sweep_keeps_its_cpu_peak_only_for_the_same_thread_count(tmp_path, two_threads):
    from accel.sweep.runner import cpu_peaks

    data = small_profile()
    data["measure"]["threads"] = 1
    profile = parse_profile(data)
    kept = {"host": socket.gethostname(), "threads": 1, "flops": {"float32": 1.0}}
    (tmp_path / "environment.json").write_text(json.dumps({env.CPU_PEAKS_KEY: kept}))
    assert cpu_peaks(profile, tmp_path, resume=True) == kept
    (tmp_path / "environment.json").write_text(json.dumps({env.CPU_PEAKS_KEY: {**kept, "threads": 2}}))
    measured = cpu_peaks(profile, tmp_path, resume=True)
    assert measured["threads"] == 1 and measured["flops"]["float32"] != 1.0  # measured again, with one thread
