"""Calibration (issue 44): the TeaCache fit and its quality, the store, and the inert-threshold verdicts.

The fits are checked against the polynomial that generated their points; the verdicts against calibrations built
here, whose ranges are known, so each threshold below, inside or above a range is derived from that range.
"""

from __future__ import annotations

import numpy as np
import pytest

from accel.calibrate import Calibration, load_calibration, save_calibration, threshold_status
from accel.calibrate.fit import average_ratios, fit_tea_cache
from accel.calibration.inert import _mag_skips
from accel.calibration.store import DenoiserCalibration, Percentiles, SignalRange
from accel.errors import ConfigError

TRUE = np.poly1d([3.0, -2.0, 0.5, 0.8, 0.01])  # a degree-4 rescaling, as TeaCache's authors fit


def _runs(noise: float = 0.0, runs: int = 3, steps: int = 8) -> list[list[tuple[float, float]]]:
    rng = np.random.default_rng(0)
    found = []
    for _ in range(runs):
        x = np.sort(rng.uniform(0.05, 0.6, steps - 1))
        y = TRUE(x) + rng.normal(0, noise, x.size)
        found.append([(float(a), float(b)) for a, b in zip(x, y, strict=True)])
    return found


def test_the_fit_recovers_the_polynomial_its_points_came_from():
    fit = fit_tea_cache(_runs(), steps=8)
    assert fit.degree == 4 and fit.points == 21
    assert np.allclose(fit.coefficients, TRUE.coefficients, rtol=1e-6, atol=1e-6)
    assert fit.r2 == pytest.approx(1.0) and fit.residual_rms == pytest.approx(0.0, abs=1e-9)


def test_the_fit_quality_is_the_coefficient_of_determination():
    runs = _runs(noise=0.05)
    fit = fit_tea_cache(runs, steps=8)
    x = np.array([p[0] for run in runs for p in run])
    y = np.array([p[1] for run in runs for p in run])
    residual = y - np.polyval(np.polyfit(x, y, 4), x)
    assert fit.r2 == pytest.approx(1 - (residual**2).sum() / ((y - y.mean()) ** 2).sum())
    assert fit.r2 < 1.0
    assert fit.residual_rms == pytest.approx(np.sqrt((residual**2).mean()))
    assert fit.residual_max == pytest.approx(np.abs(residual).max())
    assert fit.input_change.min == pytest.approx(x.min()) and fit.output_change.max == pytest.approx(y.max())


def test_the_run_total_sums_the_rescaled_changes_of_the_skippable_steps():
    runs = _runs()
    fit = fit_tea_cache(runs, steps=8)
    rescale = np.poly1d(fit.coefficients)
    # the first call has no previous input (no pair), the last step is always computed: 8 - 2 pairs count
    expected = max(sum(rescale(x) for x, _ in run[:6]) for run in runs)
    assert fit.run_total_max == pytest.approx(expected)


def test_the_degree_falls_where_the_input_takes_few_values():
    """A timestep-only modulated input (Wan, CogVideoX) changes alike on every prompt: 3 distinct changes fit a
    quadratic at most."""
    runs = [[(0.1, 0.2), (0.3, 0.25), (0.5, 0.4)] for _ in range(2)]
    assert fit_tea_cache(runs, steps=5).degree == 2


def test_too_few_pairs_say_what_to_do():
    with pytest.raises(ConfigError, match="calibrate with more steps"):
        fit_tea_cache([[(0.1, 0.2)]], steps=2)


def test_mag_ratios_are_averaged_and_their_error_kept():
    calibrated = average_ratios([[1.0, 0.9, 0.8], [1.0, 1.1, 0.6]])
    assert calibrated.mag_ratios == pytest.approx([1.0, 1.0, 0.7])
    assert calibrated.steps == 3 and calibrated.runs == 2
    assert calibrated.error.max == pytest.approx(0.4) and calibrated.error.min == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="lists of one length"):
        average_ratios([[1.0, 0.9], [1.0, 0.9, 0.8]])


