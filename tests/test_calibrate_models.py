"""Calibration on the tiny zoo families: the committed files make TeaCache and MagCache engage beyond FLUX (by the
harness's own work counters), a threshold outside the observed range is refused as inert before anything runs,
and the hooks compute each family's modulated input as the model itself does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from features_helpers import applied_runs, loaded

from accel.calibrate import load_calibration, threshold_status
from accel.calibrate.run import calibrate_pipeline
from accel.features import FEATURES
from accel.features.applied import FeatureUnavailable
from accel.features.teacache_inputs import layout_for

ROOT = Path(__file__).resolve().parents[1]
STEPS = 8  # the committed calibrations' steps (calibration/profile.yaml)


def _file(model: str) -> str:
    return str(ROOT / "calibration" / f"{model}.yaml")


def _tea_threshold(path: str) -> float:
    """Above the largest distance one step adds on any denoiser: a step after a computed one is skipped."""
    fits = [s.tea_cache for s in load_calibration(path).denoisers.values() if s.tea_cache is not None]
    return max(fit.rescaled_change.max for fit in fits) * 1.01


@pytest.mark.parametrize("model", ["tiny-wan22", "tiny-cogvideox", "tiny-ltx-video", "tiny-hunyuan-video"])
def test_tea_cache_with_calibrated_coefficients_engages_and_skips_work(model):
    path = _file(model)
    threshold = _tea_threshold(path)
    assert not threshold_status(path, "tea_cache", threshold).inert
    options = {"rel_l1_thresh": threshold, "calibration": path}
    verdict, _ = applied_runs(loaded(model), "tea_cache", options, runs=2, steps=STEPS, num_frames=5)
    assert verdict.engaged and "skipped" in verdict.summary, verdict.summary
    assert "calibrated (R² " in verdict.summary
    if model == "tiny-wan22":  # one polynomial per denoiser, and both denoisers skip
        by_denoiser = verdict.evidence["cached_steps_by_denoiser_per_run"]
        assert all(run.get("transformer") and run.get("transformer_2") for run in by_denoiser), by_denoiser
        assert set(verdict.evidence["coefficients"]) == {"transformer", "transformer_2"}


@pytest.mark.parametrize("model", ["tiny-ltx-video", "tiny-wan22"])
def test_mag_cache_with_calibrated_ratios_engages(model):
    path = _file(model)
    errors = [s.mag_cache.error.max for s in load_calibration(path).denoisers.values() if s.mag_cache]
    threshold = 3 * max(errors)  # three steps' worth of the largest error: some run of skips fits
    assert not threshold_status(path, "mag_cache", threshold).inert
    options = {"threshold": threshold, "calibration": path, "retention_ratio": 0.0}
    verdict, _ = applied_runs(loaded(model), "mag_cache", options, runs=2, steps=STEPS, num_frames=5)
    assert verdict.engaged, verdict.summary


def test_a_threshold_outside_the_observed_range_is_refused_before_anything_runs():
    path = _file("tiny-wan22")
    target = loaded("tiny-wan22")
    largest = max(s.cache_dit.observed.max for s in load_calibration(path).denoisers.values())
    feature = FEATURES["cache_dit"]
    options = feature.parse_options({"residual_diff_threshold": largest * 1.2, "calibration": path})
    support = feature.check(target.pipeline, "cpu", options)
    assert not support.supported
    assert support.reason.startswith(f"inert: residual_diff_threshold {largest * 1.2:g} above every observed")
    assert f"(max {largest:.4g})" in support.reason
    with pytest.raises(FeatureUnavailable, match="inert: residual_diff_threshold"):
        from accel import apply

        apply(target.pipeline, options, num_inference_steps=STEPS)
    smallest = min(s.first_block_cache.observed.min for s in load_calibration(path).denoisers.values())
    fbc = FEATURES["first_block_cache"]
    refused = fbc.check(target.pipeline, "cpu", fbc.parse_options({"threshold": smallest / 2, "calibration": path}))
    assert not refused.supported and "no step would be cached" in refused.reason


def test_a_calibration_made_at_other_steps_refuses_no_threshold_as_inert():
    """tiny-flux's file was made at 8 steps: a first_block_cache threshold below its range is inert there, but at
    50 steps the signal differs (the same threshold skipped block work without the file), so apply() runs it."""
    from accel import apply

    path = _file("tiny-flux")
    smallest = load_calibration(path).denoisers["transformer"].first_block_cache.observed.min
    target = loaded("tiny-flux")
    config = FEATURES["first_block_cache"].parse_options({"threshold": smallest * 0.9, "calibration": path})
    with pytest.raises(FeatureUnavailable, match="no step would be cached"):
        apply(target.pipeline, config, num_inference_steps=STEPS)
    with apply(target.pipeline, config, num_inference_steps=50) as applied:
        assert [feature.name for feature in applied.features] == ["first_block_cache"]
        note = applied.evidence()["first_block_cache"]["calibration_workload"]
        assert note.startswith("calibration of tiny-flux made for another workload (steps 8 there, 50 here)")
    with pytest.raises(FeatureUnavailable, match="no step would be cached"):  # the same size: still judged
        apply(target.pipeline, config, num_inference_steps=STEPS, workload={"height": 64, "width": 64})
    with apply(target.pipeline, config, num_inference_steps=STEPS, workload={"height": 128, "width": 128}):
        pass


def test_a_calibration_of_another_model_is_refused():
    feature = FEATURES["tea_cache"]
    options = feature.parse_options({"rel_l1_thresh": 0.3, "calibration": _file("tiny-wan22")})
    refused = feature.check(loaded("tiny-ltx-video").pipeline, "cpu", options)
    assert not refused.supported and refused.reason.startswith(f"calibration {_file('tiny-wan22')} is of tiny-wan22")


def test_calibrating_a_two_denoiser_pipeline_fits_each_denoiser():
    """tiny-wan22, 1 prompt x 6 steps: a polynomial, ratios and signal ranges per denoiser; the denoisers' steps
    add up to the run's, and each CFG stream gives its own pairs."""
    from accel.targets.adapter import Request

    target = loaded("tiny-wan22")
    request = Request(prompt="a fox", seed=0, steps=6, height=64, width=64, guidance_scale=3.5, num_frames=5)
    calibration = calibrate_pipeline("tiny-wan22", "tiny-wan22", target.pipeline, [request], target.generate, "cmd")
    sections = calibration.denoisers
    assert set(sections) == {"transformer", "transformer_2"}
    steps = {name: s.mag_cache.steps for name, s in sections.items()}
    assert sum(steps.values()) == 6 and all(steps.values())
    for name, section in sections.items():
        assert len(section.mag_cache.mag_ratios) == steps[name]
        assert section.mag_cache.runs == 2  # one list per CFG branch (the pipeline calls each separately)
        assert section.tea_cache.points == 2 * (steps[name] - 1)  # per stream: one pair per call after the first
        assert section.first_block_cache.observed.count == section.cache_dit.observed.count == 2 * (steps[name] - 1)
        assert not section.not_calibrated


