"""A feature is one module and one registration: what it declares (parity limits, conflicts, roofline
exemption, global state) reaches the gate, the rules, the roofline and the inline executor without any
other file naming it."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any, ClassVar

import pytest
from synthetic import record

from accel.errors import ConfigError
from accel.features import FEATURES
from accel.features.base import (
    Conflict,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    ParityLimits,
    RunContext,
    Support,
    Verdict,
)
from accel.gate import FAIL, PASS, GateData, gate_records, load_gate_data


class DitherConfig(FeatureConfig):
    """Options of ``dither`` (a test feature)."""

    amount: float = 0.1


class _Nothing(Handle):
    def remove(self) -> None:
        pass


class Dither(Feature):
    """A lossy feature of a new family, declaring everything the harness needs on itself."""

    name = "dither"
    family = "noise"
    feature_class = FeatureClass.LOSSY
    stage = 35
    config_cls = DitherConfig
    description = "test feature"
    lossy_limits: ClassVar[ParityLimits | None] = ParityLimits(ssim=0.8, psnr=20.0, adherence_loss=0.1)
    roofline_exempt = "dither skips the last block"
    global_state = ("test_counter",)
    conflicts = (Conflict(reason="dither and tea_cache both reuse the last residual", feature="tea_cache"),)

    def check(self, pipeline: Any, device: str, options: FeatureConfig) -> Support:
        return Support.yes()

    def apply(self, pipeline: Any, options: FeatureConfig, context: RunContext) -> Handle:
        return _Nothing()

    def verify(self, handle: Handle) -> Verdict:
        return Verdict(True, "dithered")


@pytest.fixture
def dither():
    from accel.features.state import GLOBAL_STATE

    state = {"value": 0}

    def save():
        before = state["value"]
        return lambda: state.__setitem__("value", before)

    GLOBAL_STATE["test_counter"] = save
    FEATURES.register(Dither(), source="test")
    yield state
    FEATURES.unregister("dither")
    del GLOBAL_STATE["test_counter"]


def _cell(ssim: float) -> list[dict[str, Any]]:
    cpu = {"device": "cpu", "dtype": "float32"}
    return [
        record("m", "baseline", {}, **cpu),
        record("m", "dither", {"dither": {}}, ssim=ssim, psnr=30.0, **cpu),
    ]


def _verdict(records, data=None):
    data = data or load_gate_data()
    return next(v for v in gate_records(records, data).verdicts if v.variant == "dither")


def test_declared_parity_limits_are_the_gate_default_and_the_data_file_overrides_them(dither):
    assert _verdict(_cell(0.85)).outcome == PASS  # 0.85 >= the declared 0.8, though below the cache's 0.90
    assert _verdict(_cell(0.75)).outcome == FAIL
    shipped = load_gate_data()
    stricter = {**shipped.thresholds, "lossy": {**shipped.thresholds["lossy"], "noise": {"ssim": 0.9, "psnr": 20}}}
    assert _verdict(_cell(0.85), GateData(stricter, shipped.claims, None)).outcome == FAIL


def test_a_lossy_family_without_any_threshold_is_an_error_not_the_cache_thresholds(dither, monkeypatch):
    monkeypatch.setattr(Dither, "lossy_limits", None)
    with pytest.raises(ConfigError, match=r"thresholds.yaml: lossy: no parity thresholds for family 'noise'"):
        _verdict(_cell(0.95))


def test_declared_conflicts_are_rejected_like_rules_yaml(dither):
    from accel.features import validate_variant_features

    with pytest.raises(ConfigError, match="features 'dither' and 'tea_cache' cannot be combined: dither and tea_cache"):
        validate_variant_features({"tea_cache": 0.2, "dither": {}}, "p.yaml: variants[0].features")


def test_declared_roofline_exemption_reaches_the_floor_check(dither):
    from accel.gate import judge_measured_cell
    from accel.sweep.compare import attach_roofline

    baseline = {"flops_per_denoiser_call": 1e12, "denoiser_calls_per_call": 2, "stages": {"steps_per_call": 2}}
    cell = {"features": {"dither": {}}, "step_times": [1e-9], "peak_flops": 1e12}
    attach_roofline(cell, baseline)
    judge_measured_cell(cell)  # the exemption is the gate's judgement on the measured fact
    assert cell["roofline"]["below_floor"] is True
    assert cell["roofline"]["floor_check"] == "not applicable: dither skips the last block"
    assert "invalid_measurement" not in cell


def test_declared_global_state_is_restored_after_an_inline_cell(dither, monkeypatch):
    from accel.sweep import executors

    def cell(spec):
        dither["value"] = 42  # a side effect the feature's remove() does not undo
        return {"status": "ok"}

    monkeypatch.setattr(executors, "run_cell", cell)
    assert executors.run_inline(None) == {"status": "ok"}
    assert dither["value"] == 0


def test_built_in_lossy_families_declare_their_limits():
    for feature in FEATURES.values():
        if feature.feature_class is FeatureClass.LOSSY or feature.name == "attention_backend":
            assert feature.lossy_limits is not None, feature.name
            assert 0 < feature.lossy_limits.ssim <= 1 and math.isfinite(feature.lossy_limits.psnr)


def test_cache_features_do_not_reach_into_the_attention_feature():
    source = Path(__file__).resolve().parent.parent / "accel" / "features" / "cache.py"
    imported = {node.module for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ImportFrom)}
    assert "accel.features.attention" not in imported
