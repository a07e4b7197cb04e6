"""accel/gate/limits.py's edges, for mutmut's survivors on it (reports/mutation/mutmut-limits.md, issue 25):
the performance check's limit, tolerances and their defaults, its refresh notice, parity on its limit, and the
dtype a record without one is judged in."""

from __future__ import annotations

import pytest

from accel.gate import GateData, load_gate_data, lossless_limits, output_precision, parity_pair, perf_check

SHIPPED = load_gate_data()


def _perf(base: float, **tolerances: float) -> GateData:
    return GateData(SHIPPED.thresholds, {}, {**tolerances, "devices": {"cpu": {"m": {"v": base}}}})


def _record(median: float, **more) -> dict:
    return {"model": "m", "variant": "v", "device": "cpu", "warm": {"median": median}, **more}


def test_the_limit_itself_passes_and_a_hair_above_fails():
    data = _perf(1.0, rel_tolerance=0.1, abs_tolerance_s=0.0, refresh_if_faster_by=0.5)
    check, notice = perf_check(data, _record(1.0 * (1 + 0.1)))
    assert check is not None and check.ok is True and notice is None
    check, _ = perf_check(data, _record(1.1 + 1e-9))
    assert check is not None and check.ok is False


def test_default_tolerances_when_the_baseline_file_gives_none():
    """rel_tolerance 0.15, abs_tolerance_s 0.005 and refresh_if_faster_by 0.2 (accel.gate.PERF_TOLERANCES)."""
    data = _perf(1.0)
    assert perf_check(data, _record(1.15))[0].ok is True
    assert perf_check(data, _record(1.16))[0].ok is False
    small = _perf(0.01)  # the absolute tolerance wins for a short call: 0.015 s, not 0.0115
    assert perf_check(small, _record(0.0149))[0].ok is True
    assert perf_check(small, _record(0.0151))[0].ok is False
    assert perf_check(data, _record(0.79))[1] is not None  # faster by 21% > 20%: refresh
    assert perf_check(data, _record(0.81))[1] is None


def test_tolerances_given_in_the_file_are_used():
    assert perf_check(_perf(0.01, abs_tolerance_s=0.05), _record(0.059))[0].ok is True
    assert perf_check(_perf(1.0, rel_tolerance=0.5), _record(1.49))[0].ok is True
    assert perf_check(_perf(1.0, refresh_if_faster_by=0.5), _record(0.6))[1] is None  # 40% faster < 50%
    assert perf_check(_perf(1.0, refresh_if_faster_by=0.5), _record(0.49))[1] is not None


def test_the_refresh_notice_starts_past_the_threshold():
    data = _perf(1.0, refresh_if_faster_by=0.25)
    assert perf_check(data, _record(1.0 * (1 - 0.25)))[1] is None  # exactly 25% faster: not more than 25%
    _, notice = perf_check(data, _record(0.7))
    assert notice == "m/v: faster than the stored baseline by 30% (> 25%): refresh the baseline"


def test_a_device_entry_without_the_model_or_variant_gives_no_check():
    data = GateData(SHIPPED.thresholds, {}, {"devices": {"cpu": {"other": {"v": 1.0}}}})
    assert perf_check(data, _record(5.0)) == (None, None)
    assert perf_check(_perf(1.0), {**_record(5.0), "variant": "w"}) == (None, None)


@pytest.mark.parametrize("which", ["ssim", "psnr"])
def test_parity_on_its_limit_is_in_parity(which):
    ssim_check, psnr_check = parity_pair("x", {"ssim": 0.99, "psnr": 40.0}, 0.99, 40.0)
    assert ssim_check.ok is True and psnr_check.ok is True
    below = {"ssim": 0.99, "psnr": 40.0, which: {"ssim": 0.9899, "psnr": 39.99}[which]}
    checks = dict(zip(("ssim", "psnr"), parity_pair("x", below, 0.99, 40.0), strict=True))
    assert checks[which].ok is False


def test_a_record_without_a_dtype_is_judged_as_float32():
    record = {"model": "m", "variant": "v"}
    assert output_precision(record) == "float32"
    assert lossless_limits(SHIPPED, record, None, "image") == lossless_limits(
        SHIPPED, {**record, "dtype": "float32"}, None, "image"
    )


def _thresholds(**changes) -> GateData:
    return GateData({**SHIPPED.thresholds, **changes}, {})


def test_a_models_own_lossless_threshold_is_used():
    own = {"m": {"lossless": {"float32": {"image": {"ssim": 0.5, "psnr": 10.0}}}}}
    data = _thresholds(models=own)
    assert lossless_limits(data, {"model": "m", "variant": "v"}, None, "image")[:2] == (0.5, 10.0)
    assert lossless_limits(data, {"model": "other", "variant": "v"}, None, "image")[:2] == (0.99999, 100.0)
    assert lossless_limits(data, {"model": "m", "variant": "v"}, None, "video")[:2] == (0.99999, 100.0)


