"""The forkserver start race the sweep's workers and ranks guard against, made to happen on purpose: a Ctrl-C
between the forkserver's pid and the parent's write of the process object (tests/test_ranksup.py,
tests/test_resilience.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Interrupted(BaseException):
    """What the test's SIGINT handler raises (a BaseException, as KeyboardInterrupt is)."""


@contextmanager
def interrupt_after_the_first_pid(monkeypatch: Any) -> Iterator[list[int]]:
    """SIGINT to this process right after the forkserver sends the first new child's pid; the handler raises
    ``Interrupted``. Yields the list that gets that pid."""
    from multiprocessing import forkserver

    read_signed = forkserver.read_signed
    pids: list[int] = []

    def read_then_interrupt(fd: int) -> int:
        value = read_signed(fd)
        if not pids:  # the first read is the new child's pid
            pids.append(value)
            os.kill(os.getpid(), signal.SIGINT)
        return value

    def interrupted(signum: int, frame: Any) -> None:
        raise Interrupted

    monkeypatch.setattr(forkserver, "read_signed", read_then_interrupt)
    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield pids
    finally:
        signal.signal(signal.SIGINT, previous)


def outlived(pid: int, seconds: float = 20.0) -> bool:
    """Whether process ``pid`` is still alive after ``seconds`` (then it is killed, so no test leaves it behind)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True
