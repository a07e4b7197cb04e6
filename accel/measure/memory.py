"""Peak memory during a region: device memory on CUDA, resident host memory (RSS) everywhere, with nothing
running beside the region.

The host peak comes from the kernel's own high-water mark: entering the region writes ``5`` to
``/proc/self/clear_refs`` (which resets ``VmHWM`` to the current RSS, Linux 4.0+) and leaving it reads
``VmHWM`` from ``/proc/self/status``. Nothing samples during the region, so a timed call inside it runs as it
would alone. (The harness used to sample the process tree from a thread every 5 ms: on mini-flux that thread
made the headline call 1.42x slower, paired median over 15 rounds.) Child processes, which a pipeline call
does not start, are read at the region's two ends.

Where the kernel cannot give a region's peak (not Linux, or ``clear_refs`` not writable), ``PeakMemory``
falls back to a sampling thread and says so in ``method``; the sweep then takes memory in an untimed call of
its own instead of around the timed ones (``accel.sweep.timed``). CUDA's peak statistics cost nothing and are
always read.

A cell's memory (``own_peak``, the record's ``cell_memory_bytes``) counts the same things from a like start
wherever the cell runs, so that cells compare with each other:

- its start (``resident_at_start``) is what the process holds just before the cell loads its pipeline, after
  a garbage collection and ``malloc_trim``: what earlier cells left (``executor: inline``) is not the cell's;
- before that start the process is settled for the cell's model (``accel.sweep.settle``): one unaccelerated
  load and call of the model and workload, freed, pays the one-time costs of the model's first use in a
  process (the modules its pipeline imports, allocator arenas, per-shape kernel caches). Without it the same
  tiny-flux baseline read 27 MiB as a worker's first cell and 2 MiB as its second;
- its end is the peak of its headline calls (``accel.sweep.timed.measure_alone``), with the harness's stage
  pass between them excluded (``PeakMemory.excluded``): its hooks are the harness's, not the cell's.

So it is the pipeline the cell loaded, what its features hold, and its calls' working memory. The same
configuration then reads the same as a process's first cell and as a later one within
``SAME_CELL_TOLERANCE_BYTES`` on the CPU (tests/test_memory.py). A parallel cell's memory is the sum of its
ranks', each rank a process measured the same way and shown (``accel.sweep.ranks``): on the CPU every rank
holds the whole pipeline, so it is at least the one-rank baseline's. On CUDA the measure is the device's
allocated bytes, which none of these one-time host costs reach (``accel.sweep.settle`` does nothing there).
What a feature's library costs on its first use in a process (torch.distributed for the ranks, inductor for
compile) stays the cell's: it is what the feature costs there.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
# What ``MemoryPeaks.method`` says, and so the record's ``memory_method``.
KERNEL_HIGH_WATER_MARK = "kernel high-water mark (clear_refs 5 + VmHWM), nothing sampled during the region"
SAMPLED = "sampled by a thread every 5 ms (no kernel high-water mark here)"


def _children_rss(process: psutil.Process) -> int:
    total = 0
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def _tree_rss(process: psutil.Process) -> int:
    return process.memory_info().rss + _children_rss(process)


def _high_water_mark() -> int | None:
    """This process's peak RSS since the last reset (``VmHWM``), in bytes; None where the kernel has none."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+)\s+kB", STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def reset_high_water_mark() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS; False where the kernel does not allow it."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _high_water_mark() is not None


def region_peak_available() -> bool:
    """Whether ``PeakMemory`` can measure a region without sampling (the kernel's resettable high-water mark)."""
    return reset_high_water_mark()


@dataclass
class MemoryPeaks:
    """Peaks over a region, in bytes. ``device_*`` are None off CUDA; ``method`` says how the host peak was got."""

    host_rss_peak: int = 0
    device_allocated_peak: int | None = None
    device_reserved_peak: int | None = None
    method: str = KERNEL_HIGH_WATER_MARK

    def to_dict(self) -> dict[str, int | str | None]:
        return asdict(self)


def process_pss() -> int | None:
    """Proportional set size of the process tree (shared pages split between sharers); None if unknown."""
    process = psutil.Process()
    try:
        total = process.memory_full_info().pss
        for child in process.children(recursive=True):
            total += child.memory_full_info().pss
        return total
    except (psutil.Error, AttributeError):
        return None


