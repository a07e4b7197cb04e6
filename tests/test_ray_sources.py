"""Checkpoint paths the workers read: a relative local path is made absolute on the driver (a Ray worker on
another node runs in another working directory; a hostile review saw a shared checkpoint refused)."""

from __future__ import annotations

from accel.profile import parse_profile
from accel.sweep.checks import local_sources_resolved
from accel.sweep.runner import plan


def test_a_relative_checkpoint_path_reaches_the_cells_absolute(tmp_path, monkeypatch):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    monkeypatch.chdir(tmp_path)
    profile = parse_profile(
        {
            "models": [{"name": "local", "source": "ckpt"}, {"name": "zoo", "source": "tiny-flux"}],
            "workload": {"prompts": ["a cat"], "steps": 2},
            "variants": [{"name": "v", "features": {"vae_use_slicing": True}}],
        }
    )
    models = local_sources_resolved(profile.models)
    assert [m.source for m in models] == [str(checkpoint.resolve()), "tiny-flux"]
    assert profile.models[0].source == "ckpt"  # the profile itself (and profile.resolved.yaml) is unchanged
    assert {c.model.source for c in plan(profile, tmp_path / "run") if c.model.name == "local"} == {
        str(checkpoint.resolve())
    }
