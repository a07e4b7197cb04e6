"""What else ran beside a timed window: CPU time other processes used, the load average, our threads.

A cell timed while another process busies a core measures slower than it would alone. The timer cannot tell,
but the kernel's counters can: the CPU time the whole machine spent minus what this process tree spent, over
the same wall time, is how many cores something else kept busy. On a virtual machine the host may also take
cores away (steal time, counted in that figure and shown on its own as ``steal_cores``). Recorded with every
cell, so a reader can see that a number was taken on a busy machine.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from accel.cpu_time import machine_busy_seconds, machine_steal_seconds

# Other processes' average CPU use above which a timed window counts as shared (in cores).
CONTENDED_CORES = 0.25


def _tree_cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of a process and its live children."""
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@dataclass(frozen=True)
class Contention:
    """Measured over one timed window. ``other_cores``: cores other processes (or, on a virtual machine, the
    host's steal) kept busy on average; ``steal_cores``: the part of it the hypervisor took."""

    wall_s: float
    own_cores: float
    other_cores: float
    contended: bool
    load_average_1m: float | None
    steal_cores: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ContentionMeter:
    """``with ContentionMeter() as meter: ...`` then ``meter.result``."""

    def __init__(self) -> None:
        self.result: Contention | None = None
        self._process = psutil.Process()

    def __enter__(self) -> ContentionMeter:
        self._wall = time.perf_counter()
        self._busy = machine_busy_seconds()
        self._steal = machine_steal_seconds()
        self._own = _tree_cpu_seconds(self._process)
        return self

    def __exit__(self, *exc: Any) -> None:
        wall = time.perf_counter() - self._wall
        busy = machine_busy_seconds() - self._busy
        steal = machine_steal_seconds() - self._steal
        own = _tree_cpu_seconds(self._process) - self._own
        cores = [max(0.0, seconds) / wall if wall > 0 else 0.0 for seconds in (own, busy - own, steal)]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.result = Contention(wall, cores[0], cores[1], cores[1] > CONTENDED_CORES, load, cores[2])


def execution_context(device: str) -> dict[str, Any]:
    """Where and how a cell ran: node, process, torch's thread counts, the device."""
    import torch

    return {
        "node": socket.gethostname(),
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "device": device,
    }


def timing_lock_path() -> str:
    """The per-node lock file that serialises timing phases under ``measure.exclusive`` (one per user)."""
    return os.path.join(tempfile.gettempdir(), f"omni-accel-timing-{os.getuid()}.lock")


@contextmanager
def timing_window(exclusive: bool, window: dict[str, Any]) -> Iterator[None]:
    """Around a cell's timing phase: fills ``window`` with its wall-clock ``timed_start``/``timed_end`` (epoch
    seconds). With ``exclusive``, holds an ``flock`` on the node's timing lock first, so no two cells on this node
    (any executor, any sweep of this user) time at once; ``lock_wait_s`` says how long it waited."""
    import fcntl

    fd = None
    if exclusive:
        asked = time.time()
        fd = os.open(timing_lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        window["lock_wait_s"] = time.time() - asked
    window["exclusive"] = exclusive
    window["timed_start"] = time.time()
    try:
        yield
    finally:
        window["timed_end"] = time.time()
        if fd is not None:
            os.close(fd)  # closing drops the lock
