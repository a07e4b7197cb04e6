"""The environment a run was measured in: recorded with every results file."""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from accel.cpu_time import cpu_model

PACKAGES = (
    "torch", "diffusers", "transformers", "accelerate", "cache-dit", "torchao", "torchmetrics",
    "flash-attn", "xformers", "sageattention", "omni-accel",
)  # fmt: skip


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# The source tree whose commit a run records (a checkout; an installed package has no .git above it).
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git_commit(output_dir: Path | None = None) -> str | None:
    """HEAD, with ``+modified`` when tracked files differ from it (that commit alone cannot reproduce the run).
    Files under ``output_dir`` do not count: regenerating a committed report (``make report``) replaces its
    tracked files, and that is the run's output, not a change to what it ran."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None
    pathspec = ["."]
    if output_dir is not None:
        with contextlib.suppress(ValueError):  # outside the source tree: nothing to exclude
            pathspec.append(f":(exclude){output_dir.resolve().relative_to(SOURCE_ROOT.resolve())}")
    if _git("status", "--porcelain", "--untracked-files=no", "--", *pathspec):
        commit += "+modified"
    return commit


def device_name(device: str) -> str:
    """What a performance baseline matches on: the GPU's name, or the CPU model for ``cpu``."""
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        return torch.cuda.get_device_name(index)
    return cpu_model()


CPU_PEAKS_KEY = "cpu_peak_flops"


def measure_cpu_peaks(dtypes: Iterable[str], threads: int | None = None) -> dict[str, Any]:
    """The CPU's peak FLOP/s per dtype, measured once for a sweep with ``threads`` torch threads (unset: the
    current count), with the host and the thread count it was measured on."""
    import socket

    from accel.measure.flops import measure_cpu_peak
    from accel.measure.timing import torch_threads

    with torch_threads(threads) as used:
        flops = {dtype: measure_cpu_peak(dtype) for dtype in sorted(set(dtypes))}
    return {"host": socket.gethostname(), "threads": used, "flops": flops}


def recorded_cpu_peak(peaks: dict[str, Any] | None, dtype: str) -> float | None:
    """The peak the sweep measured (``peaks``, as in ``environment.json``) for this dtype, when it was measured on
    this host with the thread count this process runs with; otherwise None (the cell measures its own)."""
    import socket

    import torch

    peaks = peaks or {}
    if peaks.get("host") != socket.gethostname():
        return None  # another host (a Ray worker): its own peak, measured in the cell
    if peaks.get("threads") != torch.get_num_threads():
        return None  # measured with another thread count: not this cell's peak
    return (peaks.get("flops") or {}).get(dtype)


def capture(profile_fingerprint: str | None = None, output_dir: Path | None = None) -> dict[str, Any]:
    """Package versions (None when absent), device, CPU, git commit (its ``+modified`` ignores the run's own
    ``output_dir``) and the profile hash."""
    import os

    import torch

    cuda = torch.cuda.is_available()
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda if cuda else None,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "git_commit": _git_commit(output_dir),
        "profile_fingerprint": profile_fingerprint,
    }
