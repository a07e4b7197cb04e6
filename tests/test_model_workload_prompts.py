"""A model's own workload prompts (wave 8): a model-level ``prompt_set`` or ``prompts`` replaces the profile's
prompts together with the set's expectations."""

from __future__ import annotations

from accel.profile import parse_profile


def test_a_models_own_prompt_set_replaces_the_profiles_prompts():
    # Found measuring coverage's cost at more prompts: a model-level prompt_set under profile-level prompts kept
    # the profile's one prompt and carried the set's 48 expectations beside it.
    from accel.zoo.world import HELD_OUT_PROMPTS

    profile = parse_profile(
        {
            "models": [
                {"name": "mf", "source": "mini-flux", "workload": {"prompt_set": "shapes-held-out"}},
                {"name": "tf", "source": "tiny-flux", "workload": {"prompts": ["a cat"]}},
            ],
            "workload": {"prompts": ["a red fox"], "steps": 2, "height": 32, "width": 32},
            "variants": [{"name": "v", "features": {"vae_use_slicing": True}}],
        }
    )
    own = profile.workload_for(profile.models[0])
    assert own.prompts == list(HELD_OUT_PROMPTS) and len(own.prompt_expectations or []) == len(HELD_OUT_PROMPTS)
    assert profile.workload_for(profile.models[1]).prompts == ["a cat"]
    assert profile.workload.prompts == ["a red fox"]
