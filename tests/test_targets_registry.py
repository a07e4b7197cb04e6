"""Target kinds live in one registry (``accel/targets/registry.py``) that the profile, the cell and the engine
mapping read; the in-process kinds satisfy the ``Target`` protocol."""

from __future__ import annotations

import pytest

from accel.engines.mapping import PATHS
from accel.errors import ConfigError, UnavailableError
from accel.profile import ModelSpec, parse_profile
from accel.sweep.engine_cell import ENGINE_TARGETS
from accel.targets.build import make_target
from accel.targets.registry import TARGETS, Target, TargetKind, engine_targets, register_target


def test_every_in_process_kind_builds_a_target_that_meets_the_protocol():
    for name, kind in TARGETS.items():
        if kind.engine:
            continue
        target = make_target(ModelSpec(name="m", source="tiny-flux", target=name))
        assert isinstance(target, Target), name
        assert target.pipeline is None and target.device == "cpu"


def test_engine_kinds_are_not_built_in_this_process_and_are_the_engine_paths():
    assert engine_targets() == ("vllm-omni", "vllm-omni-adapter") == PATHS == ENGINE_TARGETS
    with pytest.raises(UnavailableError, match="runs in its engine's own environment"):
        make_target(ModelSpec(name="m", source="tiny-flux", target="vllm-omni"))


def test_an_unknown_target_names_the_registered_ones():
    raw = {"name": "p", "models": [{"name": "m", "source": "tiny-flux", "target": "nativ"}],
           "workload": {"prompts": ["x"]}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"models\[0\]\.target: unknown target 'nativ'. Did you mean 'native'\?"):
        parse_profile(raw, "p.yaml")


def test_a_registered_kind_is_accepted_by_the_profile_and_built(monkeypatch):
    monkeypatch.setitem(TARGETS, "my-target", TargetKind("my-target", "mine", "accel.targets.adapter:AdapterTarget"))
    spec = ModelSpec(name="m", source="tiny-flux", target="my-target")
    assert type(make_target(spec)).__name__ == "AdapterTarget"
    with pytest.raises(ConfigError, match="already registered"):
        register_target(TargetKind("adapter", "again"))
