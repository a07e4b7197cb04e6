"""The Ray executor: each cell a Ray task, on a local Ray instance or an existing cluster (``--ray-address``).

- **The driver owns the run directory.** The task returns the cell's record with its files (outputs, an
  engine's log) in Ray's object store and the runner writes them; a node writes nothing but a temporary
  directory of its own, so nodes need not share storage with the driver. Checkpoints given as paths are
  checked on every node before the first cell (``check_sources``); zoo models are built on the node.
- **Failures.** The task runs the cell in a child process (``workers.run_supervised``): a segfault, an
  out-of-memory kill or ``measure.timeout_s`` (counted from the cell's start, on its node) is recorded as a
  failed cell naming the signal, exactly as in the process executor, and never retried. Ray retries a task
  only when its worker or node is lost (``max_retries``, ``retry_exceptions=False``).
- **Resources.** ``ceil(measure.cpus_per_cell)`` CPUs (at least ``measure.threads`` when that is set), and the
  cell runs with that many torch threads (``measure.threads`` when set); GPUs
  from ``measure.gpus_per_cell`` (auto: one for a model on ``cuda``, or on ``device: auto`` when the cluster
  has GPUs). A cell reserving no GPU sees none. A cell no node of the cluster could ever run fails at once.
- **Overlap.** Every task reports its start (node, time) to a registry actor, so the runner knows which cells
  were still running beside the one it records (``accel.measure.overlap``).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, UnavailableError
from accel.sweep.spec import CellSpec
from accel.sweep.workers import FAULT_ENV, Pending, failure, run_supervised

RETRIES = 1  # a lost worker or node: the cell runs again, once, wherever Ray puts it
WATCH_S = 10.0  # while waiting for a cell: how often to check that some node alive can still run it


class _Registry:
    """The cells that started, with their node and start time (a Ray actor for one sweep)."""

    def __init__(self) -> None:
        self.cells: dict[str, tuple[str, float]] = {}
        self.attempts: dict[str, int] = {}

    def started(self, key: str, node: str, when: float) -> int:
        """Note a cell's start; returns which attempt this is (2: Ray retried it after losing a worker)."""
        self.cells[key] = (node, when)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]

    def snapshot(self) -> dict[str, tuple[str, float]]:
        return dict(self.cells)

    def attempt(self, key: str) -> int | None:
        return self.attempts.get(key)


