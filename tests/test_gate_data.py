"""The gate's data files checked whole (accel/gate/data.py): every refusal is pinned to its whole one-line
message, and the values at each edge of a range are pinned on both sides, so a changed comparison, a dropped
check or a changed key fails here (mutmut's mutants of data.py: reports/mutation/mutmut-data.md)."""

from __future__ import annotations

import copy

import pytest
import yaml

from accel.errors import ConfigError
from accel.gate import GateData, load_gate_data
from accel.gate.data import check_claims, check_perf_baseline, check_thresholds, claim_for

SHIPPED = load_gate_data().thresholds


def _thresholds(**changes):
    data = copy.deepcopy(SHIPPED)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def _refused(check, data) -> str:
    with pytest.raises(ConfigError) as error:
        check(data, "s.yaml")
    return str(error.value)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"modls": {}}, "unknown key 'modls'. Did you mean 'models'? Allowed: models"),
        ({"models": [1]}, "models: expected a mapping of model name to claims, got [1]"),
        ({"models": {"m": [1]}}, "models.m: expected a mapping of feature name to a claim, got [1]"),
        ({"models": {"m": {"compil": True}}}, "models.m: unknown feature 'compil'. Did you mean 'compile'? Allowed: "),
        (
            {"models": {"m": {"compile": "yes"}}},
            "models.m.compile: 'yes' is not a claim (allowed: true, false or {supported: true|false, note: <text>})",
        ),
        (
            {"models": {"m": {"compile": {"supported": True, "notes": "x"}}}},
            "models.m.compile: unknown key 'notes'. Did you mean 'note'? Allowed: note, supported",
        ),
        (
            {"models": {"m": {"compile": {"supported": "maybe"}}}},
            "models.m.compile.supported: 'maybe' is not allowed (allowed: true, false)",
        ),
        ({"models": {"m": {"compile": {"supported": 1}}}}, "models.m.compile.supported: 1 is not allowed"),
        ({"models": {"m": {"compile": {"note": 3}}}}, "models.m.compile.note: expected a text, got 3"),
        # a later model's bad claim is still reached after a model with no claims (None)
        ({"models": {"a": None, "m": {"compile": 0}}}, "models.m.compile: 0 is not a claim"),
        # ... and after a model's plain true/false claims
        ({"models": {"m": {"compile": True, "tea_cache": 0}}}, "models.m.tea_cache: 0 is not a claim"),
    ],
)
def test_a_bad_claim_is_refused_with_its_key(claims, message):
    assert _refused(check_claims, claims).startswith("s.yaml: " + message)


@pytest.mark.parametrize(
    "claims",
    [
        {},
        {"models": None},
        {"models": {}},
        {"models": {"m": None, "n": {"compile": True, "tea_cache": False}}},
        {"models": {"m": {"compile": {"supported": False, "note": "why"}, "tea_cache": {}}}},
    ],
)
def test_a_good_claims_file_passes(claims):
    check_claims(claims, "s.yaml")


def test_a_claim_reads_true_false_or_none():
    data = GateData({}, {"m": {"a": True, "b": False, "c": {"supported": False}, "d": {"note": "x"}}, "n": None})
    assert [claim_for(data, "m", f) for f in "abcde"] == [True, False, False, True, None]
    assert claim_for(data, "n", "a") is None and claim_for(data, "other", "a") is None


