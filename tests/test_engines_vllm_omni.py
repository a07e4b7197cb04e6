"""vLLM-Omni as a target, end to end on the CPU: its environment is built when missing (a few minutes,
about 4 GB, from PyPI), then a reduced engines profile runs and is checked against the library."""

from __future__ import annotations

import os

import pytest
from conftest import small_profile

from accel.engines import vllm_omni
from accel.profile import parse_profile
from accel.sweep.runner import run_sweep

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines_run(tmp_path_factory):
    if os.environ.get("OMNI_ACCEL_SKIP_ENGINES") == "1":
        pytest.skip("OMNI_ACCEL_SKIP_ENGINES=1: the vLLM-Omni environment is not built in this run")
    vllm_omni.create_environment()  # idempotent; builds only when missing
    profile = small_profile(
        ["tiny-flux"],
        [
            {"name": "tea-cache", "features": {"tea_cache": 0.4}},
            {"name": "cache-dit", "features": {"cache_dit": {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}}},
            {"name": "model-offload", "features": {"enable_cpu_offload": True}},
            {"name": "group-offload", "features": {"group_offload": {}}},
        ],
        steps=8,
    )
    profile["models"] = [
        {"name": "library", "source": "tiny-flux", "target": "adapter"},
        {"name": "native", "source": "tiny-flux", "target": "native"},
        {"name": "omni-native", "source": "tiny-flux", "target": "vllm-omni"},
        {"name": "omni-adapter", "source": "tiny-flux", "target": "vllm-omni-adapter"},
    ]
    profile["measure"] = {"warmup": 0, "repeats": 1, "executor": "process", "noise_floor": False,
                          "reference_model": "library", "timeout_s": 300}  # fmt: skip
    run_dir = tmp_path_factory.mktemp("engines")
    return run_sweep(parse_profile(profile), "engines.yaml", run_dir, show_progress=False)


def _cell(run, model, variant):
    return next(r for r in run.records if (r["model"], r["variant"]) == (model, variant))


def test_every_target_matches_the_library(engines_run):
    for model in ("native", "omni-native", "omni-adapter"):
        baseline = _cell(engines_run, model, "baseline")
        assert baseline["status"] == "ok", (model, baseline.get("error"))
        parity = baseline["parity_vs_reference"]
        assert parity["ssim"] >= 0.999, (model, parity)  # the engines' 8-bit output rounds by <= 1/255
    assert _cell(engines_run, "native", "baseline")["parity_vs_reference"]["bit_identical"]


def test_rejections_and_cpu_skips_are_unsupported_with_vllm_omnis_reason(engines_run):
    rejected = _cell(engines_run, "omni-adapter", "cache-dit")
    assert rejected["status"] == "unsupported"
    assert "rejected by vllm-omni-adapter: any cache_backend is rejected" in rejected["error"]
    skipped = _cell(engines_run, "omni-native", "model-offload")
    assert skipped["status"] == "unsupported" and "does not support CPU offloading" in skipped["error"]
    assert "not diffusers group offload" in _cell(engines_run, "omni-native", "group-offload")["error"]


def test_engine_cells_are_measured_from_outside(engines_run):
    omni = _cell(engines_run, "omni-native", "baseline")
    assert omni["cold_s"] > omni["warm"]["median"] > 0 and omni["process_wall_s"] >= omni["cold_s"]
    tea = _cell(engines_run, "omni-native", "tea-cache")
    assert tea["status"] in ("ok", "failed")  # failed only when the engine accepted it without effect
    if tea["status"] == "ok":
        assert tea["engine_kwargs"]["cache_backend"] == "tea_cache"
        assert not tea["parity"]["bit_identical"]
    report = engines_run.report_path.read_text()
    assert "## Targets against `library`" in report and "| omni-adapter | vllm-omni-adapter |" in report
