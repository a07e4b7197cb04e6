"""A lossy variant's per-step error curve (``accel.diverge.curve``): a cache variant's curve is zero up to its
first skipped step and not after it, for TeaCache, Cache-DiT and a diffusers cache (skips read from evidence)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from features_helpers import REQUEST, loaded

from accel import apply
from accel.diverge.curve import LATENTS_KEY, SKIPPED_KEY, error_curve, step_latents
from accel.features import FEATURES
from accel.sweep.compare import attach_step_error

STEPS = 8
CALL = dataclasses.replace(REQUEST, steps=STEPS)


@pytest.fixture(scope="module")
def flux():
    return loaded("tiny-flux")


@pytest.fixture(scope="module")
def baseline(flux):
    with apply(flux.pipeline, num_inference_steps=STEPS) as applied:
        return step_latents(flux, applied, CALL)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("tea_cache", 0.4),
        ("cache_dit", {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}),
        ("mag_cache", {"threshold": 0.5}),
    ],
)
def test_cache_curve_is_zero_until_the_first_skipped_step_and_not_after(flux, baseline, name, raw):
    config = FEATURES[name].parse_options(raw)
    with apply(flux.pipeline, config, num_inference_steps=STEPS) as applied:
        own = step_latents(flux, applied, CALL)
    skipped = [int(s) for s in own[SKIPPED_KEY]]
    assert skipped, f"{name} skipped no step: the test needs a cache that engages"
    assert len(baseline[LATENTS_KEY]) == len(own[LATENTS_KEY]) == STEPS
    curve = error_curve(baseline[LATENTS_KEY], own[LATENTS_KEY])
    first = skipped[0]
    assert all(error == 0.0 for error in curve[:first]), (curve, skipped)
    assert all(error > 0.0 for error in curve[first:]), (curve, skipped)


def test_baseline_skips_nothing(baseline):
    assert len(baseline[SKIPPED_KEY]) == 0
    assert len(baseline[LATENTS_KEY]) == STEPS


def test_attach_step_error_reads_the_run_files(tmp_path, baseline):
    shifted = {LATENTS_KEY: baseline[LATENTS_KEY].copy(), SKIPPED_KEY: np.asarray([5])}
    shifted[LATENTS_KEY][5:] += 1.0
    np.savez(tmp_path / "base.npz", **baseline)
    np.savez(tmp_path / "var.npz", **shifted)
    record = {"variant": "v", "steps_file": "var.npz"}
    attach_step_error(record, {"variant": "baseline", "steps_file": "base.npz"}, tmp_path)
    error = record["step_error"]
    assert error["skipped_steps"] == [5] and error["first_differing_step"] == 5
    assert error["rel_l2"][:5] == [0.0] * 5 and min(error["rel_l2"][5:]) > 0


def test_sweep_records_a_lossy_variants_drift_and_the_report_shows_it(tmp_path):
    """The sweep: baseline and a cache variant keep their step latents as run files; the variant's record gets
    its curve (zero before its first skipped step, not after) and the report its table and figure; a lossless
    variant makes no extra call."""
    from conftest import small_profile

    from accel.profile import parse_profile
    from accel.sweep.runner import run_sweep

    variants = [
        {"name": "tea", "features": {"tea_cache": 0.4}},
        {"name": "slice", "features": {"vae_use_slicing": True}},
    ]
    profile = small_profile(["tiny-flux"], variants, steps=STEPS)
    profile["measure"]["noise_floor"] = False
    result = run_sweep(parse_profile(profile), "p.yaml", tmp_path, show_progress=False)
    cells = {r["variant"]: r for r in result.records}
    assert (tmp_path / cells["baseline"]["steps_file"]).is_file()
    assert "steps_file" not in cells["slice"] and "step_error" not in cells["slice"]
    error = cells["tea"]["step_error"]
    first = error["skipped_steps"][0]
    assert error["first_differing_step"] == first
    assert all(e == 0.0 for e in error["rel_l2"][:first]) and all(e > 0.0 for e in error["rel_l2"][first:])
    report = result.report_path.read_text()
    assert "### Drift per step" in report and "figures/drift-tiny-flux.png" in report
    assert (tmp_path / "figures" / "drift-tiny-flux.png").is_file()
