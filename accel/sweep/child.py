"""A cell in a child process of its supervisor (``workers.run_supervised``, inside a Ray task).

``python -m accel.sweep.child SPEC RESULT``: SPEC holds the pickled (CellSpec, fault, verbose, threads,
supervisor pid); the pickled record, with the cell's files, is written to RESULT. The child dies with its
supervisor (a cancelled or lost Ray task leaves no cell running).
"""

from __future__ import annotations

import os
import pickle
import sys


def _die_with_parent(parent: int) -> None:
    import signal

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the supervisor died before the line above took effect
        os._exit(1)


def main(argv: list[str]) -> None:
    spec_path, result_path = argv
    with open(spec_path, "rb") as handle:
        spec, fault, verbose, threads, parent = pickle.load(handle)
    _die_with_parent(parent)
    from accel.sweep.workers import _worker

    _worker(spec, result_path, fault, verbose, threads)


if __name__ == "__main__":
    main(sys.argv[1:])
