"""Device-synchronised wall-clock timing and the statistics reported for it.

On a GPU the device is synchronised before the clock is read at both ends, so asynchronous kernels are
counted where they run; on a CPU the monotonic ``perf_counter`` is exact as is.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass


def synchronize(device: str) -> None:
    """Wait for queued device work; a no-op on the CPU."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def align_ranks() -> None:
    """Wait until every rank of the default ``torch.distributed`` process group is here (a barrier); nothing
    without one or with a single rank. Called right before a multi-rank call's clock starts: rank 0's timed call
    waits at its first collective for the slowest rank, so whatever another rank ran just before would otherwise
    be in rank 0's number, and the harness runs more there than a bare loop does (its meters and memory reads
    walk /proc, every process of the host: tens of milliseconds, not the same on each rank). The barrier itself
    is outside the clock."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def as_rank0_has_it(code: int) -> int:
    """``code`` as rank 0 has it, on every rank of the default ``torch.distributed`` process group (a
    broadcast); ``code`` itself without one or with a single rank. The ranks of a parallel cell time their calls
    side by side and each would otherwise decide from its own clock when to stop drawing pairs: a rank that
    stopped while another drew on left it waiting in a collective until the supervisor killed the cell."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return code
    import torch

    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    shared = torch.tensor([code], dtype=torch.int64, device=device)
    dist.broadcast(shared, src=0)
    return int(shared.item())


@contextmanager
def timed(device: str, sink: list[float]) -> Iterator[None]:
    """Append the synchronised duration of the block, in seconds, to ``sink``."""
    synchronize(device)
    start = time.perf_counter()
    try:
        yield
    finally:
        synchronize(device)
        sink.append(time.perf_counter() - start)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run the block with ``threads`` torch intra-op threads (unset: as they are), restored afterwards; yields
    the count the block runs with."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class TimingStats:
    """Summary of repeated timings, in seconds; ``cv`` is stdev / mean (0 for one sample)."""

    n: int
    median: float
    mean: float
    p90: float
    min: float
    max: float
    cv: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(samples: list[float]) -> TimingStats:
    """Statistics of a non-empty list of durations."""
    if not samples:
        raise ValueError("no timing samples")
    ordered = sorted(samples)
    mean = statistics.fmean(ordered)
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    p90_index = min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))
    return TimingStats(
        n=len(ordered),
        median=statistics.median(ordered),
        mean=mean,
        p90=ordered[p90_index],
        min=ordered[0],
        max=ordered[-1],
        cv=stdev / mean if mean > 0 else 0.0,
    )
