"""The public API: ``apply(pipe, *configs)`` as a context manager and as a handle, on a tiny pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import generate, loaded

import accel
from accel import apply
from accel.errors import ConfigError
from accel.features import (
    FEATURES,
    AttentionBackendConfig,
    CacheDitConfig,
    TeaCacheConfig,
    VaeSlicingConfig,
)
from accel.features.applied import FeatureUnavailable

STEPS = 8


def test_with_block_applies_in_stage_order_gathers_evidence_per_call_and_removes_everything():
    target = loaded("tiny-flux")
    pipe = target.pipeline
    pipeline_class = type(pipe)
    baseline = generate(target, steps=STEPS)[0]
    cache = CacheDitConfig(residual_diff_threshold=0.5, max_warmup_steps=2)
    with apply(pipe, cache, AttentionBackendConfig(backend="_native_math"), num_inference_steps=STEPS) as applied:
        assert [f.name for f in applied.features] == ["attention_backend", "cache_dit"]  # stage 20, then 30
        assert type(pipe).__name__ == pipeline_class.__name__  # the pipeline still says what it is
        images = [pipe("a red fox", num_inference_steps=STEPS, height=64, width=64, output_type="np").images]
        images.append(pipe("a red fox", num_inference_steps=STEPS, height=64, width=64, output_type="np").images)
    evidence = applied.evidence()
    assert set(evidence) == {"attention_backend", "cache_dit"}
    assert all(entry["engaged"] for entry in evidence.values()), evidence
    assert len(evidence["cache_dit"]["cached_steps_per_run"]) == 2  # one evidence window per pipeline call
    assert len(evidence["attention_backend"]["dispatched_per_run"]) == 2
    assert type(pipe) is pipeline_class
    assert np.array_equal(generate(target, steps=STEPS)[0], baseline)  # leaving the block removed both


def test_without_with_the_handle_removes():
    target = loaded("tiny-flux")
    baseline = generate(target, steps=STEPS)[0]
    applied = apply(target.pipeline, TeaCacheConfig(rel_l1_thresh=0.4), num_inference_steps=STEPS)
    accelerated = generate(target, steps=STEPS)[0]
    verdict = applied.verdicts()["tea_cache"]
    applied.remove()
    applied.remove()  # idempotent
    assert verdict.engaged, verdict.summary
    assert not np.array_equal(accelerated, baseline)
    assert np.array_equal(generate(target, steps=STEPS)[0], baseline)
    # Entering it again would run the plain pipeline while evidence() still showed the old engagement.
    with pytest.raises(ConfigError, match=r"already removed: call accel.apply\(pipe, ...\) again"), applied:
        pass


def test_conflicts_are_rejected_before_anything_is_applied():
    target = loaded("tiny-flux")
    pipe = target.pipeline
    pipeline_class, forward = type(pipe), pipe.transformer.forward
    with pytest.raises(ConfigError, match=r"apply\(\): features '.*' and '.*' cannot be combined: two cache backends"):
        apply(pipe, VaeSlicingConfig(), CacheDitConfig(), TeaCacheConfig())
    assert type(pipe) is pipeline_class and pipe.transformer.forward == forward
    assert not pipe.vae.use_slicing  # the feature before the conflicting pair was not applied either


def test_unknown_config_and_repeated_feature_are_config_errors():
    pipe = loaded("tiny-flux").pipeline
    with pytest.raises(ConfigError, match=r"no feature takes a dict; pass one of the feature configs: .*CacheDit"):
        apply(pipe, {"residual_diff_threshold": 0.2})
    with pytest.raises(ConfigError, match="cache_dit is given twice"):
        apply(pipe, CacheDitConfig(), CacheDitConfig(residual_diff_threshold=0.5))


def test_a_feature_the_pipeline_cannot_run_is_refused_with_its_reason_and_scope():
    target = loaded("tiny-qwen-image")
    with pytest.raises(
        FeatureUnavailable, match="tea_cache: harness: tea_cache's hooks cannot compute the modulated input of Qwen"
    ) as raised:
        apply(target.pipeline, VaeSlicingConfig(), TeaCacheConfig(), num_inference_steps=STEPS)
    assert raised.value.scope == "model" and raised.value.feature == "tea_cache"
    assert not target.pipeline.vae.use_slicing


def test_a_failing_apply_removes_the_features_applied_before_it(monkeypatch):
    target = loaded("tiny-flux")
    baseline = generate(target, steps=STEPS)[0]

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(type(FEATURES["vae_use_slicing"]), "apply", broken)
    with pytest.raises(RuntimeError, match="boom"):
        apply(target.pipeline, TeaCacheConfig(rel_l1_thresh=0.4), VaeSlicingConfig(), num_inference_steps=STEPS)
    assert np.array_equal(generate(target, steps=STEPS)[0], baseline)  # TeaCache (stage 30 < 60) was removed


def test_a_call_with_other_steps_than_a_step_planning_feature_was_set_up_for_is_refused():
    target = loaded("tiny-flux")
    expected = "tea_cache were set up for num_inference_steps=8, the call asks for 4"
    with (
        apply(target.pipeline, TeaCacheConfig(rel_l1_thresh=0.4), num_inference_steps=STEPS),
        pytest.raises(ConfigError, match=expected),
    ):
        generate(target, steps=4)
    # A call that leaves the steps out runs the pipeline's default (28 here), not the 8 TeaCache planned.
    default = (
        "tea_cache were set up for num_inference_steps=8, the call leaves num_inference_steps out: "
        "the pipeline's default is 28"
    )
    with (
        apply(target.pipeline, TeaCacheConfig(rel_l1_thresh=0.4), num_inference_steps=STEPS),
        pytest.raises(ConfigError, match=default),
    ):
        target.pipeline("a red fox", height=64, width=64, output_type="np")


def test_apply_is_the_package_level_api_and_every_feature_has_an_exported_config():
    import accel.features as features

    assert accel.apply is features.apply
    for feature in FEATURES.values():
        if FEATURES.source(feature.name) != "built-in":
            continue
        name = feature.config_cls.__name__
        assert name.endswith("Config"), name
        assert getattr(features, name) is feature.config_cls, f"{name} is not exported from accel.features"
        assert FEATURES.for_config(feature.config_cls()) is feature


def test_a_second_apply_on_the_same_pipeline_is_refused_until_the_first_is_removed():
    target = loaded("tiny-flux")
    pipe = target.pipeline
    baseline = generate(target, steps=STEPS)[0]
    first = apply(pipe, CacheDitConfig(residual_diff_threshold=0.5, max_warmup_steps=2), num_inference_steps=STEPS)
    # Stacked, the conflict rules (cache_dit with tea_cache) would be skipped and removal order would matter.
    with pytest.raises(ConfigError, match=r"already has features applied by an earlier apply\(\) \(cache_dit\)"):
        apply(pipe, TeaCacheConfig(rel_l1_thresh=0.4), num_inference_steps=STEPS)
    first.remove()
    with apply(pipe, VaeSlicingConfig(), num_inference_steps=STEPS) as second:  # allowed once removed
        assert [f.name for f in second.features] == ["vae_use_slicing"]
    assert np.array_equal(generate(target, steps=STEPS)[0], baseline)


def test_per_request_step_counts_work_by_applying_per_request_and_the_docs_name_the_bound_features():
    """A server taking a step count per request: the step-planning features are bound to apply()'s steps (a
    call with other steps is refused, above); applying per request runs each count, and a feature that does not
    plan by step takes any count per call. docs/features.md names exactly the features that are bound."""
    import re
    from pathlib import Path

    target = loaded("tiny-flux")
    for steps in (STEPS, STEPS // 2):  # two requests, two step counts, each its own apply()
        expected = generate(target, steps=steps)[0]
        with apply(target.pipeline, TeaCacheConfig(rel_l1_thresh=1e-9), num_inference_steps=steps):
            # a threshold no step stays under: nothing skipped
            assert np.array_equal(generate(target, steps=steps)[0], expected)
    with apply(target.pipeline, VaeSlicingConfig(), num_inference_steps=STEPS):
        for steps in (STEPS, STEPS // 2):
            generate(target, steps=steps)  # not refused: slicing does not plan by step
    bound = sorted(name for name, feature in FEATURES.items() if feature.needs_steps)
    docs = (Path(__file__).resolve().parents[1] / "docs" / "features.md").read_text()
    listed = re.search(r"needed by the features that plan by step\s+\(([^)]*)\)", docs)
    assert listed and sorted(re.findall(r"`(\w+)`", listed.group(1))) == bound, (listed, bound)
    assert "Per-request step counts" in docs
