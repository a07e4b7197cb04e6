"""Measurements a reviewer can trust: stages add up, FLOPs match an analytic count, the floor catches
an unsynchronised timer, memory and environment are recorded, the noise floor is measured."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import small_profile

from accel.measure.flops import count_flops, measure_cpu_peak, roofline
from accel.measure.timing import summarize
from accel.profile import parse_profile
from accel.sweep.runner import attach_roofline, run_sweep


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    profile = parse_profile(
        {
            **small_profile(["tiny-flux", "tiny-wan", "tiny-qwen-image"], negative_prompt="blurry"),
            "measure": {"warmup": 1, "repeats": 3, "executor": "inline"},
        }
    )
    return run_sweep(profile, "t.yaml", tmp_path_factory.mktemp("measure"), show_progress=False)


def _baselines(run):
    return [r for r in run.records if r["variant"] == "baseline"]


def test_stages_add_up_to_the_end_to_end_time(zoo_run):
    for record in _baselines(zoo_run):
        stages = record["stages"]
        # Each call's stages against the same call timed outside the recorder, independently.
        for stage_sum, outer in zip(record["stage_sums"], record["warm_samples"], strict=True):
            assert abs(stage_sum - outer) / outer < 0.05, (record["model"], stage_sum, outer)
        assert stages["denoising"] > 0 and stages["vae_decode"] > 0 and stages["text_encoding"] > 0
        assert stages["steps_per_call"] == 2 and len(record["step_times"]) == 2 * 3  # 2 steps x 3 repeats
        assert stages["component_share"] > 0.5  # the hooks saw most of the call


def test_cfg_models_call_the_denoiser_twice_per_step(zoo_run):
    calls = {r["model"]: r["denoiser_calls_per_call"] for r in _baselines(zoo_run)}
    assert calls == {"tiny-flux": 2, "tiny-wan": 4, "tiny-qwen-image": 4}  # Flux is guidance-distilled


def test_flop_counter_matches_an_analytic_count():
    batch, tokens, dim, heads = 2, 16, 32, 4

    class TinyBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.out = torch.nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(batch, tokens, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            attention = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.out(attention.transpose(1, 2).reshape(batch, tokens, dim))

    analytic = 2 * batch * tokens * dim * 3 * dim + 2 * batch * tokens * dim * dim  # the two linears
    analytic += 2 * (2 * batch * heads * tokens * tokens * (dim // heads))  # QK^T and AV
    assert count_flops(TinyBlock(), (torch.randn(batch, tokens, dim),), {}) == analytic


def test_an_unsynchronised_timer_is_caught_by_the_floor(zoo_run):
    baseline = _baselines(zoo_run)[0]
    assert baseline["roofline"]["below_floor"] is False and 0 < baseline["roofline"]["mfu"] < 1
    # A host clock read right after an asynchronous launch: the steps "take" a microsecond.
    fake = {**baseline, "variant": "fake", "features": {}, "step_times": [1e-6] * 4}
    attach_roofline(fake, baseline)
    assert fake["roofline"]["below_floor"] is True
    assert "below the" in fake["invalid_measurement"] and "floor" in fake["invalid_measurement"]
    from accel.report.markdown import model_table

    assert "INVALID" in model_table([fake])


def test_floor_is_not_applied_to_cache_variants():
    result = roofline(1e9, 1e12, [1e-3])
    assert result["below_floor"] is False and math.isclose(result["mfu"], 1.0)
    baseline = {"flops_per_denoiser_call": 1e12, "denoiser_calls_per_call": 2, "stages": {"steps_per_call": 2}}
    cached = {"features": {"tea_cache": 0.3}, "step_times": [1e-9], "peak_flops": 1e12}
    attach_roofline(cached, baseline)
    assert cached["roofline"]["floor_check"].startswith("not applicable: a cache skips work")
    assert "invalid_measurement" not in cached


def test_memory_fields_are_present_and_positive(zoo_run):
    for record in _baselines(zoo_run):
        assert record["peak_host_rss_bytes"] > 0 and record["memory_load"]["host_rss_peak"] > 0
        assert record["host_pss_bytes"] is None or record["host_pss_bytes"] > 0
        assert record["weight_bytes"]["transformer"] > 0
        if record["device"].startswith("cuda"):  # device memory is measured where there is a device
            assert record["peak_device_allocated_bytes"] > 0
        else:
            assert record["peak_device_allocated_bytes"] is None


def test_environment_and_noise_floor_are_recorded(zoo_run):
    import json

    environment = json.loads((zoo_run.run_dir / "environment.json").read_text())
    assert environment["packages"]["torch"].startswith("2.13") and environment["cpu"]
    assert environment["profile_fingerprint"] and "git_commit" in environment
    reruns = [r for r in zoo_run.records if r.get("role") == "noise_floor"]
    assert len(reruns) == 3
    for rerun in reruns:
        assert rerun["parity"]["bit_identical"]  # CPU fp32: the baseline reproduces exactly
        assert rerun["speedup"] > 0
    report = zoo_run.report_path.read_text()
    assert "Noise floor (the baseline re-run" in report and "### Stages" in report and "MFU" in report


def test_timing_statistics():
    stats = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert stats.median == 3.0 and stats.min == 1.0 and stats.max == 10.0 and stats.p90 == 10.0
    assert stats.cv == pytest.approx(statistics_stdev([1, 2, 3, 4, 10]) / 4.0)
    assert measure_cpu_peak(size=256, repeats=2) > 1e8


def statistics_stdev(values):
    import statistics

    return statistics.stdev(values)