def _captured(model: str, module_path: str, pick) -> tuple[torch.Tensor, torch.Tensor]:
    """The modulated input the hooks compute, and the tensor the model computes itself at ``module_path``."""
    target = loaded(model)
    transformer = target.pipeline.transformer
    layout = layout_for(transformer)
    seen: dict[str, torch.Tensor] = {}

    def own(module, args, output):
        seen.setdefault("own", pick(output))

    def ours(module, args, kwargs):
        with torch.no_grad():
            seen.setdefault("ours", layout.modulated(module, kwargs))

    hooks = [
        transformer.get_submodule(module_path).register_forward_hook(own),
        transformer.register_forward_pre_hook(ours, with_kwargs=True),
    ]
    try:
        from features_helpers import generate

        generate(target, steps=2, num_frames=5)
    finally:
        for hook in hooks:
            hook.remove()
    return seen["ours"], seen["own"]


@pytest.mark.parametrize(
    ("model", "module_path", "pick"),
    [
        ("tiny-flux", "transformer_blocks.0.norm1", lambda out: out[0]),
        ("tiny-hunyuan-video", "transformer_blocks.0.norm1", lambda out: out[0]),
        ("tiny-wan", "condition_embedder.time_embedder", lambda out: out),
        ("tiny-cogvideox", "time_embedding", lambda out: out),
    ],
)
def test_the_hooks_compute_the_modulated_input_the_model_computes(model, module_path, pick):
    ours, own = _captured(model, module_path, pick)
    assert ours.shape == own.shape and torch.equal(ours, own)
