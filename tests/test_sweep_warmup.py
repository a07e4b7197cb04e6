"""The sweep's warm-up: the first cell shortened and unrecorded, with the parent's own imports done while it
runs (never beside a measured cell)."""

from __future__ import annotations

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
    def __init__(self, events, status):
        self.events, self.status = events, status

    def result(self):
        self.events.append("result")
        return {"status": self.status}


def test_warmup_spec_runs_one_pass_without_a_warmup_call_and_changes_nothing_else(tmp_path):
    first = _cells(tmp_path)[0]
    warm = warmup_spec(first)
    assert (warm.measure.warmup, warm.measure.repeats) == (0, 1)
    assert (first.measure.warmup, first.measure.repeats) == (3, 4)  # the cell itself keeps its measurement
    assert warm.measure.model_copy(update={"warmup": 3, "repeats": 4}) == first.measure
    assert (warm.key, warm.variant, warm.model) == (first.key, first.variant, first.model)


def test_meanwhile_runs_after_the_warmup_is_submitted_and_before_its_result_is_awaited(tmp_path):
    events: list[str] = []
    cells = _cells(tmp_path)

    def submit(cell):
        events.append(f"submit {cell.key}")
        return _Pending(events, "ok")

    assert sweep_warmup(submit, cells, lambda: events.append("meanwhile")) == {}
    assert events == [f"submit {cells[0].key}", "meanwhile", "result"]


def test_a_failed_warmup_is_kept_as_its_cells_result_and_not_run_again(tmp_path):
    cells = _cells(tmp_path)
    pending = _Pending([], "failed")
    assert sweep_warmup(lambda cell: pending, cells) == {cells[0].key: pending}
    assert sweep_warmup(lambda cell: pending, []) == {}