def test_an_engines_8_bit_output_is_held_no_stricter_than_uint8():
    record = {"model": "m", "variant": "v", "dtype": "float32", "engine": "vllm-omni"}
    assert lossless_limits(SHIPPED, record, None, "image") == (0.98, 48.0, "lossless (image, float32, 8-bit output)")
    assert lossless_limits(SHIPPED, record, None, "video")[:2] == (0.95, 48.0)
    assert lossless_limits(SHIPPED, {**record, "engine": None}, None, "image")[:2] == (0.99999, 100.0)
    no_uint8 = _thresholds(lossless={k: v for k, v in SHIPPED.thresholds["lossless"].items() if k != "uint8"})
    assert lossless_limits(no_uint8, record, None, "image")[:2] == (0.99999, 100.0)


def _cache_cell(model: str = "m", **more) -> dict:
    return {"model": model, "variant": "v", "features": {"tea_cache": {"rel_l1_thresh": 0.6}}, **more}


def test_a_models_own_lossy_threshold_is_used():
    from accel.gate import required_parity

    data = _thresholds(models={"m": {"lossy": {"cache": {"ssim": 0.5, "psnr": 10.0}}}})
    assert required_parity(data, _cache_cell(), None, "image") == (0.5, 10.0, "lossy (cache)")
    assert required_parity(data, _cache_cell("other"), None, "image")[:2] == (0.9, 25.0)


def test_lossy_limits_fall_back_to_what_the_features_declare():
    from accel.gate import declared_lossy_limits, required_parity

    declared = declared_lossy_limits()
    assert set(declared) >= {"cache", "quant", "vae", "attention"}
    assert all(set(limit) == {"ssim", "psnr"} for limit in declared.values())
    data = _thresholds(lossy={})
    ssim, psnr, _ = required_parity(data, _cache_cell(), None, "image")
    assert (ssim, psnr) == (float(declared["cache"]["ssim"]), float(declared["cache"]["psnr"]))


def test_a_lossy_family_without_any_limit_is_a_config_error(monkeypatch):
    from accel.errors import ConfigError
    from accel.gate import limits, required_parity

    monkeypatch.setattr(limits, "declared_lossy_limits", lambda: {})
    with pytest.raises(ConfigError, match=r"lossy: no parity thresholds for family 'cache' \(m/v is lossy through"):
        required_parity(_thresholds(lossy={}), _cache_cell(), None, "image")


def test_adherence_limits_from_the_thresholds_and_their_edge():
    from accel.gate import adherence_check, declared_adherence_limits

    record = _cache_cell(adherence_loss=0.1)
    assert adherence_check(SHIPPED, record).ok is False  # the shipped 0.05
    assert adherence_check(_thresholds(adherence={"lossy": {"cache": 0.2}}), record).ok is True
    declared = declared_adherence_limits()["cache"]
    without = _thresholds(adherence={})  # the features' own declared limits
    assert adherence_check(without, _cache_cell(adherence_loss=declared)).ok is True
    assert adherence_check(without, _cache_cell(adherence_loss=declared + 1e-9)).ok is True  # the float slack
    assert adherence_check(without, _cache_cell(adherence_loss=declared + 1e-6)).ok is False


def _combined(parity: dict, part_parity: dict, peers_extra: list | None = None, thresholds=None):
    from accel.gate import combined_lossless_checks

    features = {"tea_cache": {"rel_l1_thresh": 0.6}, "attention_backend": {"backend": "_native_math"}}
    record = {"model": "m", "variant": "both", "status": "ok", "features": features, "parity": parity}
    part = {"model": "m", "variant": "tea", "status": "ok", "features": {"tea_cache": {"rel_l1_thresh": 0.6}}}
    peers = [record, {**part, "parity": part_parity}, *(peers_extra or [])]
    return combined_lossless_checks(thresholds or SHIPPED, record, None, "image", peers)


def test_a_lossless_feature_beside_a_lossy_one_may_add_only_its_own_error():
    """PSNR: -20 log10(10^(-P_part/20) + 10^(-P_lossless/20)); SSIM: S_part - (1 - S_lossless); float32
    lossless: 100 dB and 0.99999."""
    import math

    psnr_min = -20 * math.log10(10 ** (-30.0 / 20) + 10 ** (-100.0 / 20))
    ssim_min = 0.95 - (1 - 0.99999)
    part = {"ssim": 0.95, "psnr": 30.0}
    ssim_check, psnr_check = _combined({"ssim": ssim_min, "psnr": psnr_min}, part)
    assert ssim_check.ok and psnr_check.ok and "beside tea" in psnr_check.name
    ssim_check, psnr_check = _combined({"ssim": ssim_min - 1e-4, "psnr": psnr_min - 1e-3}, part)
    assert not ssim_check.ok and not psnr_check.ok


