"""Forked workers and CUDA: the forkserver preloads torch and diffusers only when that import leaves the CUDA
driver uninitialised (a fork of a process that ran cuInit cannot use the GPU)."""

from __future__ import annotations

import subprocess
import sys

from accel.sweep import workers


def test_no_cuda_driver_means_no_probe_and_preload(monkeypatch):
    monkeypatch.setattr(workers, "cuda_driver_initialized", lambda: None)

    def no_subprocess(*args, **kwargs):
        raise AssertionError("no probe on a host without a CUDA driver")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    assert workers.preload_is_fork_safe() is True


def test_this_host_has_no_cuda_driver_or_an_uninitialised_one():
    # On CI (no GPU) there is no libcuda: None. On a GPU host, this test process has not initialised it yet
    # unless an earlier test used CUDA; either way the answer is a bool or None, never an exception.
    assert workers.cuda_driver_initialized() in (None, True, False)


def _completed(stdout: str, returncode: int = 0) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(args=[], returncode=returncode, stdout=stdout, stderr="")


def test_the_probe_decides_on_a_cuda_host(monkeypatch):
    monkeypatch.setattr(workers, "cuda_driver_initialized", lambda: False)
    answers = iter([_completed("False\n"), _completed("noise\nTrue\n"), _completed("", returncode=1)])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: next(answers))
    assert workers.preload_is_fork_safe() is True  # the import leaves the driver alone: preload
    assert workers.preload_is_fork_safe() is False  # the import ran cuInit: workers import after the fork
    assert workers.preload_is_fork_safe() is False  # the probe failed: do not risk it


def test_the_probe_timing_out_means_no_preload(monkeypatch):
    monkeypatch.setattr(workers, "cuda_driver_initialized", lambda: False)

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(cmd="probe", timeout=1)

    monkeypatch.setattr(subprocess, "run", hang)
    assert workers.preload_is_fork_safe(timeout_s=1) is False


def test_the_real_probe_runs_the_preload_import():
    # The probe's command is valid Python that imports the preload and prints the driver state.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import {workers.PRELOAD_MODULE}; from accel.sweep.workers import cuda_driver_initialized as c; "
            "print(c())",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] in ("None", "False", "True")


def test_the_preload_answers_accelerator_checks_through_nvml_while_importing_and_restores_them():
    import torch

    from accel.sweep.preload import accelerator_checks_through_nvml

    before = torch.accelerator.is_available, torch.accelerator.current_accelerator
    with accelerator_checks_through_nvml():
        assert torch.accelerator.is_available is torch.cuda.is_available
        expected = torch.device("cuda") if torch.cuda.is_available() else None
        assert torch.accelerator.current_accelerator() == expected
    assert (torch.accelerator.is_available, torch.accelerator.current_accelerator) == before
