"""Property-based tests of the profile schema: valid profiles round-trip through YAML; any mutation
either validates or fails with a ConfigError, never another exception."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel.errors import ConfigError
from accel.profile import parse_profile

FEATURE_MENU = [
    {"vae_use_slicing": True},
    {"vae_use_tiling": {"tile_size": 32}},
    {"attention_backend": "_native_math"},
    {"cache_dit": {"residual_diff_threshold": 0.3}},
    {"quantization": "int8wo"},
    {"compile": "regional", "group_offload": {}},
    {"tea_cache": 0.2, "enable_cpu_offload": True},
]
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)

valid_profiles = st.fixed_dictionaries(
    {
        "name": names,
        "models": st.lists(
            st.fixed_dictionaries({"name": names, "source": st.sampled_from(["tiny-flux", "tiny-wan", "./ckpt"])}),
            min_size=1,
            max_size=3,
            unique_by=lambda m: m["name"],
        ),
        "workload": st.fixed_dictionaries(
            {
                "prompts": st.lists(st.text(min_size=1, max_size=20).filter(str.strip), min_size=1, max_size=3),
                "seeds": st.lists(st.integers(0, 2**31), min_size=1, max_size=3, unique=True),
                "steps": st.integers(1, 50),
                "height": st.sampled_from([16, 32, 64, 512]),
                "guidance_scale": st.floats(0, 20, allow_nan=False),
            }
        ),
        "variants": st.lists(
            st.fixed_dictionaries({"name": names, "features": st.sampled_from(FEATURE_MENU)}),
            max_size=4,
            unique_by=lambda v: v["name"],
        ).filter(lambda vs: all(v["name"] not in ("baseline", "noise-floor") for v in vs)),
        "measure": st.fixed_dictionaries(
            {"repeats": st.integers(1, 5), "executor": st.sampled_from(["inline", "process"])}
        ),
    }
)


@given(valid_profiles)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_valid_profiles_round_trip(data):
    profile = parse_profile(data, "p.yaml")
    dumped = yaml.safe_dump(profile.model_dump(mode="json"))
    again = parse_profile(yaml.safe_load(dumped), "p.yaml")
    assert again == profile and again.fingerprint() == profile.fingerprint()


JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=8),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)  # fmt: skip


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@given(valid_profiles, st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_mutation_validates_or_raises_config_error(data, draw):
    mutated = copy.deepcopy(data)
    paths = [p for p in _paths(mutated) if p]
    path = draw.draw(st.sampled_from(paths))
    parent = mutated
    for part in path[:-1]:
        parent = parent[part]
    action = draw.draw(st.sampled_from(["replace", "delete", "add-key"]))
    if action == "replace":
        parent[path[-1]] = draw.draw(JUNK)
    elif action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw.draw(st.text(min_size=1, max_size=10))] = draw.draw(JUNK)
    try:
        parse_profile(mutated, "p.yaml")
    except ConfigError as error:
        assert str(error).startswith("p.yaml")
        assert "\n" not in str(error)


# Fuzzing the loader itself (issue 13): bytes, YAML-ish text and damaged profiles give a Profile or a one-line
# ConfigError naming the file, never another exception; a loaded profile can always be hashed and resumed.
YAML_ALPHABET = "ab: -[]{},&*!|>'\"#%@`?\n\t .0e1\\~\xe9"
VALID_TEXT = yaml.safe_dump(
    {
        "name": "fuzz",
        "models": [{"name": "m", "source": "tiny-flux", "call_kwargs": {"max_sequence_length": 32}}],
        "workload": {"prompts": ["a fox"], "seeds": [0, 1], "steps": 2},
        "variants": [{"name": "v", "features": {"cache_dit": {"max_warmup_steps": 1}, "tea_cache": 0.2}}],
        "measure": {"repeats": 1},
    }
)


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-profile") / "p.yaml"


def _load(path, content: bytes) -> None:
    from accel.profile import load_profile

    path.write_bytes(content)
    try:
        profile = load_profile(path)
    except ConfigError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error), str(error)
        return
    profile.fingerprint()
    again = parse_profile(yaml.safe_load(yaml.safe_dump(profile.model_dump(mode="json"))), "p.yaml")
    assert again.fingerprint() == profile.fingerprint()


@given(st.binary(max_size=200))
@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_loader_any_bytes(fuzz_file, content):
    _load(fuzz_file, content)


@given(st.text(alphabet=YAML_ALPHABET, max_size=120))
@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_loader_yaml_like_text(fuzz_file, text):
    _load(fuzz_file, text.encode())


@given(st.data())
@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_loader_damaged_profile(fuzz_file, data):
    text = VALID_TEXT
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 4))
        text = text[:at] + data.draw(st.text(alphabet=YAML_ALPHABET, max_size=6)) + text[at + cut :]
    _load(fuzz_file, text.encode())
