"""Pairwise planning: every option appears, every compatible pair is covered, excluded pairs say why."""

from __future__ import annotations

import itertools
import sys

import pytest
from conftest import small_profile

from accel.cli import main
from accel.errors import ConfigError
from accel.features.combinations import plan_pairwise
from accel.profile import parse_profile

OPTIONS = {
    "cache_dit": [{"residual_diff_threshold": 0.5}, {"residual_diff_threshold": 0.24}],
    "tea_cache": [0.4],
    "quantization": ["int8wo", "fp8wo"],
    "compile": ["regional", "full"],
    "enable_cpu_offload": [True],
    "group_offload": [{}],
    "vae_use_tiling": [{"tile_size": 32}],
}


def test_pairwise_covers_every_compatible_pair_and_option():
    plan = plan_pairwise(OPTIONS, "p.yaml: combinations")
    pairs = {frozenset(p) for p in itertools.combinations(OPTIONS, 2)}
    assert set(plan.skipped_pairs) == {
        frozenset(("cache_dit", "tea_cache")),
        frozenset(("enable_cpu_offload", "group_offload")),
    }
    covered = {frozenset(p) for v in plan.variants for p in itertools.combinations(v["features"], 2)}
    assert covered >= pairs - set(plan.skipped_pairs)
    for name, values in OPTIONS.items():
        for value in values:
            assert any(v["features"].get(name) == value for v in plan.variants), (name, value)
    assert len(plan.variants) < plan.full_product / 20


def test_generated_variants_respect_the_rules():
    from accel.features import validate_variant_features

    for variant in plan_pairwise(OPTIONS, "w").variants:
        validate_variant_features(variant["features"], variant["name"])  # raises on a conflict


def test_profile_combinations_expand_after_explicit_variants(capsys, monkeypatch, tmp_path):
    data = {
        "models": [{"name": "m", "source": "tiny-flux"}],
        "workload": {"prompts": ["x"]},
        "variants": [{"name": "mine", "features": {"vae_use_slicing": True}}],
        "combinations": {"features": {"tea_cache": [0.3], "quantization": ["int8wo"], "compile": ["regional"]}},
    }
    names = [v.name for v in parse_profile(data).variant_plan().variants]
    assert names == ["mine", "pairwise-01"]
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sys, "argv", ["omni-accel", "plan", str(path)])
    main()
    out = capsys.readouterr().out
    assert "m/pairwise-01" in out and "tea_cache=0.3" in out and "3 feature pairs" in out


def test_bad_combinations_are_config_errors():
    with pytest.raises(ConfigError, match="pairwise needs at least two features"):
        plan_pairwise({"tea_cache": [0.2]}, "p.yaml: combinations")
    with pytest.raises(ConfigError, match=r"combinations.features.compile: expected a non-empty list"):
        plan_pairwise({"tea_cache": [0.2], "compile": "regional"}, "p.yaml: combinations")
    with pytest.raises(ConfigError, match=r"unknown feature 'teacache'\. Did you mean 'tea_cache'"):
        plan_pairwise({"teacache": [0.2], "compile": ["regional"]}, "p.yaml: combinations")


def test_a_variants_options_are_parsed_once_when_the_profile_loads(monkeypatch, tmp_path):
    import accel.features
    from accel.engines.mapping import map_variant
    from accel.sweep.cell import run_cell
    from accel.sweep.runner import plan as plan_cells

    data = small_profile(["tiny-flux"], [{"name": "tiling", "features": {"vae_use_tiling": {"tile_size": 32}}}])
    data["workload"]["steps"] = 2
    data["combinations"] = {"mode": "pairwise", "features": {"tea_cache": [0.3], "vae_use_slicing": [True]}}
    parsed: list[str] = []
    parse = accel.features.parse_feature_options
    monkeypatch.setattr(
        accel.features, "parse_feature_options", lambda name, *a, **k: (parsed.append(name), parse(name, *a, **k))[1]
    )
    profile = parse_profile(data)
    assert sorted(parsed) == ["tea_cache", "vae_use_slicing", "vae_use_tiling"]  # each option value, once
    planned = profile.variant_plan()
    assert profile.variant_plan() is planned  # expanded once, pairwise included
    assert profile.model_copy(update={"variants": []}).variant_plan().variants[0].name == "pairwise-01"
    assert [v.name for v in planned.variants] == ["tiling", "pairwise-01"] and planned.pairwise is not None
    cells = {cell.variant: cell for cell in plan_cells(profile, tmp_path)}
    assert cells["tiling"].configs is planned.variants[0].configs  # the cell carries the parsed configs

    def parsed_again(*args, **kwargs):
        raise AssertionError("a variant's options were parsed again after the profile was loaded")

    monkeypatch.setattr(accel.features, "parse_feature_options", parsed_again)
    monkeypatch.setattr(accel.features, "validate_variant_features", parsed_again)
    assert map_variant(cells["pairwise-01"].configs, "vllm-omni").kwargs  # the engines mapping takes configs
    record = run_cell(cells["tiling"])
    assert record["status"] == "ok", record.get("error")
    assert record["features"] == {"vae_use_tiling": {"tile_size": 32}}  # records keep the options as written
