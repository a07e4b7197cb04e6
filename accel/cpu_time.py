"""CPU time the whole machine spent working: the one counter both contention measurements read.

The lowest layer (no accel imports): the sweep's contention meter (``accel.measure.contention``) and
mini-flux's training thread picker (``accel.zoo.mini_flux``) sit in different layers and share it.
"""

from __future__ import annotations

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