def _calibration(diffs: list[float], ratios: list[float], changes: list[float]) -> Calibration:
    runs = [[(c, c) for c in changes]]
    signal = SignalRange(signal="residual diff", observed=Percentiles.of(diffs))
    section = DenoiserCalibration(
        transformer_class="X",
        tea_cache=fit_tea_cache(runs, steps=len(changes) + 2, degree=1),
        mag_cache=average_ratios([ratios]),
        first_block_cache=signal,
        cache_dit=signal,
    )
    return Calibration(
        model="m",
        source="m",
        pipeline="P",
        prompts=["a"],
        seeds=[0],
        steps=len(changes) + 2,
        height=64,
        width=64,
        guidance_scale=1.0,
        command="omni-accel calibrate p.yaml --model m",
        date="2026-12-06T00:00:00Z",
        harness_version="0",
        library_versions={},
        denoisers={"transformer": section},
    )


DIFFS = [0.021, 0.060, 0.211]  # SGLang #33828's observed residual diffs (min / median / max)


@pytest.mark.parametrize("feature", ["cache_dit", "first_block_cache"])
def test_a_residual_threshold_outside_the_observed_diffs_is_inert(feature):
    calibration = _calibration(DIFFS, [1.0, 0.9, 0.95, 0.9], [0.1, 0.2, 0.3])
    above = threshold_status(calibration, feature, max(DIFFS) + 0.03)
    assert above.inert and above.state == "skips every step"
    assert above.verdict.startswith(f"inert: {'residual_diff_threshold' if feature == 'cache_dit' else 'threshold'}")
    assert f"above every observed residual diff on transformer (max {max(DIFFS):.4g})" in above.verdict
    below = threshold_status(calibration, feature, min(DIFFS) / 2)
    assert below.inert and below.state == "never skips" and f"(min {min(DIFFS):.4g})" in below.verdict
    inside = threshold_status(calibration, feature, float(np.median(DIFFS)))
    assert not inside.inert and inside.state == "in range"


def test_a_tea_cache_threshold_is_judged_against_the_rescaled_distances():
    changes = [0.1, 0.2, 0.3]
    calibration = _calibration(DIFFS, [1.0, 0.9], changes)
    fit = calibration.denoisers["transformer"].tea_cache
    below = threshold_status(calibration, "tea_cache", fit.rescaled_change.min)
    assert below.state == "never skips" and "no step would be skipped" in below.verdict
    above = threshold_status(calibration, "tea_cache", fit.run_total_max * 1.5)
    assert above.state == "skips every step" and "every step but the first and last" in above.verdict
    inside = threshold_status(calibration, "tea_cache", (fit.rescaled_change.min + fit.run_total_max) / 2)
    assert inside.state == "in range"


def test_a_mag_cache_threshold_is_replayed_on_the_ratios():
    ratios = [1.0, 0.97, 0.95, 0.9, 0.85]
    calibration = _calibration(DIFFS, ratios, [0.1, 0.2])
    smallest = min(abs(1 - r) for r in ratios[1:])
    never = threshold_status(calibration, "mag_cache", smallest / 2, retention_ratio=0.0)
    assert never.state == "never skips" and "no step would be skipped" in never.verdict
    assert not threshold_status(calibration, "mag_cache", smallest * 1.01, retention_ratio=0.0).inert
    # diffusers' own decisions: within the threshold, at most max_skip_steps in a row, after the retention
    assert _mag_skips(ratios, 1.0, max_skip_steps=2, retention_ratio=0.0) == 3  # skip, skip, compute, skip
    assert _mag_skips(ratios, 1.0, max_skip_steps=9, retention_ratio=0.6) == 2  # steps 3 and 4 only


def _two_denoisers(low: list[float], high: list[float]) -> Calibration:
    """A calibration whose ``transformer`` observed ``low`` residual diffs and ``transformer_2`` ``high``."""
    one = _calibration(low, [1.0, 0.9], [0.1, 0.2])
    other = _calibration(high, [1.0, 0.9], [0.1, 0.2]).denoisers["transformer"]
    return one.model_copy(update={"denoisers": {"transformer": one.denoisers["transformer"], "transformer_2": other}})


def test_a_threshold_never_skipping_on_one_denoiser_and_skipping_all_on_the_other_is_inert_on_each():
    calibration = _two_denoisers([0.01, 0.03, 0.05], [0.2, 0.3, 0.4])
    mixed = threshold_status(calibration, "cache_dit", 0.1)  # above transformer's diffs, below transformer_2's
    assert mixed.inert and mixed.state == "inert per denoiser", mixed
    assert mixed.verdict.startswith("inert on each denoiser: transformer would skip every step"), mixed.verdict
    assert "above every observed residual diff on transformer (max 0.05)" in mixed.verdict
    assert "below every observed residual diff on transformer_2 (min 0.2)" in mixed.verdict
    assert set(mixed.by_denoiser) == {"transformer", "transformer_2"}
    # inside transformer_2's range it runs there, though transformer would skip every step: not inert, each said
    runs = threshold_status(calibration, "cache_dit", 0.3)
    assert not runs.inert and runs.state == "in range"
    assert "inert: residual_diff_threshold 0.3 above every observed residual diff on transformer " in runs.verdict
    assert "transformer_2: residual_diff_threshold 0.3 within the observed residual diff" in runs.verdict


