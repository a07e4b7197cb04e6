"""N ranks against one: a side whose variant has a parallel feature (``context_parallel``, ``tensor_parallel``)
runs as ``world_size`` processes, each one rank, and the comparison reads rank 0's capture.

``ranked_trace(spec, configs, request)`` starts the ranks from a forkserver, joined by a ``torch.distributed``
file store (gloo on the CPU, NCCL on CUDA: rank r on GPU r), and supervises them: a rank that dies, or that is
still running ``FINISH_GRACE_S`` after another finished (waiting in a collective its peer left), or the
timeout, ends them all, naming the rank (``accel.ranksup``, the supervisor the sweep's parallel cells share: the
sweep imports this package for its drift curves, so this module does not import the sweep). Each rank loads
the model, applies the variant's features, makes one uncaptured warm-up
call, then the designated call under ``accel.diverge.capture.Capture`` (hooks on the whole denoiser: its
inputs before the sequence is split, its output after the gather), and sends its trace back. Every rank's
final latents must equal rank 0's, or the side fails (the ranks of one cell produce one image).

The side has no pipeline in this process: ownership by isolation runs the other way round (side A's scheduler,
VAE and denoiser fed side B's inputs: ``accel.diverge.stages``), and the ranked denoiser's blocks are not
bisected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

from accel.diverge.capture import Capture, Trace
from accel.errors import UnavailableError
from accel.ranksup import FINISH_GRACE_S, end_ranks, start_ranks, supervise

DEFAULT_TIMEOUT_S = 600.0


@dataclasses.dataclass(frozen=True)
class _Job:
    """What one rank needs: the model, the variant's features, the request, and how to find its peers."""

    spec: Any
    configs: dict[str, Any]
    request: Any
    backend: str
    store: str
    world_size: int
    timeout_s: float
    threads: int | None


def world_size_of(configs: dict[str, Any] | None) -> int:
    """The ranks a variant's features run on (1: one process)."""
    from accel.features.parallel import variant_world_size

    return variant_world_size(configs or {})


def check_ranks(spec: Any, configs: dict[str, Any], workload: Any, device: str) -> None:
    """Refuse, before any rank starts, what the sweep would refuse for this cell (the feature's reason)."""
    from accel.features.parallel import cell_refused, launch_refused
    from accel.targets.adapter import default_call_kwargs

    call_kwargs = {**default_call_kwargs(spec.source), **spec.call_kwargs}
    for support in (cell_refused(configs, spec, workload, call_kwargs), launch_refused(configs, device)):
        if not support.supported:
            raise UnavailableError(f"--variant: {support.reason}")


def ranked_trace(
    spec: Any, configs: dict[str, Any], request: Any, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[Trace, int]:
    """Run ``request`` on ``spec`` with ``configs`` as its ranks; (rank 0's trace, the number of ranks).

    Raises ``UnavailableError`` when a rank dies, hangs past ``timeout_s``, or ends with other final latents
    than rank 0's."""
    import multiprocessing

    from accel.features.parallel import collective_backend
    from accel.targets.adapter import resolve_device

    size = world_size_of(configs)
    device = resolve_device(spec.device)
    threads = max(1, (os.cpu_count() or 1) // size) if device == "cpu" else None
    with tempfile.TemporaryDirectory(prefix="omni-accel-diverge-") as scratch:
        paths = [os.path.join(scratch, f"rank{rank}.pickle") for rank in range(size)]
        job = _Job(spec, configs, request, collective_backend(device), os.path.join(scratch, "store"), size,
                   timeout_s, threads)  # fmt: skip
        context = multiprocessing.get_context("forkserver")
        processes: list[Any] = []
        try:
            start_ranks(context, _rank, lambda rank: (job, rank, paths[rank]), size, processes)
            problem = _supervise(processes, paths, time.time() + timeout_s)
        except BaseException:
            end_ranks(processes)
            raise
        if problem is not None:
            raise UnavailableError(f"diverge: the ranked side failed: {problem}")
        traces = [pickle.loads(Path(path).read_bytes()) for path in paths]
    import torch

    head = traces[0]
    for rank, trace in enumerate(traces[1:], start=1):
        if not head.steps or len(trace.steps) != len(head.steps):
            raise UnavailableError(f"diverge: rank {rank} took {len(trace.steps)} steps, rank 0 {len(head.steps)}")
        if not torch.equal(trace.steps[-1].prev_sample, head.steps[-1].prev_sample):
            raise UnavailableError(
                f"diverge: rank {rank}'s final latents differ from rank 0's: the ranks of one call must agree "
                "(a rank given other inputs?)"
            )
    return head, size


def _supervise(processes: list[Any], paths: list[str], deadline: float) -> str | None:
    """Wait for every rank; what went wrong (the ranks then ended), or None."""
    problem = supervise(processes, paths, deadline, FINISH_GRACE_S)
    if problem is None:
        return None
    size = len(processes)
    if problem.kind == "died":
        return f"rank {problem.rank} of {size} died with exit code {problem.exitcode}; the other ranks were ended"
    stuck = ", ".join(str(rank) for rank in problem.running)
    return f"rank(s) {stuck} of {size} still running (timeout, or waiting in a collective?); all were ended"


def _rank(job: _Job, rank: int, result_path: str) -> None:
    """One rank: join the process group, load, apply, warm up, capture the designated call, write the trace."""
    import datetime
    import signal

    import torch

    from accel.features import apply
    from accel.targets.build import make_target

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor ends the ranks itself
    if job.threads:
        torch.set_num_threads(job.threads)
    if job.backend == "nccl":
        torch.cuda.set_device(rank)
    store = torch.distributed.FileStore(job.store, job.world_size)  # type: ignore[attr-defined]
    torch.distributed.init_process_group(
        job.backend,
        store=store,
        rank=rank,
        world_size=job.world_size,
        timeout=datetime.timedelta(seconds=job.timeout_s),
    )
    try:
        target = make_target(job.spec)
        pipeline = target.load()
        applied = apply(pipeline, *job.configs.values(), num_inference_steps=job.request.steps, device=target.device)
        try:
            target.generate(job.request)  # the warm-up call: never compared
            with Capture(pipeline) as trace:
                trace.images = target.generate(job.request)
        finally:
            applied.remove()
    finally:
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()
    for step in trace.steps:
        step.state = {}  # the scheduler's attributes stay here: isolation replays side A's scheduler
    Path(result_path).write_bytes(pickle.dumps(trace))
