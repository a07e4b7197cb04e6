"""The conflict rule table: every rule is valid, and each incompatible combination is rejected."""

from __future__ import annotations

import pytest

from accel.errors import ConfigError
from accel.features import FEATURES, validate_variant_features
from accel.features.rules import load_rules, parse_rules


def test_shipped_rules_parse_and_name_registered_features():
    rules = load_rules()
    assert len(rules) >= 8
    assert all(rule.reason and rule.source for rule in rules)


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"tea_cache": 0.2, "cache_dit": {}}, "two cache backends"),
        ({"first_block_cache": 0.1, "mag_cache": {}}, "two cache backends"),
        ({"enable_sequential_cpu_offload": True, "compile": "regional"}, "use group_offload"),
        ({"compile": "full", "enable_cpu_offload": True}, "use compile granularity regional"),
        ({"compile": {"fullgraph": True}, "tea_cache": 0.2}, "fullgraph compile cannot contain"),
        ({"enable_layerwise_offload": {}, "enable_cpu_offload": True}, "both move the transformer"),
        ({"group_offload": {}, "enable_cpu_offload": True}, "diffusers refuses model offload"),
    ],
)
def test_incompatible_combinations_are_rejected_with_the_reason(features, message):
    with pytest.raises(ConfigError, match=message) as error:
        validate_variant_features(features, "p.yaml: variants[0].features")
    assert str(error.value).startswith("p.yaml: variants[0].features: features '")


@pytest.mark.parametrize(
    "features",
    [
        {"compile": "regional", "group_offload": {}},
        {"cache_dit": {}, "enable_cpu_offload": True, "quantization": "int8wo"},
        {"vae_use_tiling": {}, "vae_use_slicing": True, "attention_backend": "_native_math"},
    ],
)
def test_compatible_combinations_pass(features):
    assert set(validate_variant_features(features, "where")) == set(features)


def test_a_rule_naming_an_unknown_feature_is_an_error():
    with pytest.raises(ConfigError, match="must name one registered feature or family"):
        parse_rules({"rules": [{"match": [{"feature": "warp_drive"}, {"family": "cache"}], "reason": "x"}]}, "r.yaml")


def test_every_feature_family_has_its_own_test_module():
    from pathlib import Path

    tests = Path(__file__).parent
    for family in {feature.family for feature in FEATURES.values()}:
        assert (tests / f"test_features_{family}.py").is_file(), f"no tests/test_features_{family}.py"


def test_every_feature_has_documented_options_and_a_class():
    for feature in FEATURES.values():
        assert feature.description and feature.feature_class.value in ("lossless", "lossy")
        for name, field in feature.config_cls.model_fields.items():
            assert field.description or feature.config_cls.__doc__, f"{feature.name}.{name} is undocumented"


@pytest.mark.parametrize(
    "order, message",
    [
        (1, r"order: expected a list"),
        ([1], r"order\[0\]: expected a mapping with keys first, then, reason, source"),
        ([{"firts": {}}], r"order\[0\]: unknown key 'firts'. Did you mean 'first'\?"),
        ([{"first": 3}], r"order\[0\].first: expected \{feature: NAME\} or \{family: NAME\}"),
    ],
)
def test_an_order_rule_of_the_wrong_shape_is_one_line(order, message):
    from accel.errors import ConfigError
    from accel.features.rules import parse_order

    with pytest.raises(ConfigError, match=message):
        parse_order({"order": order}, "r.yaml")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"feature": "compile", "options": {"granularity": "ful"}},
            "rules[0].match: feature compile: options.granularity: 'ful' would never match (options.compile."
            "granularity: Input should be 'regional' or 'full', got 'ful')",
        ),
        (
            {"feature": "compile", "options": {"granularty": "full"}},
            "rules[0].match: feature compile: unknown option 'granularty'. Did you mean 'granularity'? Allowed: "
            "backend, dynamic, fullgraph, granularity, mode",
        ),
        (
            {"feature": "compile", "options": {"fullgraph": 1}},
            "rules[0].match: feature compile: options.fullgraph: 1 would never match",
        ),
        ({"family": "cache", "options": {"nope": 1}}, "rules[0].match: family cache: unknown option 'nope'."),
    ],
)
def test_a_rule_whose_options_could_never_match_is_refused_naming_the_option(item, message):
    """A misspelt option or value (``granularity: ful``) used to make its rule match nothing, silently: the
    combination it forbids then ran. Every option must be one the feature (or a feature of the family) takes,
    with a value it accepts as written."""
    rules = {"rules": [{"match": [item, {"family": "offload"}], "reason": "x"}]}
    with pytest.raises(ConfigError) as error:
        parse_rules(rules, "r.yaml")
    assert str(error.value).startswith(f"r.yaml: {message}"), str(error.value)
    good = {**item, "options": {"granularity": "full"}} if item.get("feature") else {**item, "options": {}}
    assert parse_rules({"rules": [{"match": [good, {"family": "offload"}], "reason": "x"}]}, "r.yaml")
