"""The rank supervisor the sweep's parallel cells and diverge's ranked side share (``accel.ranksup``): each way
ranks end, told apart, and no rank left running."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from forkserver_race import Interrupted, interrupt_after_the_first_pid, outlived

from accel.ranksup import RankProblem, start_ranks, supervise


def _rank(behaviour: str, path: str) -> None:
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "exit-3":
        raise SystemExit(3)
    if behaviour != "no-output":
        Path(path).write_text("done")


def _run(tmp_path: Path, behaviours: list[str], timeout_s: float = 60.0, grace_s: float = 60.0):
    paths = [str(tmp_path / f"rank{rank}") for rank in range(len(behaviours))]
    ranks: list = []
    start_ranks(multiprocessing.get_context("fork"), _rank, lambda r: (behaviours[r], paths[r]), len(paths), ranks)
    problem = supervise(ranks, paths, time.time() + timeout_s, grace_s)
    assert all(process.exitcode is not None for process in ranks), "a rank outlived its supervisor"
    return problem


def test_ranks_that_all_finish_are_no_problem(tmp_path):
    assert _run(tmp_path, ["ok", "ok"]) is None


def test_a_rank_that_dies_or_writes_nothing_ends_them_all_naming_it(tmp_path):
    assert _run(tmp_path, ["hang", "exit-3"]) == RankProblem("died", 1, 3)
    assert _run(tmp_path, ["no-output", "hang"]) == RankProblem("died", 0, 0)


def test_a_rank_left_running_after_another_finished_is_stuck(tmp_path):
    assert _run(tmp_path, ["ok", "hang"], grace_s=0.5) == RankProblem("stuck", 1, running=(1,))


def test_ranks_past_the_deadline_are_a_timeout_naming_every_running_rank(tmp_path):
    assert _run(tmp_path, ["hang", "hang"], timeout_s=0.5) == RankProblem("timeout", 0, running=(0, 1))


def test_an_interrupt_while_a_forkserver_rank_starts_leaves_no_rank_behind(monkeypatch):
    """A forkserver process starts in two steps: the forkserver forks and sends the pid, then the parent writes
    the process object into the child's pipe. A Ctrl-C between them (here: right after the pid is read) must
    not leave a child waiting for its process object: it held the resource tracker's pipe, so an interrupted
    sweep waited on the tracker forever (CI, two test workers). The interrupt is raised once the process has
    started, and the process is ended."""
    ranks: list = []
    with interrupt_after_the_first_pid(monkeypatch) as pids:
        try:
            start_ranks(multiprocessing.get_context("forkserver"), time.sleep, lambda r: (120,), 2, ranks)
        except Interrupted:
            pass
        else:
            raise AssertionError("the interrupt was lost")
    assert pids, "the forkserver never sent a pid"
    assert not outlived(pids[0]), "the child started during the interrupt outlived it"