@pytest.mark.parametrize(
    ("perf", "message"),
    [
        (
            {"rel_tol": 0.1},
            "unknown key 'rel_tol'. Did you mean 'rel_tolerance'? Allowed: abs_tolerance_s, devices, "
            "refresh_if_faster_by, rel_tolerance",
        ),
        ({"rel_tolerance": -0.1}, "rel_tolerance: -0.1 is not allowed: expected a number >= 0"),
        ({"rel_tolerance": True}, "rel_tolerance: True is not allowed: expected a number >= 0"),
        ({"rel_tolerance": float("inf")}, "rel_tolerance: inf is not allowed: expected a number >= 0"),
        ({"abs_tolerance_s": "0.1"}, "abs_tolerance_s: '0.1' is not allowed: expected a number >= 0"),
        ({"abs_tolerance_s": -0.001}, "abs_tolerance_s: -0.001 is not allowed: expected a number >= 0"),
        ({"refresh_if_faster_by": 1.0}, "refresh_if_faster_by: 1.0 is not allowed: expected a number >= 0 and < 1"),
        ({"refresh_if_faster_by": -0.01}, "refresh_if_faster_by: -0.01 is not allowed: expected a number >= 0 and < 1"),
        (
            {"devices": [1]},
            "devices: expected a mapping of device to model to variant to seconds, got [1]",
        ),
        ({"devices": {"H200": [1]}}, "devices.H200: expected a mapping of model to variants, got [1]"),
        ({"devices": {"H200": {"flux": 0.1}}}, "devices.H200.flux: expected a mapping of variant to seconds, got 0.1"),
        (
            {"devices": {"H200": {"flux": {"compile": 0}}}},
            "devices.H200.flux.compile: 0 is not allowed: expected the warm median latency in seconds, a finite "
            "number > 0",
        ),
        ({"devices": {"H200": {"flux": {"compile": float("inf")}}}}, "devices.H200.flux.compile: inf is not allowed"),
        ({"devices": {"H200": {"flux": {"compile": -1.0}}}}, "devices.H200.flux.compile: -1.0 is not allowed"),
        ({"devices": {"H200": {"flux": {"compile": "fast"}}}}, "devices.H200.flux.compile: 'fast' is not allowed"),
        ({"devices": {"H200": {"flux": {"compile": True}}}}, "devices.H200.flux.compile: True is not allowed"),
        # a later entry is still reached after a good one
        ({"devices": {"H200": {"flux": {"a": 0.1, "b": 0}}}}, "devices.H200.flux.b: 0 is not allowed"),
        ({"devices": {"H200": {"flux": {"a": 0.1}, "wan": 1}}}, "devices.H200.wan: expected a mapping of variant"),
        ({"devices": {"A": {}, "H200": 1}}, "devices.H200: expected a mapping of model to variants"),
    ],
)
def test_a_bad_performance_baseline_is_refused_with_its_key(perf, message):
    assert _refused(check_perf_baseline, perf).startswith("s.yaml: " + message)


def test_only_refresh_if_faster_by_is_said_to_be_below_1():
    assert _refused(check_perf_baseline, {"rel_tolerance": -0.1}) == (
        "s.yaml: rel_tolerance: -0.1 is not allowed: expected a number >= 0"
    )
    assert _refused(check_perf_baseline, {"abs_tolerance_s": -1}) == (
        "s.yaml: abs_tolerance_s: -1 is not allowed: expected a number >= 0"
    )
    assert _refused(check_perf_baseline, {"refresh_if_faster_by": 1.0}) == (
        "s.yaml: refresh_if_faster_by: 1.0 is not allowed: expected a number >= 0 and < 1"
    )
    # above 1, not only 1 itself: the upper bound of refresh_if_faster_by is its own, not the others' infinity
    assert _refused(check_perf_baseline, {"refresh_if_faster_by": 1.5}) == (
        "s.yaml: refresh_if_faster_by: 1.5 is not allowed: expected a number >= 0 and < 1"
    )


@pytest.mark.parametrize(
    "perf",
    [
        {},
        {"devices": None},
        {"rel_tolerance": 0, "abs_tolerance_s": 0.0, "refresh_if_faster_by": 0},
        {"rel_tolerance": 5, "abs_tolerance_s": 1e9, "refresh_if_faster_by": 0.999},
        {"devices": {"H200": {"flux": {"compile": 1e-9, "tea": 3}}, "cpu": {}}},
    ],
)
def test_a_good_performance_baseline_passes(perf):
    check_perf_baseline(perf, "s.yaml")