class PeakMemory:
    """Context manager measuring peak host RSS and, on CUDA, peak allocated/reserved device memory.

    ``sample=False`` (the default) uses the kernel's high-water mark where it can (``method`` says which was
    used); ``sample=True`` forces the sampling thread (for tests of the fallback).
    """

    def __init__(self, device: str, interval_s: float = 0.005, sample: bool = False) -> None:
        self.device = device
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
        self._force_sample = sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peaks.host_rss_peak = max(self.peaks.host_rss_peak, _tree_rss(self._process))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.peaks.host_rss_peak = _tree_rss(self._process)
        if not self._force_sample and reset_high_water_mark():
            self.peaks.method = KERNEL_HIGH_WATER_MARK
        else:
            self.peaks.method = SAMPLED
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _fold_host_peak(self) -> None:
        """Fold the host's peak so far (the kernel's high-water mark, or RSS now) into ``host_rss_peak``."""
        end = _tree_rss(self._process)
        if self.peaks.method == KERNEL_HIGH_WATER_MARK:
            own = _high_water_mark() or 0
            end = max(end, own + _children_rss(self._process))
        self.peaks.host_rss_peak = max(self.peaks.host_rss_peak, end)

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """A stretch inside the region whose host peak is not the region's (the harness's own stage pass): the
        peak so far is kept, and when the stretch ends what it freed is returned to the system (garbage
        collection, ``malloc_trim``) and the kernel's high-water mark reset. With the sampling
        thread (no kernel mark) the stretch is still sampled; on CUDA the device's peak statistics include it."""
        if self.peaks.method != KERNEL_HIGH_WATER_MARK:
            yield
            return
        self._fold_host_peak()
        try:
            yield
        finally:
            import gc

            gc.collect()  # what the stretch freed is given back before the mark restarts from the RSS
            _return_free_heap()
            reset_high_water_mark()

    def __exit__(self, *exc: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._fold_host_peak()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            self.peaks.device_allocated_peak = torch.cuda.max_memory_allocated()
            self.peaks.device_reserved_peak = torch.cuda.max_memory_reserved()


# What the record's ``cell_memory_method`` says: how a cell's own memory was got from its peak.
FROM_CELL_START = (
    "the timed calls' peak (the stage pass's excluded) minus what was resident when the cell started, in a process "
    "settled for its model (memory_settled) and with garbage collected and free heap returned to the system first "
    "(memory_at_start): what an earlier cell left, or the model's first use in the process, is not the cell's"
)
# How close the same configuration reads as a process's first cell and as a later one, on the CPU (host RSS):
# what the allocator keeps or returns from one cell to the next. Measured on the zoo's tiny builds, 32x32 and
# 64x64, settled: tiny-flux within 0.6 MiB, tiny-wan and tiny-sd3 within 3.4 MiB (unsettled: 27 MiB vs 2 MiB).
SAME_CELL_TOLERANCE_BYTES = 4 * 2**20


@dataclass
class Resident:
    """What a process holds when a cell starts, in bytes: host RSS of its tree, and device memory allocated on
    CUDA (None elsewhere)."""

    host_rss: int
    device_allocated: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return asdict(self)


def _return_free_heap() -> bool:
    """Ask glibc to give freed heap pages back to the system (``malloc_trim(0)``): pages an earlier cell freed
    but the allocator kept would otherwise be in the start's RSS and be reused without the RSS growing. False
    where there is no glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def resident_at_start(device: str) -> Resident:
    """What this process holds now, after a garbage collection and ``malloc_trim``: a cell's memory is its peak
    minus this (``own_peak``), so that what earlier cells in the process left (``executor: inline``) is not
    counted as the cell's."""
    import gc

    gc.collect()
    _return_free_heap()
    allocated = None
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        allocated = torch.cuda.memory_allocated()
    return Resident(_tree_rss(psutil.Process()), allocated)


def own_peak(peaks: MemoryPeaks, start: Resident) -> int:
    """A cell's own peak memory in bytes: the device's allocated peak above what was allocated at the cell's
    start on CUDA, else the host RSS peak above the start's RSS (never below zero)."""
    if peaks.device_allocated_peak is not None:
        return max(0, peaks.device_allocated_peak - (start.device_allocated or 0))
    return max(0, peaks.host_rss_peak - start.host_rss)


def module_weight_bytes(module: Any) -> int:
    """Bytes of a module's parameters and buffers."""
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)
