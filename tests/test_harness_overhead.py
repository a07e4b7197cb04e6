"""benchmarks/harness_overhead.py: its bare loop runs on a pipeline with nothing of omni-accel installed, and
the stage recorder is timed as a configuration of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from accel.profile import ModelSpec
from accel.targets.adapter import AdapterTarget, Request

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "harness_overhead.py"


def _script():
    spec = importlib.util.spec_from_file_location("harness_overhead", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bare_loop_is_bare_and_the_recorder_is_measured_apart():
    script = _script()
    target = AdapterTarget(ModelSpec(name="overhead", source="tiny-flux", device="cpu"))
    target.load()
    assert script.installed_hooks(target.pipeline) == 0
    result = script.measure(target, Request("a red fox", 0, 1, 32, 32, guidance_scale=3.5), rounds=3, warmup=1)
    assert result["bare_hooks"] == [0, 0, 0]  # checked before each timed bare call
    assert [len(result["samples"][name]) for name in ("bare", "harness", "recorder")] == [3, 3, 3]
    assert len(result["stage_reports"]) == 3  # the recorder ran in its own configuration only
    assert set(result["ratios"]) == {"harness/bare", "recorder/harness", "recorder/bare"}
    for ratio in result["ratios"].values():
        assert ratio["low"] <= ratio["median"] <= ratio["high"]
    assert script.installed_hooks(target.pipeline) == 0  # the recorder removed itself


def test_the_bootstrap_interval_brackets_the_median_and_narrows_with_agreement():
    script = _script()
    assert script.bootstrap_interval([1.0] * 10) == (1.0, 1.0)
    low, high = script.bootstrap_interval([0.9, 1.0, 1.1, 1.0, 0.95, 1.05, 1.0, 0.98, 1.02, 1.0])
    assert 0.9 <= low <= 1.0 <= high <= 1.1
