"""Cells in worker processes: the ``Pending`` handle every executor returns, the forkserver workers of the
``process`` executor, and the supervised child process a Ray task runs its cell in (``run_supervised``).

A worker that crashes (segfault, out of memory) or outlives its timeout is recorded as a failed cell with
the signal (``failure``); one that could not be started at all (infrastructure) is retried once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.ranksup import start_whole
from accel.sweep.cell import PHASE_FILE_ENV, describe_phase, note_phase, record_head, run_cell
from accel.sweep.spec import CellSpec

PRELOAD_MODULE = "accel.sweep.preload"
FAULT_ENV = "OMNI_ACCEL_FAULT"  # fault injection for tests: "segfault:<model>/<variant>"
CUDA_ERROR_NOT_INITIALIZED = 3
_context: Any = None


class Pending:
    """A submitted cell; ``result()`` blocks until its record is available, ``cancel()`` abandons it."""

    def __init__(
        self,
        compute: Callable[[], dict[str, Any]],
        cancel: Callable[[], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self._compute = compute
        self._cancel = cancel
        self._ready = ready
        self._record: dict[str, Any] | None = None
        if cancel is not None:
            _cancellable.add(self)

    def done(self) -> bool:
        """Whether ``result()`` would return at once (a cell running elsewhere has finished)."""
        return self._record is not None or (self._ready is not None and self._ready())

    def result(self) -> dict[str, Any]:
        if self._record is None:
            self._record = self._compute()
            _cancellable.discard(self)
        return self._record

    def cancel(self) -> None:
        """Stop the cell if it is still running elsewhere (a Ray task); a no-op once it has a result."""
        _cancellable.discard(self)
        if self._record is None and self._cancel is not None:
            self._cancel()


# Cells running concurrently elsewhere (Ray tasks) that an interrupted sweep must stop.
_cancellable: weakref.WeakSet[Pending] = weakref.WeakSet()


def cancel_pending() -> None:
    """Cancel every submitted cell still running concurrently (on Ctrl-C); best effort, never raises."""
    for pending in list(_cancellable):
        with contextlib.suppress(Exception):  # an interrupted sweep is exiting: a failed cancel must not mask it
            pending.cancel()


def cuda_driver_initialized() -> bool | None:
    """Whether this process has initialised the CUDA driver (``cuInit``), after which a forked child cannot
    use CUDA ("initialization error"); None on a host without a CUDA driver.

    ``cuCtxGetCurrent`` answers CUDA_ERROR_NOT_INITIALIZED until ``cuInit`` has run, and initialises nothing.
    """
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    context = ctypes.c_void_p()
    initialised: bool = driver.cuCtxGetCurrent(ctypes.byref(context)) != CUDA_ERROR_NOT_INITIALIZED
    return initialised


def preload_is_fork_safe(timeout_s: float = 180.0) -> bool:
    """Whether importing the preload module leaves the CUDA driver uninitialised, so that forked workers can
    use the GPU. Always true on a host without a CUDA driver; on a CUDA host, checked once in a throwaway
    interpreter (an import that asks the CUDA runtime whether a GPU is there, as torchao's float8 utilities
    do, initialises the driver unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``, which the workers set)."""
    if cuda_driver_initialized() is None:
        return True
    probe = f"import {PRELOAD_MODULE}; from accel.sweep.workers import cuda_driver_initialized as c; print(c())"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    lines = done.stdout.strip().splitlines()
    return done.returncode == 0 and bool(lines) and lines[-1] == "False"


def _forkserver_context() -> Any:
    global _context
    if _context is None:
        # torch.cuda.is_available() through NVML: an import that asks must not initialise the CUDA driver in
        # the forkserver, whose forks would then fail at their first CUDA call.
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        _context = multiprocessing.get_context("forkserver")
        if preload_is_fork_safe():
            _context.set_forkserver_preload([PRELOAD_MODULE])
        else:  # each worker imports torch and diffusers itself after the fork: slower, but its GPU works
            print(
                f"omni-accel: importing {PRELOAD_MODULE} initialises CUDA; workers import their libraries "
                "after the fork instead (a few seconds more per cell)",
                file=sys.stderr,
            )
    return _context


def start_forkserver() -> None:
    """Start the forkserver now, so that its imports (torch and diffusers: several seconds on 2 cores) overlap
    the sweep's own preparation instead of delaying its first cell; the first worker waits for it to be ready.
    """
    from multiprocessing import forkserver

    _forkserver_context()
    try:
        forkserver.ensure_running()
    except OSError as error:
        if "AF_UNIX path too long" not in str(error):
            raise
        from accel.errors import UnavailableError

        folder = tempfile.gettempdir()
        raise UnavailableError(
            f"the process executor's forkserver cannot bind its socket under the temporary folder {folder} "
            f"({len(folder)} characters; a Unix socket's path has at most 107): set TMPDIR to a shorter folder, "
            "e.g. TMPDIR=/tmp, or run with --executor inline"
        ) from error


def stop_helper_processes() -> None:
    """Stop the forkserver, then the resource tracker, now rather than at exit: the tracker warns on stopping
    of the semaphores a killed worker left (a library's lock), and at exit that warning came after the
    sweep's last line, the ``--resume`` command an interrupted sweep promises. The tracker unlinks them."""
    if _context is None:  # no worker was ever started: neither helper runs
        return
    from multiprocessing import forkserver, resource_tracker

    helpers: tuple[Any, ...] = (forkserver._forkserver, resource_tracker._resource_tracker)
    for helper in helpers:  # private, unannotated in typeshed; present since Python 3.8
        with contextlib.suppress(Exception):
            helper._stop()


def _inject_fault(spec: CellSpec, fault: str) -> None:
    """``segfault:<model>/<variant>`` kills the cell with SIGSEGV; ``hang:<model>/<variant>`` makes it outlive
    any timeout, ``hang-holding-a-semaphore:...`` too, holding a named semaphore that a killed worker leaks;
    ``warn:<model>/<variant>`` warns as a library would (tests of the crash, timeout, interrupt and log paths, on
    every executor but inline)."""
    if fault == f"segfault:{spec.key}":
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == f"warn:{spec.key}":  # as a library warns inside a cell
        import warnings

        warnings.warn("omni-accel test fault: a library's warning in the cell's worker", UserWarning, stacklevel=1)
    if fault in (f"hang:{spec.key}", f"hang-holding-a-semaphore:{spec.key}"):
        import time

        if fault.startswith("hang-holding"):  # as a library's multiprocessing lock (tqdm's) would
            held = multiprocessing.get_context("forkserver").Lock()
            held.acquire()
            note_phase("a test fault holding a semaphore")
        time.sleep(24 * 3600)


def _worker(spec: CellSpec, result_path: str, fault: str, verbose: bool, threads: int | None = None) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the sweep stops this worker itself (no traceback here).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from accel.sweep.quiet import quiet_libraries
    from accel.sweep.runlog import start_worker_log

    quiet_libraries(verbose=verbose)
    start_worker_log(Path(result_path + ".log"), spec.key)  # the sweep appends it to the run's log
    os.environ[PHASE_FILE_ENV] = result_path + ".phase"
    if threads:
        import torch

        torch.set_num_threads(threads)
    note_phase("the worker's start")
    _inject_fault(spec, fault)
    record = run_cell(spec)
    Path(result_path).write_bytes(pickle.dumps(record))  # with the cell's files (bytes): pickle, not JSON


def run_in_process(spec: CellSpec, timeout_s: float, attempts: int = 2) -> dict[str, Any]:
    """Run the cell in a fresh worker; a crash or timeout becomes a failed record."""
    handle, result_path = tempfile.mkstemp(prefix="omni-accel-cell-", suffix=".pickle")
    os.close(handle)
    started = time.time()
    # The forkserver's environment is the one it started with: pass what may have changed since.
    args = (spec, result_path, os.environ.get(FAULT_ENV, ""), os.environ.get("OMNI_ACCEL_VERBOSE") == "1")
    worker = _forkserver_context().Process(target=_worker, args=args, daemon=True)
    try:
        try:
            try:
                start_whole(worker)  # a Ctrl-C meanwhile is raised once the worker has started
            except (OSError, EOFError) as error:  # the worker never started: infrastructure, retry once
                if attempts > 1:
                    return run_in_process(spec, timeout_s, attempts - 1)
                return failure(spec, f"worker could not be started: {error}", started)
            join_interruptibly(worker, timeout_s)
        except BaseException:  # Ctrl-C in the sweep: the worker must not outlive it
            if worker.pid is not None:
                worker.kill()
                worker.join()
            raise
        phase = describe_phase(result_path + ".phase")
        if worker.is_alive():
            worker.kill()
            worker.join()
            return failure(spec, timeout_message(timeout_s) + phase, started)
        data = Path(result_path).read_bytes()
        if worker.exitcode != 0 or not data:
            return failure(spec, f"worker died with {_describe_exit(worker.exitcode)}{phase}", started)
        record: dict[str, Any] = pickle.loads(data)
        return record
    finally:
        from accel.sweep.runlog import relay_worker_log

        relay_worker_log(Path(result_path + ".log"))  # the worker's warnings, in the run's log
        for path in (result_path, result_path + ".phase", result_path + ".log"):
            Path(path).unlink(missing_ok=True)


# How long the sweep's main thread waits on a worker at a time, so that an interrupt is acted on within it.
JOIN_SLICE_S = 0.5


def join_interruptibly(worker: Any, timeout_s: float) -> None:
    """``worker.join(timeout_s)`` in slices of ``JOIN_SLICE_S``. A signal the kernel hands to another thread of
    this process (torch's, the allocator's: after a stop and continue, Ctrl-Z then ``kill``, any thread may take
    it) only sets CPython's flag; the main thread runs the handler when it next runs Python code, and one whole
    join would keep it waiting for the cell to end or time out (CI: an interrupted sweep still running 60 s later,
    the review reproduced it with a hanging cell)."""
    deadline = time.monotonic() + timeout_s
    while worker.exitcode is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        worker.join(min(JOIN_SLICE_S, left))


def timeout_message(timeout_s: float) -> str:
    """The error of a cell that outlived ``measure.timeout_s`` (counted from the cell's own start)."""
    return f"timeout: the cell ran longer than {timeout_s:g} s (measure.timeout_s)"


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        hint = " (killed: out of memory?)" if name == "SIGKILL" else ""
        return f"signal {name}{hint}"
    return f"exit code {code}"


def failure(spec: CellSpec, error: str, started: float | None = None) -> dict[str, Any]:
    """The record of a cell that produced no record of its own; ``started``: when the cell started here (epoch
    seconds), None when it never ran anywhere we know of."""
    record = record_head(spec, "failed", error)
    if started is not None:
        record["timing"] = {"node": socket.gethostname(), "start": started, "end": time.time()}
    return record


def run_supervised(
    spec: CellSpec, timeout_s: float, fault: str = "", verbose: bool = False, threads: int | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run the cell in a child Python process (``accel.sweep.child``) and wait for it at most ``timeout_s`` from
    its start: a segfault, an out-of-memory kill or a timeout becomes a failed record naming the signal, as in the
    process executor. Used inside Ray tasks, whose own worker must survive the cell to report it."""
    import subprocess
    import sys

    import accel

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="omni-accel-cell-") as scratch:
        spec_path, result_path = os.path.join(scratch, "spec.pickle"), os.path.join(scratch, "record.pickle")
        Path(spec_path).write_bytes(pickle.dumps((spec, fault, verbose, threads, os.getpid())))
        child_env = dict(os.environ if env is None else env)
        # The child imports accel from where this process did (a Ray worker's sys.path is not its PYTHONPATH).
        package_root = str(Path(accel.__file__).resolve().parent.parent)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH")) if p)
        phase_path = result_path + ".phase"  # the child's _worker writes its phases there
        command = [sys.executable, "-m", "accel.sweep.child", spec_path, result_path]
        try:
            child = subprocess.Popen(command, env=child_env)
        except OSError as error:
            return failure(spec, f"worker could not be started: {error}", started)
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return failure(spec, timeout_message(timeout_s) + describe_phase(phase_path), started)
        except BaseException:  # cancelled: the cell must not outlive its supervisor
            child.kill()
            child.wait()
            raise
        data = Path(result_path).read_bytes() if os.path.isfile(result_path) else b""
        if child.returncode != 0 or not data:
            died = f"worker died with {_describe_exit(child.returncode)}{describe_phase(phase_path)}"
            return failure(spec, died, started)
        record: dict[str, Any] = pickle.loads(data)
        return record
