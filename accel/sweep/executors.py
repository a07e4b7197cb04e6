"""Executors: where a cell runs.

- ``inline``: in this process. Fast, for tests; features restore what they changed on ``remove``.
- ``process`` (default): each cell in a fresh worker with a timeout. Workers are forked from a
  forkserver that has already imported torch and diffusers (about 9 s of imports on 2 cores), so each
  cell starts clean (no patched classes, global attention backend, dynamo caches or inductor config left
  by another cell) without paying the imports again. A worker that crashes (segfault, out of memory) or
  outlives its timeout is recorded as a failed cell and the sweep goes on.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.sweep.cell import CellSpec, run_cell

PRELOAD_MODULE = "accel.sweep.preload"
_context: Any = None


def run_inline(spec: CellSpec) -> dict[str, Any]:
    """Run the cell in this process, restoring the process-global state the libraries mutate.

    Features undo their own changes on ``remove``; this also resets what they change as a side effect:
    dynamo's caches and config, inductor's config (torchao's ``quantize_`` sets flags there) and
    diffusers' process-global active attention backend. Every cell loads a fresh pipeline, so
    instance-level residue (Cache-DiT leaves patched forwards after ``disable_cache``) dies with it.
    """
    import torch
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    inductor_config = torch._inductor.config.save_config()
    dynamo_config = torch._dynamo.config.save_config()
    active_backend = _AttentionBackendRegistry._active_backend
    backends = dict(_AttentionBackendRegistry._backends)
    try:
        return run_cell(spec)
    finally:
        torch._dynamo.reset()
        torch._dynamo.config.load_config(dynamo_config)
        torch._inductor.config.load_config(inductor_config)
        _AttentionBackendRegistry._active_backend = active_backend
        _AttentionBackendRegistry._backends.clear()
        _AttentionBackendRegistry._backends.update(backends)


def _forkserver_context() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload([PRELOAD_MODULE])
    return _context


def _worker(spec: CellSpec, result_path: str) -> None:
    from accel.sweep.preload import quiet_libraries

    quiet_libraries(verbose=os.environ.get("OMNI_ACCEL_VERBOSE") == "1")
    record = run_cell(spec)
    Path(result_path).write_text(json.dumps(record, default=str))


def run_in_process(spec: CellSpec, timeout_s: float) -> dict[str, Any]:
    """Run the cell in a fresh worker; a crash or timeout becomes a failed record."""
    context = _forkserver_context()
    handle, result_path = tempfile.mkstemp(prefix="omni-accel-cell-", suffix=".json")
    os.close(handle)
    try:
        worker = context.Process(target=_worker, args=(spec, result_path), daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            worker.kill()
            worker.join()
            return _failure(spec, f"timeout: the cell ran longer than {timeout_s:g} s (measure.timeout_s)")
        text = Path(result_path).read_text()
        if worker.exitcode != 0 or not text:
            return _failure(spec, f"worker died with {_describe_exit(worker.exitcode)}")
        return json.loads(text)
    finally:
        Path(result_path).unlink(missing_ok=True)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _failure(spec: CellSpec, error: str) -> dict[str, Any]:
    return {
        "model": spec.model.name,
        "source": spec.model.source,
        "target": spec.model.target,
        "variant": spec.variant,
        "features": spec.features,
        "status": "failed",
        "error": error,
    }


def get_executor(name: str, timeout_s: float) -> Callable[[CellSpec], dict[str, Any]]:
    """The function that runs one cell for executor ``name`` (validated by the profile schema)."""
    if name == "inline":
        return run_inline
    return lambda spec: run_in_process(spec, timeout_s)
