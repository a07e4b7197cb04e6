"""synthetic: sources: published shapes as data, random weights built where they run, depth and width."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accel.errors import ConfigError
from accel.zoo import synthetic
from accel.zoo.architectures import ARCHITECTURES

SMALL = "synthetic:flux.1-dev?depth=1&width=4"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("synthetic:flux-dev", "Did you mean 'flux.1-dev'"),
        ("synthetic:flux.1-dev?deep=2", "unknown synthetic option 'deep'"),
        ("synthetic:flux.1-dev?depth=0", "expected a fraction in (0, 1] or a whole number"),
        ("synthetic:flux.1-dev?depth=2.5", "expected a fraction in (0, 1] or a whole number"),
        ("synthetic:flux.1-dev?width=5", "width=5 does not divide"),
        ("synthetic:flux.1-dev?width=half", "expected a whole divisor"),
    ],
)
def test_bad_synthetic_sources_name_what_is_allowed(source, message):
    with pytest.raises(ConfigError, match=r"models\.source") as error:
        synthetic.parse(source, "models.source")
    assert message in str(error.value)


def test_every_architecture_names_the_source_of_its_numbers():
    for arch in ARCHITECTURES.values():
        for name, component in arch.components.items():
            assert arch.hub_id.split("/")[0] in component.source or "/" in component.source, (arch.name, name)
            assert "config.json" in component.source, (arch.name, name)


def _counts(source):
    components = synthetic.build_components(synthetic.parse(source), "meta", "bfloat16")
    return components, {n: synthetic.parameter_count(m) for n, m in components.items() if hasattr(m, "parameters")}


def test_flux_at_published_shapes_has_the_published_parameter_counts():
    components, counts = _counts("synthetic:flux.1-dev")
    # FLUX.1-dev's transformer: 11.9B parameters ("12B"); T5-XXL's encoder 4.76B; CLIP-L text 123M; VAE 84M.
    assert abs(counts["transformer"] / 11.90e9 - 1) < 0.005
    assert abs(counts["text_encoder_2"] / 4.762e9 - 1) < 0.005
    assert abs(counts["text_encoder"] / 123.1e6 - 1) < 0.005
    assert abs(counts["vae"] / 83.8e6 - 1) < 0.005
    assert all(p.device.type == "meta" for p in components["transformer"].parameters())  # nothing allocated


@pytest.mark.parametrize("name", ["qwen-image", "wan2.1-t2v-1.3b"])
def test_other_architectures_build_on_meta(name):
    _, counts = _counts(f"synthetic:{name}")
    # Qwen-Image's MMDiT: 20B parameters; Wan 2.1 T2V 1.3B: 1.3B; both with their text encoders.
    expected = {"qwen-image": 20.4e9, "wan2.1-t2v-1.3b": 1.42e9}[name]
    assert abs(counts["transformer"] / expected - 1) < 0.05, counts


def test_depth_keeps_the_widths_and_scales_every_block_stack():
    configs = synthetic.component_configs(synthetic.parse("synthetic:flux.1-dev?depth=2"))
    assert (configs["transformer"]["num_layers"], configs["transformer"]["num_single_layers"]) == (2, 2)
    assert configs["text_encoder_2"]["num_layers"] == 2 and configs["text_encoder"]["num_hidden_layers"] == 2
    assert configs["transformer"]["num_attention_heads"] == 24 and configs["text_encoder_2"]["d_model"] == 4096
    quarter = synthetic.component_configs(synthetic.parse("synthetic:flux.1-dev?depth=0.25"))
    assert (quarter["transformer"]["num_layers"], quarter["transformer"]["num_single_layers"]) == (5, 10)
    qwen = synthetic.component_configs(synthetic.parse("synthetic:qwen-image?depth=1"))
    assert qwen["text_encoder"]["vision_config"]["fullatt_block_indexes"] == []


def test_weights_are_made_on_the_target_device_and_dtype_and_reproduce():
    first = synthetic.build_components(synthetic.parse(SMALL), "cpu", "bfloat16")
    assert {p.dtype for p in first["transformer"].parameters()} == {torch.bfloat16}
    assert {p.device.type for p in first["text_encoder_2"].parameters()} == {"cpu"}
    weights = [p for p in first["transformer"].parameters() if p.ndim == 2]
    assert all(torch.isfinite(w).all() and w.float().std() > 0 for w in weights)
    second = synthetic.build_components(synthetic.parse(SMALL), "cpu", "bfloat16")
    again = second["transformer"].state_dict()
    for name, tensor in first["transformer"].state_dict().items():
        assert torch.equal(tensor, again[name]), name
    assert first["tokenizer_2"].model_max_length >= 512  # the published max_sequence_length fits


def test_sources_resolve_without_files_and_check_the_resolution(write_profile, tmp_path):
    from accel.profile import ModelSpec, load_profile
    from accel.sweep.checks import check_inputs
    from accel.targets.adapter import default_call_kwargs, resolution_factor, resolve_source

    assert resolve_source(ModelSpec(name="f", source=SMALL)) == SMALL
    assert resolution_factor("synthetic:flux.1-dev") == 16
    assert default_call_kwargs("synthetic:flux.1-dev") == {"max_sequence_length": 512}
    profile = {
        "models": [{"name": "f", "source": SMALL}],
        "workload": {"prompts": ["a fox"], "height": 40, "width": 32},
    }
    path = write_profile(profile)
    with pytest.raises(ConfigError, match=r"workload\.height: 40 is not a multiple of 16"):
        check_inputs(load_profile(path), str(path))


def test_load_time_options_are_refused_for_synthetic_sources():
    from accel.errors import UnavailableError
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget

    target = AdapterTarget(ModelSpec(name="f", source=SMALL, device="cpu", load_kwargs={"variant": "fp16"}))
    with pytest.raises(UnavailableError, match="need a checkpoint"):
        target.load()


def test_a_variant_can_be_restricted_to_some_models(write_profile):
    from accel.profile import load_profile
    from accel.sweep.runner import plan

    profile = {
        "models": [{"name": "a", "source": "tiny-flux"}, {"name": "b", "source": "tiny-flux", "target": "native"}],
        "workload": {"prompts": ["a fox"]},
        "variants": [{"name": "v", "features": {"vae_use_slicing": True}, "models": ["a"]}],
        "measure": {"noise_floor": False},
    }
    cells = plan(load_profile(write_profile(profile)), Path("."))
    assert [c.key for c in cells] == ["a/baseline", "a/v", "b/baseline"]
    profile["variants"][0]["models"] = ["c"]
    with pytest.raises(ConfigError, match=r"variants\[0\].models: 'c' is not a model name"):
        load_profile(write_profile(profile))