def test_a_bit_identical_part_under_an_infinite_lossless_limit_requires_bit_identity():
    inf = float("inf")
    lossless = {**SHIPPED.thresholds["lossless"], "float32": {"image": {"ssim": 1.0, "psnr": inf}}}
    checks = _combined(
        {"ssim": 1.0, "psnr": inf}, {"ssim": 1.0, "psnr": inf}, thresholds=_thresholds(lossless=lossless)
    )
    assert all(check.ok for check in checks)


def test_the_lossy_part_is_never_another_models_cell():
    other = {"model": "n", "variant": "tea-n", "status": "ok", "features": {"tea_cache": {"rel_l1_thresh": 0.6}}}
    from accel.gate import lossy_part

    record = {
        "model": "m",
        "variant": "both",
        "features": {"tea_cache": {"rel_l1_thresh": 0.6}, "attention_backend": {"backend": "_native_math"}},
    }
    assert lossy_part(record, [record, {**other, "parity": {"ssim": 0.9, "psnr": 30.0}}]) is None


def test_threshold_overrides_and_baseline_entries_that_match_give_no_notice():
    from accel.gate import unmatched_baseline_entries, unmatched_threshold_models

    records = [{"model": "m", "variant": "v", "status": "ok", "device": "cpu", "warm": {"median": 1.0}}]
    assert unmatched_threshold_models(records, _thresholds(models={"m": {"lossy": {}}})) == []
    perf = {"devices": {"cpu": {"m": {"v": 1.0, "noise-floor": 1.0, "failed": 1.0}}}}
    floor = {"model": "m", "variant": "noise-floor", "role": "noise_floor", "status": "ok", "device": "cpu"}
    floor["warm"] = {"median": 1.0}
    failed = {"model": "m", "variant": "failed", "status": "failed", "device": "cpu", "warm": None}
    notices = unmatched_baseline_entries([*records, floor, failed], GateData(SHIPPED.thresholds, {}, perf))
    # the noise floor is never checked against a baseline entry, and a cell without a warm median cannot be
    assert [n.split(" matched")[0] for n in notices] == [
        "performance baseline devices.cpu.m.noise-floor",
        "performance baseline devices.cpu.m.failed",
    ]


def test_features_of_one_family_that_declare_different_limits_give_the_loosest(monkeypatch):
    """Every registered family declares one limit today; a feature registered with a looser one must widen its
    family's default, whichever is registered first."""
    from types import SimpleNamespace

    import accel.features
    from accel.gate import declared_adherence_limits, declared_lossy_limits

    def feature(ssim: float, psnr: float, adherence: float | None) -> SimpleNamespace:
        limits = SimpleNamespace(ssim=ssim, psnr=psnr, adherence_loss=adherence)
        return SimpleNamespace(family="x", lossy_limits=limits)

    loose, strict, unset = feature(0.8, 20.0, 0.1), feature(0.9, 25.0, 0.05), feature(0.95, 30.0, None)
    for order in ([loose, strict, unset], [strict, unset, loose]):
        monkeypatch.setattr(accel.features, "FEATURES", {f"f{i}": f for i, f in enumerate(order)})
        assert declared_lossy_limits() == {"x": {"ssim": 0.8, "psnr": 20.0}}
        assert declared_adherence_limits() == {"x": 0.1}
    monkeypatch.setattr(accel.features, "FEATURES", {"a": feature(0.9, 25.0, 0.02)})
    assert declared_adherence_limits() == {"x": 0.02}


def test_the_lossy_part_has_exactly_the_lossy_features_never_more():
    """A cell with the lossy feature and another lossless one beside it (a superset) is not the lossy feature
    alone: its error already holds a lossless feature's, so the bound would be judged against the wrong part."""
    from accel.gate import lossy_part

    tea = {"tea_cache": {"rel_l1_thresh": 0.6}}
    record = {"model": "m", "variant": "both", "features": {**tea, "attention_backend": {"backend": "_native_math"}}}
    parity = {"ssim": 0.9, "psnr": 30.0}
    superset = {"model": "m", "variant": "tea+tiling", "status": "ok", "parity": parity}
    superset["features"] = {**tea, "vae_use_tiling": True}
    alone = {"model": "m", "variant": "tea", "status": "ok", "parity": parity, "features": tea}
    assert lossy_part(record, [record, superset]) is None
    assert lossy_part(record, [record, superset, alone]) is alone
    other_setting = {**alone, "features": {"tea_cache": {"rel_l1_thresh": 0.8}}}
    assert lossy_part(record, [record, other_setting]) is None
