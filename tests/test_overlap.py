"""Which cells ran beside which (accel.measure.overlap) and exclusive timing (accel.measure.contention)."""

from __future__ import annotations

import threading
import time

from accel.measure.contention import timing_window
from accel.measure.overlap import attach_overlap, running_spans, shared_reason, span


def _record(variant, start, end, timed=None, node="a", exclusive=False):
    timing = {"node": node, "start": start, "end": end, "exclusive": exclusive}
    if timed:
        timing.update(timed_start=timed[0], timed_end=timed[1])
    return {"model": "m", "variant": variant, "timing": timing}


def test_a_cell_timed_while_another_ran_on_its_node_is_shared_and_its_claim_says_why():
    mine = _record("v", 10, 20, timed=(12, 18))
    others = [
        span(_record("loading-before", 0, 11, timed=(2, 9))),  # overlaps the cell, not its timing phase
        span(_record("elsewhere", 10, 20, timed=(12, 18), node="b")),  # another host
        span(_record("during", 17, 30, timed=(25, 29))),  # its load ran during my timing phase
    ]
    attach_overlap(mine, [o for o in others if o])
    timing = mine["timing"]
    assert timing["overlapped"] == ["m/during", "m/loading-before"]
    assert timing["shared_node"] is True and timing["shared_with"] == ["m/during"]
    assert "timed while other cells ran on its node a (m/during)" in shared_reason(mine)


def test_exclusive_timing_counts_only_other_timing_phases_and_running_cells_are_open_ended():
    mine = _record("v", 10, 20, timed=(12, 18), exclusive=True)
    others = [span(_record("during", 17, 30, timed=(25, 29)))]  # loading beside my timing phase: allowed
    attach_overlap(mine, others)
    assert mine["timing"]["overlapped"] == ["m/during"] and mine["timing"]["shared_node"] is False
    assert shared_reason(mine) is None
    # A cell still running (started, no record yet) overlaps everything after its start.
    alone = _record("w", 10, 20, timed=(12, 18))
    attach_overlap(alone, running_spans({"m/late": ("a", 15.0), "m/w": ("a", 10.0)}, finished={"m/w"}))
    assert alone["timing"]["shared_with"] == ["m/late"]


def test_exclusive_windows_on_one_node_never_overlap():
    windows = []

    def cell():
        window = {}
        with timing_window(True, window):
            time.sleep(0.2)
        windows.append(window)

    threads = [threading.Thread(target=cell) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = sorted(windows, key=lambda w: w["timed_start"])
    assert first["timed_end"] <= second["timed_start"], "the second cell timed while the first did"
    assert second["lock_wait_s"] > 0.1 and first["exclusive"] is True


def test_an_unreachable_ray_address_is_one_clear_error_not_minutes_of_retries():
    """Ray retries a GCS that never answers for minutes, printing its own log lines (a hostile review saw a
    bad --ray-address hang past 3 minutes): the executor checks the address first."""
    import socket

    import pytest

    from accel.errors import ConfigError
    from accel.sweep.ray_executor import check_reachable

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_reachable(f"127.0.0.1:{port}")  # something listens: Ray takes it from there
    with pytest.raises(ConfigError, match=rf"--ray-address 127\.0\.0\.1:{port}: no Ray head answers there"):
        check_reachable(f"127.0.0.1:{port}")  # closed now
    with pytest.raises(ConfigError, match="expected host:port"):
        check_reachable("localhost")
