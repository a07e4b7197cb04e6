"""The sweep's warm-up: the first cell shortened and unrecorded, with the parent's own imports done while it
runs (never beside a measured cell)."""

from __future__ import annotations

import time

from accel.profile import parse_profile
from accel.sweep.runner import plan, sweep_warmup, warmup_spec


def _cells(tmp_path):
    data = {
        "name": "t",
        "models": [{"name": "mini-flux", "source": "mini-flux"}],
        "workload": {"prompts": ["a red circle on the left, on a white background"]},
        "variants": [{"name": "fast", "features": {"cache_dit": {}}}],
        "measure": {"warmup": 3, "repeats": 4},
    }
    return plan(parse_profile(data, "p.yaml"), tmp_path)


class _Pending:
    """A cell that runs when its result is asked for, as the process executor's does."""

    def __init__(self, events, status, seconds=0.0):
        self.events, self.status, self.seconds = events, status, seconds

    def result(self):
        self.events.append(("cell starts", time.perf_counter()))
        time.sleep(self.seconds)
        self.events.append(("cell ends", time.perf_counter()))
        return {"status": self.status}


def test_warmup_spec_runs_one_pass_without_a_warmup_call_and_changes_nothing_else(tmp_path):
    first = _cells(tmp_path)[0]
    warm = warmup_spec(first)
    assert (warm.measure.warmup, warm.measure.repeats) == (0, 1)
    assert (first.measure.warmup, first.measure.repeats) == (3, 4)  # the cell itself keeps its measurement
    assert warm.measure.model_copy(update={"warmup": 3, "repeats": 4}) == first.measure
    assert (warm.key, warm.variant, warm.model) == (first.key, first.variant, first.model)


def test_meanwhile_runs_while_the_warmup_cell_runs_and_ends_before_the_sweep_goes_on(tmp_path):
    events: list[tuple[str, float]] = []
    cells = _cells(tmp_path)

    def meanwhile():
        events.append(("meanwhile starts", time.perf_counter()))
        time.sleep(0.6)  # longer than the cell: only a join makes the sweep wait for it
        events.append(("meanwhile ends", time.perf_counter()))

    assert sweep_warmup(lambda cell: _Pending(events, "ok", seconds=0.3), cells, meanwhile) == {}
    returned = time.perf_counter()
    at = dict(events)
    # overlapped: each began before the other ended (one after the other, they would not)
    assert at["meanwhile starts"] < at["cell ends"] and at["cell starts"] < at["meanwhile ends"]
    assert at["meanwhile ends"] <= returned  # joined: nothing of it runs beside the first measured cell


def test_a_failing_meanwhile_does_not_stop_the_sweep(tmp_path):
    def meanwhile():
        raise ImportError("no torchmetrics here")

    assert sweep_warmup(lambda cell: _Pending([], "ok"), _cells(tmp_path), meanwhile) == {}


def test_a_failed_warmup_is_kept_as_its_cells_result_and_not_run_again(tmp_path):
    cells = _cells(tmp_path)
    pending = _Pending([], "failed")
    assert sweep_warmup(lambda cell: pending, cells) == {cells[0].key: pending}
    assert sweep_warmup(lambda cell: pending, []) == {}