def test_load_gate_data_checks_each_file_it_is_given(tmp_path):
    baseline = tmp_path / "b.yaml"
    baseline.write_text(yaml.safe_dump({"rel_tolerance": 0.2, "devices": {"H200": {"flux": {"compile": 0.1}}}}))
    data = load_gate_data(baseline=baseline)
    assert data.perf == {"rel_tolerance": 0.2, "devices": {"H200": {"flux": {"compile": 0.1}}}}
    assert data.source.endswith("feature_matrix/thresholds.yaml") and "tiny-flux" in data.claims
    assert load_gate_data().perf is None
    baseline.write_text(yaml.safe_dump({"rel_tolerance": -1}))
    with pytest.raises(ConfigError, match=r"^\S*b\.yaml: rel_tolerance: -1 is not allowed"):
        load_gate_data(baseline=baseline)
    claims = tmp_path / "c.yaml"
    claims.write_text(yaml.safe_dump({"models": {"m": {"compile": "yes"}}}))
    with pytest.raises(ConfigError, match=r"^\S*c\.yaml: models\.m\.compile: 'yes' is not a claim"):
        load_gate_data(claims=claims)
    claims.write_text(yaml.safe_dump({"models": None}))
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text(yaml.safe_dump(SHIPPED))
    data = load_gate_data(thresholds=thresholds, claims=claims)
    assert data.claims == {} and data.source == str(thresholds) and data.thresholds == SHIPPED


