"""CPU time the whole machine spent working: the one counter both contention measurements read; and the CPU's
model name, which the environment record and the trained weights' manifests both write.

The lowest layer (no accel imports): the sweep's contention meter (``accel.measure.contention``) and
mini-flux's training thread picker (``accel.zoo.mini_flux``) sit in different layers and share it, as the
environment record (``accel.env``) and ``accel.zoo.trained_weights`` share ``cpu_model``.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import psutil

# psutil.cpu_times() fields that are work, not idle time or I/O wait (absent fields count as 0 on other OSes).
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def busy_seconds(times: Any) -> float:
    """CPU seconds spent outside idle and iowait, for a ``psutil.cpu_times()`` result."""
    return sum(getattr(times, name, 0.0) for name in BUSY_FIELDS)


def machine_busy_seconds() -> float:
    """CPU seconds all cores of this machine have spent working since boot."""
    return busy_seconds(psutil.cpu_times())


def machine_steal_seconds() -> float:
    """CPU seconds the hypervisor has taken from this virtual machine's cores since boot (0 where the kernel keeps
    no such count). Steal is time the VM wanted to run and the host ran someone else: it slows a timed call
    without any process of this machine being busy."""
    return float(getattr(psutil.cpu_times(), "steal", 0.0))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's, else what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
