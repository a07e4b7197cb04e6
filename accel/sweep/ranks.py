"""Multi-process cells: a variant with a parallel feature runs as ``world_size`` ranks, each its own process.

``run_ranks(spec, timeout_s)`` is what every executor runs for such a cell (``is_parallel``): inline and
process on the sweep's host, Ray inside the cell's task. It

1. refuses before any process starts what cannot run here (``accel.features.parallel.launch_refusal``: the
   world size against the GPUs, ring's attention backend, tensor parallelism's accelerator; a target without
   diffusers' parallel plans), as an ``unsupported`` record with the feature's reason;
2. starts the ranks from the process executor's forkserver (torch and diffusers already imported), joined by
   a ``torch.distributed`` file store in a scratch directory: gloo on the CPU, NCCL on CUDA (rank r on GPU r);
3. supervises them with the cell's timeout counted from the launch: a rank that dies (a signal, a non-zero
   exit, no record) fails the cell naming the rank, its signal and its phase, and the other ranks are
   killed at once; a rank still running ``FINISH_GRACE_S`` after another finished is killed too (it waits in
   a collective its peer will never join), so nothing hangs the sweep;
4. returns rank 0's record, with every rank's outputs checked to be identical (a difference fails the cell),
   each rank's evidence (collectives, sequence split) under the parallel feature's evidence, and the cell's
   memory summed over the ranks, each rank's under ``rank_memory``.

A failed multi-process cell that lost a rank to a signal is marked ``rerun_on_resume``: ``--resume`` measures
it again (``accel.sweep.resume``), and only it.
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

import numpy as np

from accel.ranksup import FINISH_GRACE_S, end_ranks, start_ranks, supervise
from accel.sweep.cell import PHASE_FILE_ENV, describe_phase, note_phase, run_cell
from accel.sweep.resume import RERUN_ON_RESUME
from accel.sweep.spec import CELL_FILES, CellSpec
from accel.sweep.workers import FAULT_ENV, _describe_exit, _forkserver_context, failure, timeout_message

# Fault injection (tests), in OMNI_ACCEL_FAULT: "kill-rank:<rank>:<model>/<variant>" kills that rank with
# SIGKILL inside its first collective of the timed calls; "rank-seeds:<model>/<variant>" gives every rank
# but 0 other seeds (their all-to-all then mixes different latents).
KILL_RANK = "kill-rank:"
RANK_SEEDS = "rank-seeds:"


def world_size(spec: CellSpec) -> int:
    """The ranks ``spec`` runs on (1: an ordinary one-process cell)."""
    from accel.features.parallel import variant_world_size

    return variant_world_size(getattr(spec, "configs", None) or {})  # a stand-in spec (tests) has none


def is_parallel(spec: CellSpec) -> bool:
    """Whether the cell needs ``run_ranks`` (a parallel feature with a world size above one)."""
    return world_size(spec) > 1


def _refusal(spec: CellSpec, device: str) -> tuple[str, str, str] | None:
    """(scope, reason, owner) of a cell that cannot start its ranks here; None when it can."""
    from accel.features.base import OWNER_OF_SCOPE, Owner
    from accel.features.parallel import cell_refused, launch_refused
    from accel.targets.adapter import default_call_kwargs
    from accel.targets.registry import is_engine

    names = ", ".join(name for name in spec.configs)
    if is_engine(spec.model.target):
        return (
            "model",
            f"{names}: engine targets run their own processes; the harness starts ranks for adapter and native",
            Owner.HARNESS.value,
        )
    call_kwargs = {**default_call_kwargs(spec.model.source), **spec.model.call_kwargs}
    for scope, support in (
        ("model", cell_refused(spec.configs, spec.model, spec.workload, call_kwargs)),
        ("environment", launch_refused(spec.configs, device)),
    ):
        if not support.supported:
            return scope, support.reason, (support.owner or OWNER_OF_SCOPE[scope]).value
    return None


def run_ranks(spec: CellSpec, timeout_s: float, threads: int | None = None) -> dict[str, Any]:
    """Run a parallel cell as its ranks and return rank 0's record (see the module's docstring)."""
    from accel.features.parallel import collective_backend
    from accel.targets.adapter import resolve_device

    started = time.time()
    device = resolve_device(spec.model.device)
    size = world_size(spec)
    refused = _refusal(spec, device)
    if refused is not None:
        scope, reason, owner = refused
        record = failure(spec, reason, started)
        record.update(
            status="unsupported", unsupported_scope=scope, refused_by=owner, device=device, dtype=spec.model.dtype
        )
        return record
    if threads is None and device == "cpu":  # the ranks share the cell's cores (measure.threads, else the host's)
        threads = max(1, (spec.measure.threads or os.cpu_count() or 1) // size)
    fault = os.environ.get(FAULT_ENV, "")
    verbose = os.environ.get("OMNI_ACCEL_VERBOSE") == "1"
    with tempfile.TemporaryDirectory(prefix="omni-accel-ranks-") as scratch:
        paths = [os.path.join(scratch, f"rank{rank}.pickle") for rank in range(size)]
        launch = _Launch(collective_backend(device), os.path.join(scratch, "store"), size, timeout_s)
        context = _forkserver_context()
        ranks: list[Any] = []
        try:
            start_ranks(
                context, _rank_worker, lambda r: (spec, launch, r, paths[r], fault, verbose, threads), size, ranks
            )
        except (OSError, EOFError) as error:
            return failure(spec, f"rank {len(ranks)} of {size} could not be started: {error}", started)
        try:
            problem = _supervise(ranks, paths, started + timeout_s, timeout_s)
        except BaseException:  # Ctrl-C in the sweep: no rank outlives it
            end_ranks(ranks)
            raise
        if problem is not None:
            record = failure(spec, problem, started)
            record["timing"].update(ranks=size, collective_backend=launch.backend)
            if "signal" in problem:
                record["timing"][RERUN_ON_RESUME] = True
            return record
        records = [pickle.loads(Path(path).read_bytes()) for path in paths]
    return _merge(records, launch.backend)


@dataclasses.dataclass(frozen=True)
class _Launch:
    """How the ranks of one cell find each other."""

    backend: str
    store: str
    world_size: int
    timeout_s: float


def _supervise(ranks: list[Any], paths: list[str], deadline: float, timeout_s: float) -> str | None:
    """Wait for every rank; the error of the first that died or stuck (the others are ended), or None."""
    problem = supervise(ranks, paths, deadline, FINISH_GRACE_S)
    if problem is None:
        return None
    size = len(ranks)
    if problem.kind == "died":
        died = f"died with {_describe_exit(problem.exitcode)}{describe_phase(paths[problem.rank] + '.phase')}"
        return f"rank {problem.rank} of {size} {died}; the other ranks were ended"
    if problem.kind == "timeout":
        phases = "; ".join(f"rank {r}{describe_phase(paths[r] + '.phase') or ' (no phase)'}" for r in range(size))
        return f"{timeout_message(timeout_s)}: {phases}"
    phase = describe_phase(paths[problem.rank] + ".phase")
    return (
        f"rank {problem.rank} of {size} was still running {FINISH_GRACE_S:g} s after another rank finished"
        f"{phase} (waiting in a collective?); it was ended"
    )


def _outputs(record: dict[str, Any]) -> dict[str, np.ndarray]:
    import io

    files = record.get(CELL_FILES) or {}
    path = record.get("outputs_file")
    if not path or path not in files:
        return {}
    with np.load(io.BytesIO(files[path])) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _merge(records: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    """Rank 0's record, failed when another rank's status or outputs differ; every rank's evidence added."""
    from accel.features.parallel import variant_world_size

    head = records[0]
    per_rank = [
        {"rank": rank, "status": r.get("status"), "cell_wall_s": r.get("cell_wall_s"),
         "warm_median_s": (r.get("warm") or {}).get("median")}
        for rank, r in enumerate(records)
    ]  # fmt: skip
    head.setdefault("timing", {}).update(ranks=len(records), collective_backend=backend, per_rank=per_rank)
    _sum_memory(head, records)
    for rank, record in enumerate(records[1:], start=1):
        if record.get("status") != head.get("status"):
            error = f"rank {rank} ended {record.get('status')} ({record.get('error')}), rank 0 {head.get('status')}"
            head.update(status="failed", error=error)
            return head
    if head.get("status") != "ok":
        return head
    cores = os.cpu_count() or 1
    if head.get("device") == "cpu":  # issue 27: on a small host the ranks share its cores
        head.setdefault("notes", []).append(
            f"{len(records)} ranks shared this host's {cores} CPU cores: a speedup here is mechanics, not a "
            "measurement of parallel inference"
        )
    mine = _outputs(head)
    for rank, record in enumerate(records[1:], start=1):
        theirs = _outputs(record)
        for key, array in mine.items():
            other = theirs.get(key)
            if other is None or other.shape != array.shape:
                shape = "none" if other is None else f"shape {other.shape}"
                error = f"rank {rank}'s output {key} is {shape}, rank 0's {array.shape}: every rank must produce it"
                head.update(status="failed", error=error)
                return head
            if not np.array_equal(other, array):
                diff = float(np.abs(other.astype(np.float64) - array).max())
                head.update(
                    status="failed",
                    error=f"rank {rank}'s output {key} differs from rank 0's (max abs diff {diff:.3g}): every rank "
                    "must produce the same images",
                )
                return head
    configs_world = variant_world_size(_configs(head))
    for name, evidence in (head.get("evidence") or {}).items():
        if "collectives_per_run" not in evidence:
            continue
        evidence["ranks_identical"] = True
        # Each rank's last timed call, from every per-run list of its evidence (collectives, tokens, branch).
        evidence["ranks"] = [
            {
                "rank": rank,
                **{
                    key.removesuffix("_per_run") + "_last_run": values[-1] if values else {}
                    for key, values in ((r.get("evidence") or {}).get(name) or {}).items()
                    if key.endswith("_per_run")
                },
            }
            for rank, r in enumerate(records)
        ]
        evidence["world_size"] = configs_world
    return head