def test_a_missing_data_file_is_named_by_its_kind(tmp_path):
    missing = tmp_path / "gone.yaml"
    for argument, kind in [("thresholds", "thresholds"), ("claims", "claims"), ("baseline", "performance baseline")]:
        with pytest.raises(ConfigError) as error:
            load_gate_data(**{argument: missing})
        assert str(error.value) == f"{missing}: {kind} file not found"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_thresholds(lossless=None), "missing key 'lossless' (a mapping)"),
        (_thresholds(lossless_minimum=None), "missing key 'lossless_minimum' (a mapping)"),
        (_thresholds(lossy=None), "missing key 'lossy' (a mapping)"),
        (_thresholds(lossy=[1]), "lossy: expected a mapping, got [1]"),
        (
            _thresholds(lossless_minimum={"image": {"ssim": 0.9, "psnr": 30}}),
            "lossless_minimum.video: expected a mapping with keys ssim and psnr, got None",
        ),
        (
            _thresholds(lossless_minimum={"image": {"ssim": 0.9, "psnr": 30}, "video": {"ssim": 1.5, "psnr": 30}}),
            "lossless_minimum.video.ssim: 1.5 is not allowed: expected a number from 0 to 1",
        ),
        (
            _thresholds(lossless={"float32": {"image": {"ssim": 0.9, "psnr": 30}, "video": {"ssim": 0.9}}}),
            "lossless.float32.video: expected a mapping with keys ssim and psnr, got {'ssim': 0.9}",
        ),
        (
            _thresholds(
                lossless={"float32": {"image": {"ssim": 1, "psnr": 30}, "video": {"ssim": 1, "psnr": 3, "x": 1}}}
            ),
            "lossless.float32.video: expected a mapping with keys ssim and psnr, got ",
        ),
        (
            _thresholds(lossless={"float32": {"image": {}, "video": {"ssim": 0.9, "psnr": 30}}}),
            "lossless.float32.image: expected a mapping with keys ssim and psnr, got {}",
        ),
        (
            _thresholds(lossless={"float32": "x"}),
            "lossless.float32: expected keys image, video (lossless thresholds are per dtype, then modality: "
            "lossless.float32.image), got 'x'",
        ),
        (
            _thresholds(lossless={"float32": {"image": {"ssim": 1, "psnr": 30}}}),
            "lossless.float32: expected keys image, video",
        ),
        (
            _thresholds(lossy={"cache": {"ssim": 0.9, "psnr": -1}}),
            "lossy.cache.psnr: -1 is not allowed: expected a number of dB >= 0 (inf: bit-identical)",
        ),
        (_thresholds(lossy={"cache": {"ssim": 1.01, "psnr": 1}}), "lossy.cache.ssim: 1.01 is not allowed: expected"),
        (_thresholds(lossy={"cache": {"ssim": -0.01, "psnr": 1}}), "lossy.cache.ssim: -0.01 is not allowed"),
        (_thresholds(lossy={"cache": "x"}), "lossy.cache: expected a mapping with keys ssim and psnr, got 'x'"),
        (
            _thresholds(lossy={"cache": {"ssim": 0.9, "psnr": 1}, "vae": {"ssim": 2, "psnr": 1}}),
            "lossy.vae.ssim: 2 is not allowed",
        ),
        (_thresholds(adherence=[1]), "adherence: expected a mapping with the keys lossy, inconclusive (got [1])"),
        (
            _thresholds(adherence={"lossy": {"cache": 0.1}, "lossyy": {}}),
            "adherence: expected a mapping with the keys lossy, inconclusive (unknown key 'lossyy')",
        ),
        (
            _thresholds(adherence={"lossy": {"cache": 0.1, "vae": 2}}),
            "adherence.lossy.vae: 2 is not allowed: the share of the prompts' attributes a lossy variant may lose, "
            "a number from 0 to 1 (e.g. 0.05)",
        ),
        (
            _thresholds(models={"m": {"lossless": {"float32": "x"}}}),
            "models.m.lossless.float32: expected a mapping of modality to limits",
        ),
        (
            _thresholds(models={"m": {"lossless": {"float32": {"image": {}}}}}),
            "models.m.lossless.float32.image: expected a mapping with keys ssim and/or psnr, got {}",
        ),
        (
            _thresholds(models={"m": {"lossless": {"float32": {"image": {"lpips": 1}}}}}),
            "models.m.lossless.float32.image: expected a mapping with keys ssim and/or psnr, got {'lpips': 1}",
        ),
        (
            _thresholds(models={"m": {"lossless": {"float32": {"image": {"ssim": 0.5}, "video": {"ssim": 2}}}}}),
            "models.m.lossless.float32.video.ssim: 2 is not allowed",
        ),
        (
            _thresholds(models={"m": {"lossless": {"float32": {"image": {"ssim": 1}}, "float16": 1}}}),
            "models.m.lossless.float16: expected a mapping of modality to limits",
        ),
        (
            _thresholds(models={"m": {"lossy": {"cachee": {"ssim": 0.5, "psnr": 1}}}}),
            "models.m.lossy.cachee: unknown feature family 'cachee'. Did you mean 'cache'? Allowed: attention, "
            "cache, compile, offload, parallel, quant, vae",
        ),
        (
            _thresholds(models={"m": {"lossy": {"cache": {"ssim": 0.5, "psnr": 1}, "vae": {"ssim": 3, "psnr": 1}}}}),
            "models.m.lossy.vae.ssim: 3 is not allowed",
        ),
        (
            _thresholds(models={"m": {"adherence": [1]}}),
            "models.m: adherence: expected a mapping with the keys lossy, inconclusive",
        ),
        (_thresholds(models={"a": {}, "m": 1}), "models.m: expected a mapping with keys lossy, lossless, adherence"),
        (
            _thresholds(models={"a": {"lossy": None}, "m": {"lossy": {"cache": 1}}}),
            "models.m.lossy.cache: expected a mapping with keys ssim and psnr",
        ),
    ],
)
def test_a_bad_thresholds_file_is_refused_with_its_key(data, message):
    refused = _refused(check_thresholds, data)
    assert refused.startswith("s.yaml: " + message), refused


@pytest.mark.parametrize(
    "data",
    [
        _thresholds(models=None),
        _thresholds(adherence={"lossy": None}),
        _thresholds(adherence={"lossy": {"cache": 0, "vae": 1}}),
        _thresholds(lossy={"cache": {"ssim": 0, "psnr": 0}, "vae": {"ssim": 1, "psnr": float("inf")}}),
        _thresholds(lossless_minimum={"image": {"ssim": 1.0, "psnr": 0}, "video": {"ssim": 0.0, "psnr": 1e3}}),
        _thresholds(models={"m": {"lossy": None, "lossless": None}, "n": {}}),
        _thresholds(models={"m": {"lossless": {"bfloat16": {"video": {"ssim": 1}, "image": {"psnr": 0}}}}}),
        _thresholds(models={"m": {"lossy": {"cache": {"ssim": 0.5, "psnr": 1}}, "adherence": {"lossy": None}}}),
    ],
)
def test_a_good_thresholds_file_passes(data):
    check_thresholds(data, "s.yaml")