@pytest.mark.parametrize("feature", ["cache_dit", "first_block_cache", "tea_cache", "mag_cache"])
def test_a_calibration_made_for_another_workload_calls_no_threshold_inert(feature):
    """The observed range is the calibration workload's: another step count, size, frames or guidance moves the
    signal, so a threshold outside that range is not refused on it (the verdict says why)."""
    calibration = _calibration(DIFFS, [1.0, 0.97, 0.95, 0.9], [0.1, 0.2, 0.3]).model_copy(update={"num_frames": 5})
    threshold = {
        "cache_dit": max(DIFFS) * 2,
        "first_block_cache": min(DIFFS) / 2,
        "tea_cache": calibration.denoisers["transformer"].tea_cache.rescaled_change.min / 2,
        "mag_cache": 0.001,
    }[feature]
    same = {"steps": calibration.steps, "height": 64, "width": 64, "num_frames": 5, "guidance_scale": 1.0}
    mag = {"retention_ratio": 0.0} if feature == "mag_cache" else {}
    assert threshold_status(calibration, feature, threshold, workload=same, **mag).inert
    assert threshold_status(calibration, feature, threshold, workload={"height": None}, **mag).inert  # unknown
    for key, value in (("steps", 50), ("height", 128), ("width", 32), ("num_frames", 9), ("guidance_scale", 5.0)):
        status = threshold_status(calibration, feature, threshold, workload={**same, key: value}, **mag)
        assert not status.inert and status.state == "other workload", (key, status)
        assert f"made for another workload ({key} {getattr(calibration, key):g} there, {value:g} here)" in (
            status.verdict
        )
        assert "calibrate on this workload (omni-accel calibrate PROFILE --model m)" in status.verdict


def test_the_observed_ranges_apply_only_to_the_calibration_workload():
    from accel.calibrate import observed_ranges

    calibration = _calibration(DIFFS, [1.0, 0.9], [0.1, 0.2, 0.3])
    ranges = observed_ranges(calibration, {"steps": calibration.steps, "height": 64})
    assert ranges["cache_dit"] == (min(DIFFS), max(DIFFS)) and ranges == observed_ranges(calibration)
    assert observed_ranges(calibration, {"steps": calibration.steps * 2}) == {}


def test_an_uncalibrated_feature_is_said_so_not_inert():
    calibration = _calibration(DIFFS, [1.0, 0.9], [0.1, 0.2])
    section = calibration.denoisers["transformer"].model_copy(update={"cache_dit": None})
    bare = calibration.model_copy(update={"denoisers": {"transformer": section}})
    status = threshold_status(bare, "cache_dit", 10.0)
    assert status.state == "not calibrated" and not status.inert
    with pytest.raises(ConfigError, match="has no calibrated threshold"):
        threshold_status(calibration, "compile", 0.1)


def test_a_calibration_file_round_trips_and_a_missing_one_says_how_to_make_it(tmp_path):
    calibration = _calibration(DIFFS, [1.0, 0.9], [0.1, 0.2])
    path = save_calibration(calibration, tmp_path / "sub" / "m.yaml")
    assert path.read_text().startswith("# omni-accel calibration of m; reproduce with: omni-accel calibrate")
    assert load_calibration(str(path)) == calibration
    with pytest.raises(ConfigError, match="make it with omni-accel calibrate PROFILE --model MODEL --out FILE"):
        load_calibration(str(tmp_path / "none.yaml"))
    (tmp_path / "bad.yaml").write_text("model: m\n")
    with pytest.raises(ConfigError, match="not a calibration file"):
        load_calibration(str(tmp_path / "bad.yaml"))


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_calibrate_prints_the_fit_quality_and_each_signal_range(monkeypatch, capsys):
    """The command's output for the committed tiny-wan22 calibration (the measurement itself: test_calibrate_models)."""
    from conftest import invoke

    import accel.calibrate

    committed = load_calibration(str(ROOT / "calibration" / "tiny-wan22.yaml"))
    monkeypatch.setattr(accel.calibrate, "calibrate", lambda profile, model, out: committed)
    code, out, _ = invoke(monkeypatch, capsys, "calibrate", "p.yaml", "--model", "tiny-wan22")
    assert code == 0, out
    for name, section in committed.denoisers.items():
        fit = section.tea_cache
        assert f"{name} (WanTransformer3DModel):" in out
        assert f"tea_cache: degree {fit.degree} on {fit.points} points, R² {fit.r2:.4f}, residual rms" in out
        assert f"residual diff {section.cache_dit.observed.line()}" in out
    assert out.rstrip().endswith("calibration: calibration/tiny-wan22.yaml")


