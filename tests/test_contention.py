"""The contention meter: other processes' CPU time beside a timed window, and a virtual machine's steal time."""

from __future__ import annotations

import pytest

from accel.measure import contention
from accel.measure.contention import CONTENDED_CORES, ContentionMeter


def _readings(monkeypatch: pytest.MonkeyPatch, clock, busy, steal, own) -> None:
    series = {name: iter(values) for name, values in (("clock", clock), ("busy", busy), ("steal", steal), ("own", own))}
    monkeypatch.setattr(contention.time, "perf_counter", lambda: next(series["clock"]))
    monkeypatch.setattr(contention, "machine_busy_seconds", lambda: next(series["busy"]))
    monkeypatch.setattr(contention, "machine_steal_seconds", lambda: next(series["steal"]))
    monkeypatch.setattr(contention, "_tree_cpu_seconds", lambda process: next(series["own"]))


def test_steal_time_is_counted_beside_the_window_and_shown_on_its_own(monkeypatch: pytest.MonkeyPatch):
    # Over 2 s of wall time the machine worked 3 s, this process 1 s of it, and the host stole 1 s.
    _readings(monkeypatch, clock=[100.0, 102.0], busy=[50.0, 53.0], steal=[7.0, 8.0], own=[4.0, 5.0])
    with ContentionMeter() as meter:
        pass
    result = meter.result
    assert result is not None
    assert (result.wall_s, result.own_cores, result.other_cores, result.steal_cores) == (2.0, 0.5, 1.0, 0.5)
    assert result.contended and result.to_dict()["steal_cores"] == 0.5


def test_an_idle_window_is_not_contended(monkeypatch: pytest.MonkeyPatch):
    _readings(monkeypatch, clock=[0.0, 4.0], busy=[10.0, 12.1], steal=[1.0, 1.0], own=[3.0, 5.0])
    with ContentionMeter() as meter:
        pass
    result = meter.result
    assert result is not None and result.steal_cores == 0.0
    assert result.other_cores == pytest.approx(0.025) and result.other_cores < CONTENDED_CORES
    assert not result.contended


def test_the_real_counters_give_a_result_in_range():
    with ContentionMeter() as meter:
        sum(i * i for i in range(20000))
    result = meter.result
    assert result is not None and result.wall_s > 0
    assert result.own_cores >= 0 and result.other_cores >= 0 and result.steal_cores >= 0
