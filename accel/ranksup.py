"""Starting and supervising the processes of one multi-process job, its ranks: the sweep's parallel cells
(``accel.sweep.ranks``) and diverge's ranked side (``accel.diverge.ranks``) share this. It imports neither (the
sweep imports diverge for its drift curves), only the standard library; each caller words what went wrong.

``supervise`` waits for every rank: a rank that exits non-zero or without its output file, the deadline, or a
rank still running ``FINISH_GRACE_S`` after another finished (waiting in a collective its peer left) ends them
all and says which (``RankProblem``); nothing outlives the supervisor.

``start_whole`` starts one process with Ctrl-C and SIGTERM held back until it has started: a forkserver
process is started in two steps (the forkserver forks and sends the pid, then the parent writes the process
object into the child's pipe), and an interrupt raised between them left a child waiting for its process
object forever, holding the resource tracker's pipe, so the interrupted sweep waited on the tracker forever.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

# How long the other ranks may run on after one rank finished (collecting the record, compressing outputs)
# before they are taken to be stuck in a collective and killed.
FINISH_GRACE_S = 60.0
POLL_S = 0.5


@dataclasses.dataclass(frozen=True)
class RankProblem:
    """Why the ranks were ended: ``died`` (``rank`` exited with ``exitcode`` or wrote no output), ``timeout``
    (the deadline passed) or ``stuck`` (still running ``FINISH_GRACE_S`` after another finished); ``running``:
    the ranks still running then, and ``rank`` the first of them."""

    kind: Literal["died", "timeout", "stuck"]
    rank: int
    exitcode: int | None = None
    running: tuple[int, ...] = ()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block: each one received meanwhile is raised again, with the
    handler that was installed before, as the block ends (so a Ctrl-C raises its KeyboardInterrupt there).
    Python runs signal handlers in the main thread only; elsewhere the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for held in dict.fromkeys(received):
            signal.raise_signal(held)


def start_whole(process: Any, started: list[Any] | None = None) -> None:
    """``process.start()`` with interrupts deferred until it has started (module docstring); appended to
    ``started`` before a deferred interrupt is raised, so that whoever handles it can end the process."""
    with interrupts_deferred():
        process.start()
        if started is not None:
            started.append(process)


def start_ranks(context: Any, target: Callable[..., None], args: Callable[[int], tuple[Any, ...]], size: int,
                ranks: list[Any]) -> None:  # fmt: skip
    """Start ``size`` daemon processes of ``context`` running ``target(*args(rank))``, appended to ``ranks`` as
    each starts; on any error the ranks already started are ended and the error raised."""
    try:
        for rank in range(size):
            start_whole(context.Process(target=target, args=args(rank), daemon=True), ranks)
    except BaseException:
        end_ranks(ranks)
        raise


def supervise(
    ranks: list[Any], paths: list[str], deadline: float, grace_s: float = FINISH_GRACE_S
) -> RankProblem | None:
    """Wait for every rank (rank r writes ``paths[r]``); the problem that ended them all, or None."""
    from multiprocessing.connection import wait

    size = len(ranks)
    first_done: float | None = None
    while True:
        running = tuple(rank for rank, process in enumerate(ranks) if process.exitcode is None)
        for rank, process in enumerate(ranks):
            code = process.exitcode
            if code is not None and (code != 0 or not os.path.isfile(paths[rank])):
                end_ranks(ranks)
                return RankProblem("died", rank, code)
        if not running:
            return None
        now = time.time()
        if first_done is None and len(running) < size:
            first_done = now
        if now >= deadline or (first_done is not None and now - first_done > grace_s):
            end_ranks(ranks)
            return RankProblem("timeout" if now >= deadline else "stuck", running[0], running=running)
        wait([ranks[rank].sentinel for rank in running], timeout=POLL_S)


def end_ranks(ranks: list[Any]) -> None:
    """Kill every rank still running and reap them all."""
    for process in ranks:
        if process.exitcode is None:
            with contextlib.suppress(Exception):
                process.kill()
    for process in ranks:
        with contextlib.suppress(Exception):
            process.join(10)
