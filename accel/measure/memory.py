"""Peak memory during a region: device memory on CUDA, resident host memory (RSS) everywhere.

The host peak is sampled by a background thread (every ``interval_s``) over the whole process tree, so
it covers the region only, unlike ``ru_maxrss``, which keeps the maximum of the process's whole life.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

import psutil


def _tree_rss(process: psutil.Process) -> int:
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


@dataclass
class MemoryPeaks:
    """Peaks over a region, in bytes. ``device_*`` are None off CUDA."""

    host_rss_peak: int = 0
    device_allocated_peak: int | None = None
    device_reserved_peak: int | None = None

    def to_dict(self) -> dict[str, int | None]:
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
    """Context manager measuring peak host RSS and, on CUDA, peak allocated/reserved device memory."""

    def __init__(self, device: str, interval_s: float = 0.005) -> None:
        self.device = device
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
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
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peaks.host_rss_peak = max(self.peaks.host_rss_peak, _tree_rss(self._process))
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            self.peaks.device_allocated_peak = torch.cuda.max_memory_allocated()
            self.peaks.device_reserved_peak = torch.cuda.max_memory_reserved()


def module_weight_bytes(module: Any) -> int:
    """Bytes of a module's parameters and buffers."""
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)
