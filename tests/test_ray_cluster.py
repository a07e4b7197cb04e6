"""Ray as a team runs it: a two-node cluster started here with ``ray start`` (head, then a second node with
``--address``), each node from its own working directory, and the sweep driven with ``--ray-address`` and a
relative ``--out``. Every cell's record and outputs reach the driver, a SIGKILLed driver is resumed, overlap is
recorded; a cell that segfaults is failed and not retried; a cell asking for a GPU the cluster lacks fails at
once; a checkpoint path the nodes do not have is refused up front naming the node.

Slow (two Ray nodes on 2 cores, ~2 minutes), but part of ``make test``: this is the only test of multi-node Ray.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import small_profile

pytest.importorskip("ray", reason="Ray is a dev dependency: pip install -e '.[dev]'")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(log: Path, text: str, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in (log.read_text(errors="replace") if log.is_file() else ""):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"ray start did not report '{text}':\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and a second node, one CPU each, token authentication on, each started from its own directory;
    stopped in teardown by killing each node's process group (``ray stop`` would stop every Ray of this user)."""
    root = tmp_path_factory.mktemp("ray-cluster")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(16),
        RAY_USAGE_STATS_ENABLED="0",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        OMNI_ACCEL_ZOO_DIR=str(Path(os.environ["OMNI_ACCEL_ZOO_DIR"]).resolve()),
    )
    address = f"127.0.0.1:{_free_port()}"
    # Its own temp dir: the head's address file there, not in /tmp/ray where a later local ray.init() would
    # find it and try to join this (then stopped) cluster. Short: Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="oa-ray-", dir="/tmp")
    common = ["--block", "--num-cpus=1", "--object-store-memory=100000000", "--node-ip-address=127.0.0.1",
              f"--temp-dir={ray_tmp}"]  # fmt: skip
    nodes = []
    for name, args in (
        ("head", ["--head", f"--port={address.split(':')[1]}", "--include-dashboard=false"]),
        ("worker", [f"--address={address}"]),
    ):
        cwd = root / name
        cwd.mkdir()
        log = root / f"{name}.log"
        with log.open("w") as out:
            node = subprocess.Popen(
                [RAY, "start", *args, *common], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        nodes.append(node)
        _wait_for(log, "Ray runtime started", node)
    driver = root / "driver"
    driver.mkdir()
    try:
        yield {"address": address, "env": env, "root": root, "driver": driver}
    finally:
        for node in reversed(nodes):
            for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 15)):
                try:
                    os.killpg(node.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    node.wait(grace)
                    os.killpg(node.pid, signal.SIGKILL)  # what the node started (raylet, workers) goes too
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    continue
                break
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _sweep(cluster, profile: dict, *args: str, env: dict | None = None, timeout: float = 600):
    path = cluster["driver"] / f"{profile['name']}.yaml"
    path.write_text(yaml.safe_dump(profile))
    command = [sys.executable, "-m", "accel", "sweep", path.name, "--executor", "ray",
               "--ray-address", cluster["address"], *args]  # fmt: skip
    return subprocess.run(
        command, cwd=cluster["driver"], env={**cluster["env"], **(env or {})}, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _profile(name: str, variants: list[dict], **measure) -> dict:
    profile = small_profile(["tiny-flux"], variants, height=32, width=32)
    profile["name"] = name
    profile["measure"] = {**profile["measure"], "executor": "ray", "timeout_s": 300, **measure}
    return profile


def test_two_nodes_without_shared_run_directory_resume_after_sigkill_and_overlap_on_record(cluster):
    variants = [
        {"name": "math", "features": {"attention_backend": "_native_math"}},
        {"name": "native", "features": {"attention_backend": "native"}},
    ]
    profile = _profile("two-nodes", variants)
    path = cluster["driver"] / "two-nodes.yaml"
    path.write_text(yaml.safe_dump(profile))
    command = [sys.executable, "-m", "accel", "sweep", path.name, "--executor", "ray",
               "--ray-address", cluster["address"], "--out", "rel"]  # fmt: skip
    driver = subprocess.Popen(
        command, cwd=cluster["driver"], env=cluster["env"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    run_dir = cluster["driver"] / "rel"
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and (not results.is_file() or not results.read_text().strip()):
        assert driver.poll() is None, "the sweep ended before its first cell was recorded"
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver only: the cluster lives on
    driver.wait()
    before = _records(run_dir)
    assert 1 <= len(before) < 4, "the kill should land mid-sweep"

    resumed = _sweep(cluster, profile, "--resume", "rel")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = _records(run_dir)
    assert sorted((r["model"], r["variant"]) for r in records) == sorted(
        ("tiny-flux", v) for v in ("baseline", "noise-floor", "math", "native")
    ), "every cell exactly once"
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    for record in records:  # every output at the driver, nothing in the nodes' working directories
        assert (run_dir / record["outputs_file"]).is_file()
        timing = record["timing"]
        assert timing["executor"] == "ray" and timing["node"] == socket.gethostname() and timing["threads"] == 1
        assert timing["start"] < timing["timed_start"] < timing["timed_end"] < timing["end"]
    for node in ("head", "worker"):
        assert not list((cluster["root"] / node).iterdir()), f"the {node} node wrote into its working directory"
    # Two one-CPU nodes on one host: the resumed cells ran two at a time, beside each other.
    resumed_cells = [r for r in records if r["variant"] not in {b["variant"] for b in before}]
    assert len({r["timing"]["ray_node"] for r in resumed_cells}) == 2
    shared = [r for r in resumed_cells if r["timing"]["shared_node"]]
    assert shared and all(r["timing"]["overlapped"] for r in shared)
    for record in shared:
        if record.get("speedup_ci"):
            assert record["speedup_ci"]["verdict"] == "unverified"
            assert "timed while other cells ran on its node" in record["speedup_ci"]["reason"]
    assert "- Cells ran on: " in (run_dir / "report.md").read_text()


def test_a_segfault_is_failed_not_retried_and_a_gpu_cell_on_a_cpu_cluster_fails_at_once(cluster):
    profile = _profile("faults", [{"name": "seg", "features": {"attention_backend": "native"}}], noise_floor=False)
    profile["models"].append({"name": "on-gpu", "source": "tiny-flux", "device": "cuda"})
    started = time.monotonic()
    run = _sweep(cluster, profile, "--out", "faults", env={"OMNI_ACCEL_FAULT": "segfault:tiny-flux/seg"})
    assert run.returncode == 1, run.stderr[-3000:]  # every cell of on-gpu failed
    by_cell = {(r["model"], r["variant"]): r for r in _records(cluster["driver"] / "faults")}
    assert by_cell["tiny-flux", "baseline"]["status"] == "ok"
    segfault = by_cell["tiny-flux", "seg"]
    assert segfault["status"] == "failed"
    phase = r" during the worker's start \(its last \d+ s\)"  # the supervisor names the worker's phase
    assert re.fullmatch("worker died with signal SIGSEGV" + phase, segfault["error"])
    assert segfault["timing"]["attempt"] == 1, "a cell's own crash is never retried"
    for variant in ("baseline", "seg"):
        record = by_cell["on-gpu", variant]
        assert record["status"] == "failed" and "cannot be scheduled" in record["error"]
        assert "the Ray cluster has no GPU" in record["error"] and "start" not in record["timing"]
    assert time.monotonic() - started < 300  # not after the 300 s timeout of each GPU cell


def test_a_relative_checkpoint_path_is_read_from_the_drivers_directory_on_every_node(cluster):
    from accel import zoo

    (cluster["driver"] / "ckpt").symlink_to(zoo.build("tiny-flux"))  # relative: the nodes' cwds lack it
    profile = _profile("paths", [])
    profile["models"] = [{"name": "local", "source": "ckpt"}]
    run = _sweep(cluster, profile, "--out", "paths", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    records = _records(cluster["driver"] / "paths")
    assert records and all(r["status"] == "ok" for r in records), records


def test_a_checkpoint_a_node_lacks_is_refused_up_front_naming_the_node(tmp_path):
    """On one host every node sees the driver's files, so the refusal is checked with a node that lacks them."""
    from accel.errors import ConfigError
    from accel.profile import ModelSpec
    from accel.sweep.ray_executor import RaySubmitter

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model_index.json").write_text("{}")

    class Probe:
        def options(self, **_):
            return self

        def remote(self, paths):
            return "elsewhere", list(paths)  # what _missing_paths returns on a node without the checkpoint

    class FakeRay:
        def remote(self, **_):
            return lambda fn: Probe()

        def get(self, refs, timeout=None):
            return refs

    submitter = RaySubmitter.__new__(RaySubmitter)
    submitter.ray = FakeRay()
    submitter.nodes = [{"NodeID": "ab" * 28, "NodeManagerAddress": "10.0.0.2"}]
    with pytest.raises(
        ConfigError,
        match=rf"p\.yaml: models\[0\]\.source: '{re.escape(str(checkpoint))}' is not a checkpoint directory on "
        r"Ray node 10\.0\.0\.2 \(host elsewhere, id abababababab\): .* or use a zoo name",
    ):
        submitter.check_sources([ModelSpec(name="local", source=str(checkpoint))], "p.yaml")


def test_a_waiting_cell_no_node_left_can_run_fails_instead_of_waiting_forever(monkeypatch):
    """A node dies and no node alive has what a cell asks for: Ray would keep it pending for ever."""
    from accel.profile import Measure, ModelSpec, Workload
    from accel.sweep import ray_executor
    from accel.sweep.spec import CellSpec

    class FakeRay:
        exceptions = type("exceptions", (), {"RayError": RuntimeError})

        def __init__(self):
            self.cancelled = []

        def wait(self, refs, timeout):
            return [], refs  # never ready

        def nodes(self):
            return [{"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 8}}]  # the GPU node left

        def cancel(self, ref, force):
            self.cancelled.append(ref)

    class FakeRemote:
        def options(self, **resources):
            return self

        def remote(self, *args):
            return "ref"

    monkeypatch.setattr(ray_executor, "WATCH_S", 0)
    submitter = object.__new__(ray_executor.RaySubmitter)
    submitter.ray, submitter.remote, submitter.registry, submitter.timeout_s = FakeRay(), FakeRemote(), None, 60
    submitter.nodes = [{"Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 8, "GPU": 1}}]
    submitter.cluster_gpus = 1
    model = ModelSpec(name="m", source="tiny-flux", device="cuda")
    spec = CellSpec(model, Workload(prompts=["a"], seeds=[0], steps=2, height=32, width=32), Measure(), "baseline")
    record = submitter(spec).result()
    assert record["status"] == "failed" and submitter.ray.cancelled == ["ref"]
    assert "cannot be scheduled" in record["error"] and "the Ray cluster has no GPU" in record["error"]
    assert record["error"].endswith("nodes were lost during the sweep")


def test_a_parallel_cell_reserves_every_ranks_share_in_one_task_or_is_refused(monkeypatch):
    """Ray grants one task's resources together on one node or not at all: a two-rank cell asks for two ranks'
    CPUs and GPUs in its one task (never one GPU for two ranks), and a cluster whose largest node has fewer
    GPUs than ranks fails the cell before anything starts."""
    from accel.profile import Measure, ModelSpec, Workload
    from accel.sweep import ray_executor
    from accel.sweep.spec import CellSpec

    asked = []

    class FakeRemote:
        def options(self, **resources):
            asked.append(resources)
            return self

        def remote(self, *args):
            return "ref"

    submitter = object.__new__(ray_executor.RaySubmitter)
    submitter.ray, submitter.remote, submitter.registry, submitter.timeout_s = None, FakeRemote(), None, 60
    submitter.nodes = [{"Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 8, "GPU": 2}}]
    submitter.cluster_gpus = 2
    workload = Workload(prompts=["a"], seeds=[0], steps=2, height=32, width=32)
    model = ModelSpec(name="m", source="tiny-flux", device="cuda")
    parallel = {"context_parallel": {"ulysses": 2}}
    spec = CellSpec(model, workload, Measure(cpus_per_cell=2), "ulysses-2", features=parallel)
    assert submitter.reservation(spec) == (4, 2.0)
    assert submitter.reservation(CellSpec(model, workload, Measure(cpus_per_cell=2), "baseline")) == (2, 1.0)
    submitter(spec)
    assert asked == [{"num_cpus": 4, "num_gpus": 2.0}]
    submitter.nodes = [{"Alive": True, "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 8, "GPU": 1}}] * 2
    record = submitter(spec).result()  # two one-GPU nodes: two GPUs in the cluster, never two on one node
    assert record["status"] == "failed" and "asks for 4 CPU(s) and 2 GPU(s)" in record["error"], record["error"]
    assert "no node of the Ray cluster has that" in record["error"] and len(asked) == 1  # nothing was submitted
