"""Executors: where a cell runs. Each returns a callable ``submit(cell) -> Pending``; ``Pending.result()``
gives the cell's record. The runner submits every pending cell, then collects results in plan order, so
executors that run cells concurrently (Ray) overlap them while results still land in a fixed order.

- ``inline``: in this process, when the result is asked for. Fast, for tests; the process-global state
  the libraries mutate is reset after each cell.
- ``process`` (default): each cell in a fresh worker with a timeout. Workers are forked from a
  forkserver that has already imported torch and diffusers (about 9 s of imports on 2 cores), so each
  cell starts clean without paying the imports again. A worker that crashes (segfault, out of memory)
  or outlives its timeout is recorded as a failed cell and the sweep goes on; a worker that could not
  be started at all (infrastructure) is retried once.
- ``ray``: each cell a Ray task in a worker used for that one cell (``max_calls=1``), with CPU and GPU
  requests from the profile, on a local Ray instance or ``--ray-address``. Ray retries a task whose
  worker died once; a cell's own failure is never retried. The run directory must be shared with the
  workers (always true on a local instance).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.errors import UnavailableError
from accel.sweep.cell import CellSpec, run_cell

PRELOAD_MODULE = "accel.sweep.preload"
FAULT_ENV = "OMNI_ACCEL_FAULT"  # fault injection for tests: "segfault:<model>/<variant>"
_context: Any = None


class Pending:
    """A submitted cell; ``result()`` blocks until its record is available, ``cancel()`` abandons it."""

    def __init__(self, compute: Callable[[], dict[str, Any]], cancel: Callable[[], None] | None = None) -> None:
        self._compute = compute
        self._cancel = cancel
        self._record: dict[str, Any] | None = None
        if cancel is not None:
            _cancellable.add(self)

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


def run_inline(spec: CellSpec) -> dict[str, Any]:
    """Run the cell in this process, restoring the process-global state the libraries mutate.

    Features undo their own changes on ``remove``; this also restores what they change as a side effect,
    as each feature declares it (``Feature.global_state``: dynamo's caches and config, inductor's config,
    diffusers' process-global attention backends; ``accel.features.state``). Every cell loads a fresh
    pipeline, so instance-level residue (Cache-DiT leaves patched forwards after ``disable_cache``) dies
    with it.
    """
    from accel.features.state import global_state_restored

    with global_state_restored():
        return run_cell(spec)


def _forkserver_context() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload([PRELOAD_MODULE])
    return _context


def _inject_fault(spec: CellSpec, fault: str) -> None:
    if fault == f"segfault:{spec.key}":
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)


def _worker(spec: CellSpec, result_path: str, fault: str, verbose: bool) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the sweep stops this worker itself (no traceback here).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from accel.sweep.preload import quiet_libraries

    quiet_libraries(verbose=verbose)
    _inject_fault(spec, fault)
    record = run_cell(spec)
    Path(result_path).write_text(json.dumps(record, default=str))


def run_in_process(spec: CellSpec, timeout_s: float, attempts: int = 2) -> dict[str, Any]:
    """Run the cell in a fresh worker; a crash or timeout becomes a failed record."""
    handle, result_path = tempfile.mkstemp(prefix="omni-accel-cell-", suffix=".json")
    os.close(handle)
    try:
        try:
            # The forkserver's environment is the one it started with: pass what may have changed since.
            args = (spec, result_path, os.environ.get(FAULT_ENV, ""), os.environ.get("OMNI_ACCEL_VERBOSE") == "1")
            worker = _forkserver_context().Process(target=_worker, args=args, daemon=True)
            worker.start()
        except (OSError, EOFError) as error:  # the worker never started: infrastructure, retry once
            if attempts > 1:
                return run_in_process(spec, timeout_s, attempts - 1)
            return failure(spec, f"worker could not be started: {error}")
        try:
            worker.join(timeout_s)
        except BaseException:  # Ctrl-C in the sweep: the worker must not outlive it
            worker.kill()
            worker.join()
            raise
        if worker.is_alive():
            worker.kill()
            worker.join()
            return failure(spec, f"timeout: the cell ran longer than {timeout_s:g} s (measure.timeout_s)")
        text = Path(result_path).read_text()
        if worker.exitcode != 0 or not text:
            return failure(spec, f"worker died with {_describe_exit(worker.exitcode)}")
        return json.loads(text)
    finally:
        Path(result_path).unlink(missing_ok=True)


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


def failure(spec: CellSpec, error: str) -> dict[str, Any]:
    """The record of a cell that produced no record of its own."""
    return {
        "model": spec.model.name,
        "source": spec.model.source,
        "target": spec.model.target,
        "variant": spec.variant,
        "features": spec.features,
        "status": "failed",
        "error": error,
    }


def _ray_submitter(timeout_s: float, cpus: float, gpus: float, address: str | None) -> Callable[[CellSpec], Pending]:
    try:
        import ray
    except ImportError as error:
        raise UnavailableError("executor 'ray' needs Ray: pip install 'omni-accel[ray]'") from error
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        runtime_env = {"env_vars": {k: v for k, v in os.environ.items() if k.startswith(("OMNI_ACCEL_", "HF_"))}}
        ray.init(address=address, runtime_env=runtime_env, **kwargs)
    remote = ray.remote(max_calls=1, max_retries=1, retry_exceptions=False)(_ray_cell)

    def submit(spec: CellSpec) -> Pending:
        ref = remote.options(num_cpus=cpus, num_gpus=gpus).remote(spec)

        def collect() -> dict[str, Any]:
            try:
                return ray.get(ref, timeout=timeout_s)
            except ray.exceptions.GetTimeoutError:
                ray.cancel(ref, force=True)
                return failure(spec, f"timeout: the cell ran longer than {timeout_s:g} s (measure.timeout_s)")
            except ray.exceptions.RayError as error:
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                return failure(spec, f"ray task failed: {type(error).__name__}: {first[:200]}")

        return Pending(collect, cancel=lambda: ray.cancel(ref, force=True))

    return submit


def _ray_cell(spec: CellSpec) -> dict[str, Any]:
    from accel.sweep.preload import quiet_libraries

    quiet_libraries(verbose=os.environ.get("OMNI_ACCEL_VERBOSE") == "1")
    return run_cell(spec)


def get_executor(
    name: str, timeout_s: float, cpus: float = 1, gpus: float = 0, ray_address: str | None = None
) -> Callable[[CellSpec], Pending]:
    """The ``submit`` function of executor ``name`` (validated by the profile schema and the CLI)."""
    if name == "inline":
        return lambda spec: Pending(lambda: run_inline(spec))
    if name == "ray":
        return _ray_submitter(timeout_s, cpus, gpus, ray_address)
    return lambda spec: Pending(lambda: run_in_process(spec, timeout_s))