def _ray_cell(
    spec: CellSpec, fault: str, verbose: bool, threads: int, timeout_s: float, registry: Any
) -> dict[str, Any]:
    """In a Ray worker: report the start, run the cell in a child process, return its record and files."""
    import ray

    started = time.time()
    node = socket.gethostname()
    # Not waited for: a task blocked in ray.get lends its CPU to another task (Ray's "yielding resources while
    # blocked"), which then shares the node's cores with this cell. The driver reads the attempt afterwards.
    with contextlib.suppress(Exception):  # without the report the runner only misses this cell while it runs
        registry.started.remote(spec.key, node, started)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if not ray.get_gpu_ids():
        env["CUDA_VISIBLE_DEVICES"] = ""  # Ray >= 2.48 leaves GPUs visible to tasks that reserved none
    from accel.sweep import ranks

    if ranks.is_parallel(spec):  # its ranks on this node, from this task's reservation (every rank's share)
        record = ranks.run_ranks(spec, timeout_s, max(1, threads // ranks.world_size(spec)))  # each rank its share
    else:
        record = run_supervised(spec, timeout_s, fault, verbose, threads, env)
    timing = record.setdefault("timing", {})
    timing.update(node=timing.get("node") or node, start=started, end=time.time())
    timing["ray_node"] = ray.get_runtime_context().get_node_id()
    return record


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ConfigError when nothing accepts connections at ``host:port`` (Ray itself retries for minutes)."""
    host, _, port = address.rpartition(":")
    if host.startswith("ray://"):
        host = host[len("ray://") :]
    if not host or not port.isdigit():
        raise ConfigError(f"--ray-address {address}: expected host:port (the head's GCS address) or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ConfigError(
            f"--ray-address {address}: no Ray head answers there ({error.strerror or error}); start one with "
            "`ray start --head` or pass the address `ray start` printed"
        ) from None


def _missing_paths(paths: list[str]) -> tuple[str, list[str]]:
    """On one node: its host name and which of ``paths`` are not checkpoint directories there."""
    return socket.gethostname(), [p for p in paths if not (Path(p).expanduser() / "model_index.json").is_file()]


class RaySubmitter:
    """``submit(cell) -> Pending`` on Ray; ``started()`` for overlaps, ``check_sources`` before the first cell."""

    def __init__(self, timeout_s: float, address: str | None) -> None:
        import ray

        if not ray.is_initialized():
            passed = {k: v for k, v in os.environ.items() if k.startswith(("OMNI_ACCEL_", "HF_"))}
            if passed.get("OMNI_ACCEL_ZOO_DIR"):  # a relative zoo directory would land in each node's cwd
                passed["OMNI_ACCEL_ZOO_DIR"] = str(Path(passed["OMNI_ACCEL_ZOO_DIR"]).expanduser().resolve())
            if address and address != "auto":
                check_reachable(address)
            try:
                ray.init(
                    address=address,
                    runtime_env={"env_vars": passed},
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except Exception as error:  # a wrong token, a version mismatch, a head that went away
                first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
                raise UnavailableError(
                    f"--ray-address {address}: cannot join the Ray cluster: {type(error).__name__}: {first} "
                    "(with token authentication every process needs RAY_AUTH_MODE=token and the cluster's "
                    "RAY_AUTH_TOKEN; see the manual, docs/ray.md: Running on a Ray cluster)"
                ) from None
        self.ray = ray
        self.timeout_s = timeout_s
        self.nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.cluster_gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in self.nodes)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # On the head node: a worker node's death must not take it along (the cluster dies with its head anyway).
        # Not "beside the driver": with two nodes on one host the driver may be attached to the worker node.
        head = next((n["NodeID"] for n in self.nodes if "node:__internal_head__" in n.get("Resources", {})), None)
        here: Any = NodeAffinitySchedulingStrategy(head, soft=True) if head else "DEFAULT"
        # An actor handle: its methods are called through .remote(), which ray's types do not follow.
        self.registry: Any = ray.remote(num_cpus=0)(_Registry).options(scheduling_strategy=here).remote()
        self.remote = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_ray_cell)

    def gpus_for(self, spec: CellSpec) -> float:
        """The GPUs a cell reserves: ``measure.gpus_per_cell``, or for ``auto`` one when it would use a GPU."""
        asked = spec.measure.gpus_per_cell
        if asked != "auto":
            return float(asked)
        device = spec.model.device
        return 1.0 if device.startswith("cuda") or (device == "auto" and self.cluster_gpus > 0) else 0.0

    def unschedulable(self, spec: CellSpec, cpus: int, gpus: float) -> str | None:
        """Why no node of the cluster can ever run the cell, or None."""
        if any(n["Resources"].get("CPU", 0) >= cpus and n["Resources"].get("GPU", 0) >= gpus for n in self.nodes):
            return None
        have = "; ".join(
            f"{n.get('NodeManagerAddress', '?')}: {n['Resources'].get('CPU', 0):g} CPU, "
            f"{n['Resources'].get('GPU', 0):g} GPU"
            for n in self.nodes
        )
        why = "the Ray cluster has no GPU" if gpus and not self.cluster_gpus else "no node of the Ray cluster has that"
        return (
            f"cannot be scheduled: the cell asks for {cpus} CPU(s) and {gpus:g} GPU(s) (measure.cpus_per_cell, "
            f"measure.gpus_per_cell: {spec.measure.gpus_per_cell}, device {spec.model.device}) and {why} "
            f"({have or 'no node alive'})"
        )

    def reservation(self, spec: CellSpec) -> tuple[int, float]:
        """(CPUs, GPUs) the cell's task reserves: ``measure.cpus_per_cell`` (at least ``measure.threads``) and
        ``gpus_for`` per rank, times the ranks of a parallel cell. One task's resources are granted together on
        one node or not at all, so a parallel cell holds every rank's share before any rank starts, never part
        of it (its ranks are processes the task starts on that node: a placement group of one bundle per rank
        would reserve the same)."""
        from accel.sweep import ranks

        world = ranks.world_size(spec)
        cpus = max(math.ceil(spec.measure.cpus_per_cell) * world, spec.measure.threads or 0)
        return cpus, self.gpus_for(spec) * world

    def __call__(self, spec: CellSpec) -> Pending:
        ray = self.ray
        cpus, gpus = self.reservation(spec)
        reason = self.unschedulable(spec, cpus, gpus)
        if reason:
            record = failure(spec, reason)
            record["timing"] = {"cpus": cpus, "gpus": gpus}
            return Pending(lambda: record)
        fault = os.environ.get(FAULT_ENV, "")
        verbose = os.environ.get("OMNI_ACCEL_VERBOSE") == "1"
        ref = self.remote.options(num_cpus=cpus, num_gpus=gpus).remote(
            spec, fault, verbose, spec.measure.threads or cpus, self.timeout_s, self.registry
        )

        def collect() -> dict[str, Any]:
            try:
                while not ray.wait([ref], timeout=WATCH_S)[0]:
                    # Nodes may have left since the start: a cell no node left can run would wait forever.
                    self.nodes = [n for n in ray.nodes() if n.get("Alive")]
                    self.cluster_gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in self.nodes)
                    lost = self.unschedulable(spec, cpus, gpus)
                    if lost:
                        ray.cancel(ref, force=True)
                        record = failure(spec, f"{lost}; nodes were lost during the sweep")
                        record["timing"] = {"cpus": cpus, "gpus": gpus}
                        return record
                record = ray.get(ref)
                with contextlib.suppress(Exception):  # the registry may be gone with its node: attempt unknown
                    record.setdefault("timing", {})["attempt"] = ray.get(
                        self.registry.attempt.remote(spec.key), timeout=30
                    )
            except ray.exceptions.RayError as error:  # infrastructure, after Ray's retries
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                record = failure(spec, f"ray task failed: {type(error).__name__}: {first[:200]}")
            record.setdefault("timing", {}).update(cpus=cpus, gpus=gpus)
            return record

        def ready() -> bool:
            return bool(ray.wait([ref], timeout=0)[0])

        return Pending(collect, cancel=lambda: ray.cancel(ref, force=True), ready=ready)

    def started(self) -> dict[str, tuple[str, float]]:
        """The cells that reported their start: key -> (node, epoch seconds); empty if the registry is gone."""
        try:
            started: dict[str, tuple[str, float]] = self.ray.get(self.registry.snapshot.remote(), timeout=30)
            return started
        except Exception:  # the overlap of running cells is then unknown, never a reason to stop the sweep
            return {}

    def check_sources(self, models: list[Any], source: str) -> None:
        """Every checkpoint given as a path is a checkpoint directory on every alive node; a ConfigError naming
        the path and the node otherwise. Zoo names are built on each node; hub ids come from each node's cache."""
        from accel import zoo
        from accel.zoo import synthetic

        paths = {
            index: model.source
            for index, model in enumerate(models)
            if not zoo.is_zoo_name(model.source)
            and not synthetic.is_synthetic(model.source)
            and Path(model.source).expanduser().exists()
        }
        if not paths:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(num_cpus=0, max_retries=0)(_missing_paths)
        refs = [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                sorted(set(paths.values()))
            )
            for n in self.nodes
        ]
        for node, (host, missing) in zip(self.nodes, self.ray.get(refs, timeout=120), strict=True):
            for index, path in paths.items():
                if path in missing:
                    where = f"{node.get('NodeManagerAddress', '?')} (host {host}, id {node['NodeID'][:12]})"
                    raise ConfigError(
                        f"{source}: models[{index}].source: '{path}' is not a checkpoint directory on Ray node "
                        f"{where}: Ray workers read checkpoints from their own disks; put it on storage every node "
                        "mounts at the same absolute path, or use a zoo name (built on each node)"
                    )
