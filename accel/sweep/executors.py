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
- ``ray`` (``accel.sweep.ray_executor``): each cell a Ray task that runs it in a child process, with CPU and
  GPU requests from the profile, on a local Ray instance or ``--ray-address``. The record and the cell's
  files come back in the task's result; Ray retries only a lost node or worker, never the cell's own crash.

Every executor returns the cell's files in its record (``spec.CELL_FILES``); the runner writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accel.errors import UnavailableError
from accel.sweep.cell import run_cell
from accel.sweep.spec import CellSpec
from accel.sweep.workers import FAULT_ENV, Pending, cancel_pending, failure, run_in_process

if TYPE_CHECKING:
    from accel.sweep.ray_executor import RaySubmitter

__all__ = ["FAULT_ENV", "Pending", "cancel_pending", "failure", "get_executor", "run_inline"]


def run_inline(spec: CellSpec) -> dict[str, Any]:
    """Run the cell in this process, restoring the process-global state the libraries mutate.

    Features undo their own changes on ``remove``; this also restores what they change as a side effect,
    as each feature declares it (``Feature.global_state``: dynamo's caches and config, inductor's config,
    diffusers' process-global attention backends; ``accel.features.state``). Every cell loads a fresh
    pipeline, so instance-level residue (Cache-DiT leaves patched forwards after ``disable_cache``) dies
    with it.
    """
    from accel.features.state import global_state_restored
    from accel.sweep import ranks

    if ranks.is_parallel(spec):  # a parallel feature: its ranks are processes of their own, even inline
        return ranks.run_ranks(spec, spec.measure.timeout_s)
    with global_state_restored():
        return run_cell(spec)


def _ray_submitter(timeout_s: float, address: str | None) -> RaySubmitter:
    try:
        import ray  # noqa: F401
    except ImportError as error:
        raise UnavailableError("executor 'ray' needs Ray: pip install 'omni-accel[ray]'") from error
    from accel.sweep.ray_executor import RaySubmitter

    return RaySubmitter(timeout_s, address)


def get_executor(name: str, timeout_s: float, ray_address: str | None = None) -> Callable[[CellSpec], Pending]:
    """The ``submit`` function of executor ``name`` (validated by the profile schema and the CLI). Ray's also
    has ``started()``: the cells that reported their start, for the overlap of cells still running. The
    process executor starts its forkserver here, whose imports then run while the sweep prepares."""
    if name == "inline":
        return lambda spec: Pending(lambda: run_inline(spec))
    if name == "ray":
        return _ray_submitter(timeout_s, ray_address)
    from accel.sweep.workers import start_forkserver

    start_forkserver()
    return lambda spec: Pending(lambda: _run_process(spec, timeout_s))


def _run_process(spec: CellSpec, timeout_s: float) -> dict[str, Any]:
    """The process executor's cell: a fresh worker, or one per rank for a parallel feature."""
    from accel.sweep import ranks

    return ranks.run_ranks(spec, timeout_s) if ranks.is_parallel(spec) else run_in_process(spec, timeout_s)