def test_plan_flags_an_inert_threshold_before_anything_runs(monkeypatch, capsys, tmp_path):
    from conftest import invoke

    path = ROOT / "calibration" / "tiny-wan22.yaml"
    largest = max(s.cache_dit.observed.max for s in load_calibration(str(path)).denoisers.values())
    profile = tmp_path / "p.yaml"
    variant = "  - {{name: {}, features: {{cache_dit: {{residual_diff_threshold: {}, calibration: {}}}}}}}\n"
    profile.write_text(
        "models: [{name: tiny-wan22, source: tiny-wan22, device: cpu}]\n"
        "workload: {prompts: [a fox], steps: 8, num_frames: 5}\n"
        "variants:\n" + variant.format("inert", largest * 1.5, path) + variant.format("fine", largest * 0.9, path)
    )
    code, out, err = invoke(monkeypatch, capsys, "plan", str(profile))
    assert code == 0, err
    inert = next(line for line in out.splitlines() if "inert" in line and "cache_dit" in line)
    assert f"[refused here: cache_dit: inert: residual_diff_threshold {largest * 1.5:g} above every observed" in inert
    fine = next(line for line in out.splitlines() if f"residual_diff_threshold': {largest * 0.9}" in line)
    assert "refused here" not in fine
    # the same cells at 20 steps: the file's range (8 steps) does not apply, nothing is refused as inert
    profile.write_text(profile.read_text().replace("steps: 8", "steps: 20"))
    code, out, err = invoke(monkeypatch, capsys, "plan", str(profile))
    assert code == 0, err
    assert "residual_diff_threshold': " + f"{largest * 1.5}" in out and "refused here" not in out


@pytest.mark.parametrize("feature", ["tea_cache", "first_block_cache", "cache_dit"])
def test_the_observed_range_spans_exactly_the_thresholds_that_can_act(feature):
    """tune --calibration searches inside observed_ranges: its ends are where threshold_status turns inert."""
    from accel.calibrate import observed_ranges

    path = ROOT / "calibration" / "tiny-wan22.yaml"
    low, high = observed_ranges(path)[feature]
    assert threshold_status(path, feature, low).state == "never skips"
    assert threshold_status(path, feature, (low + high) / 2).state == "in range"
    assert threshold_status(path, feature, high * 1.001).state == "skips every step"


def test_tune_searches_inside_the_calibrated_range(monkeypatch, capsys, tmp_path):
    """--calibration hands the file's ranges to the search (which k-sections inside them: test_tune)."""
    from conftest import invoke

    import accel.tune
    from accel.calibrate import observed_ranges

    path = ROOT / "calibration" / "tiny-flux.yaml"
    seen: dict[str, object] = {}

    def fake_tune(profile, out, **kwargs):
        seen.update(kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr(accel.tune, "tune", fake_tune)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "models: [{name: m, source: tiny-flux, device: cpu}]\nworkload: {prompts: [a fox], steps: 8}\n"
        "variants: [{name: t, features: {tea_cache: 0.4}}]\n"
    )
    code, _, err = invoke(
        monkeypatch, capsys, "tune", str(profile), "--out", str(tmp_path / "t"), "--calibration", str(path)
    )
    assert code == 2 and "stop here" in err
    assert seen["observed"] == observed_ranges(path) and "tea_cache" in seen["observed"]
    # tuned on another workload (50 steps, the file's 8): no calibrated range, so no threshold marked inert
    profile.write_text(profile.read_text().replace("steps: 8", "steps: 50"))
    code, _, err = invoke(
        monkeypatch, capsys, "tune", str(profile), "--out", str(tmp_path / "t2"), "--calibration", str(path)
    )
    assert code == 2 and "stop here" in err
    assert seen["observed"] == {}
    assert "made for another workload (steps 8 there, 50 here)" in err