def _sum_memory(record: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Every rank's memory under ``rank_memory`` and their sum as the cell's (``cell_memory_bytes``): each rank
    is a process holding its own copy of what it loaded, so rank 0's alone understated the cell by the others."""
    if any(r.get("cell_memory_bytes") is None for r in records):
        return  # a rank that measured nothing: no sum to give
    record["rank_memory"] = [
        {
            "rank": rank,
            **{
                key: r.get(key)
                for key in ("cell_memory_bytes", "peak_host_rss_bytes", "peak_device_allocated_bytes", "memory_settled")
            },
        }
        for rank, r in enumerate(records)
    ]
    record["cell_memory_bytes"] = sum(int(r["cell_memory_bytes"]) for r in records)
    record["cell_memory_method"] = f"{record.get('cell_memory_method')}; summed over the {len(records)} ranks"


def _configs(record: dict[str, Any]) -> dict[str, Any]:
    from accel.features import validate_variant_features

    return validate_variant_features(record.get("features") or {}, "record.features")


def _rank_worker(
    spec: CellSpec, launch: _Launch, rank: int, result_path: str, fault: str, verbose: bool, threads: int | None
) -> None:
    """One rank: join the process group, run the cell, write its record (pickled, files as bytes)."""
    import datetime
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor ends the ranks itself
    from accel.sweep.quiet import quiet_libraries

    quiet_libraries(verbose=verbose)
    os.environ[PHASE_FILE_ENV] = result_path + ".phase"
    if threads:
        torch.set_num_threads(threads)
        # run_cell sets measure.threads: each rank's share of the cell's threads, not the whole count
        spec = dataclasses.replace(spec, measure=spec.measure.model_copy(update={"threads": threads}))
    note_phase(f"rank {rank}'s start")
    if launch.backend == "nccl":
        torch.cuda.set_device(rank)
    if rank:
        _private_timing_lock(result_path)
    spec = _inject_rank_fault(spec, rank, fault)
    store = torch.distributed.FileStore(launch.store, launch.world_size)  # type: ignore[attr-defined]
    torch.distributed.init_process_group(
        launch.backend,
        store=store,
        rank=rank,
        world_size=launch.world_size,
        timeout=datetime.timedelta(seconds=launch.timeout_s),
    )
    try:
        record = run_cell(spec)
    finally:
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()
    Path(result_path).write_bytes(pickle.dumps(record))


def _private_timing_lock(result_path: str) -> None:
    """Ranks above 0 take a lock of their own around the timing phase: rank 0 holds the node's
    (``measure.exclusive``) for the whole cell's timing, and a second rank waiting on it would never join
    rank 0's first collective."""
    from accel.measure import contention

    contention.timing_lock_path = lambda: result_path + ".lock"


def _inject_rank_fault(spec: CellSpec, rank: int, fault: str) -> CellSpec:
    if fault == f"{RANK_SEEDS}{spec.key}" and rank:  # the same sample names, other generator seeds
        from accel.sweep import cell

        build = cell.build_requests

        def reseeded(workload: Any) -> list[Any]:
            return [dataclasses.replace(r, seed=r.seed + 1000 * rank) for r in build(workload)]

        cell.build_requests = reseeded
    if fault.startswith(KILL_RANK) and fault.endswith(f":{spec.key}") and fault.split(":")[1] == str(rank):
        _kill_in_timed_collective()
    return spec


def _kill_in_timed_collective() -> None:
    """SIGKILL this process inside its first all-to-all once the cell is in its timed calls (mid-call)."""
    import signal

    import torch.distributed._functional_collectives as funcol

    from accel.sweep import cell

    timed = {"now": False}
    note = cell.note_phase

    def noted(phase: str) -> None:
        timed["now"] = timed["now"] or phase == "the timed calls"
        note(phase)

    original = funcol.all_to_all_single

    def dying(*args: Any, **kwargs: Any) -> Any:
        if timed["now"]:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    cell.note_phase = noted
    funcol.all_to_all_single = dying
