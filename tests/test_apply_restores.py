"""Leaving ``apply()`` gives back the untouched pipeline, bit for bit, after every CPU-runnable feature and after
random orders of up to three compatible ones (hypothesis), on tiny-flux: the output is the untouched output and
nothing the libraries install is left on the pipeline (hook registries, accelerate hooks, module hooks, offload
attributes), since what is left changes what the next feature does (issue 41: cache-dit skips its pattern check
when an empty ``_diffusers_hook`` registry is there)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
from features_helpers import REQUEST, generate, loaded
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accel import apply
from accel.errors import ConfigError
from accel.features import FEATURES
from accel.features.applied import resolve
from accel.features.restore import OFFLOAD_ATTRIBUTES

# Every feature that runs on a CPU-only host with tiny-flux, with options that run there. Left out:
# enable_sequential_cpu_offload (needs an accelerator), faster_cache (refuses Flux's packed latents), the
# parallel features (several devices).
CPU_FEATURES: dict[str, Any] = {
    "enable_cpu_offload": True,
    "group_offload": {"offload_type": "block_level", "num_blocks_per_group": 1},
    "enable_layerwise_offload": {},
    "first_block_cache": None,
    "cache_dit": None,
    "tea_cache": None,
    "mag_cache": None,
    "taylorseer_cache": None,
    "pyramid_attention_broadcast": None,
    "quantization": None,
    "compile": {"backend": "eager"},
    "vae_use_tiling": True,
    "vae_use_slicing": True,
    "attention_backend": "_native_math",
}


def configs(names: list[str]) -> list[Any]:
    return [FEATURES[name].parse_options(CPU_FEATURES[name]) for name in names]


def compatible(names: list[str]) -> bool:
    try:
        resolve(tuple(configs(names)))
    except ConfigError:
        return False
    return True


def leftovers(pipeline: Any) -> dict[str, Any]:
    """What libraries install on a pipeline: per module, its hook registry, accelerate hook, torch hooks and an
    instance-level ``forward``; on the pipeline, its class and offload attributes."""
    state: dict[str, Any] = {"class": type(pipeline)}
    state.update({name: repr(getattr(pipeline, name, None)) for name in OFFLOAD_ATTRIBUTES})
    for component, root in pipeline.components.items():
        if isinstance(root, torch.nn.Module):
            for name, module in root.named_modules():
                instance_forward = module.__dict__.get("forward")
                found = (
                    getattr(module, "_diffusers_hook", None) is not None,
                    hasattr(module, "_hf_hook"),
                    len(module._forward_pre_hooks) + len(module._forward_hooks),
                    instance_forward,  # an instance-level forward shadows the class's: the next feature patches it
                )
                if any(found):
                    state[f"{component}.{name}"] = found
    return state


@functools.cache
def untouched() -> tuple[Any, np.ndarray, dict[str, Any]]:
    """tiny-flux, loaded once, its untouched output and what is on it (after one call: a call sets attributes)."""
    target = loaded("tiny-flux")
    output = generate(target)[0]
    return target, output, leftovers(target.pipeline)


def assert_untouched(target: Any, baseline: np.ndarray, state: dict[str, Any], after: str) -> None:
    assert leftovers(target.pipeline) == state, f"left on the pipeline after {after}"
    assert np.array_equal(generate(target)[0], baseline), f"output differs from the untouched one after {after}"


@pytest.mark.parametrize("name", sorted(CPU_FEATURES))
def test_leaving_apply_restores_the_untouched_pipeline_after_each_feature(name):
    target, baseline, state = untouched()
    with apply(target.pipeline, *configs([name]), num_inference_steps=REQUEST.steps):
        generate(target)
    assert_untouched(target, baseline, state, name)


ORDERS = st.lists(st.sampled_from(sorted(CPU_FEATURES)), min_size=1, max_size=3, unique=True).filter(compatible)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(names=ORDERS, together=st.booleans())
# The review's sequences (issue 41: 2.6e-6 after these offloads, and a cache after them differing from the same
# cache applied first), always tried: an offload left, then a cache.
@example(names=["enable_cpu_offload", "first_block_cache"], together=False)
@example(names=["group_offload", "first_block_cache"], together=False)
@example(names=["enable_layerwise_offload", "cache_dit"], together=False)
def test_leaving_apply_restores_the_untouched_pipeline_after_random_orders(names, together):
    """Applied together (one apply(), in stage order) or one after the other (each its own apply(), in the
    drawn order): after leaving, the pipeline is the untouched one."""
    target, baseline, state = untouched()
    groups = [configs(names)] if together else [[config] for config in configs(names)]
    for group in groups:
        with apply(target.pipeline, *group, num_inference_steps=REQUEST.steps):
            generate(target)
    assert_untouched(target, baseline, state, f"{'+'.join(names)} ({'together' if together else 'in turn'})")


@pytest.mark.parametrize(
    "names",
    [["group_offload", "cache_dit"], ["enable_layerwise_offload", "cache_dit"], ["enable_cpu_offload", "cache_dit"]],
)
def test_an_offload_left_and_cache_dit_applied_after_it_leave_the_class_forward(names):
    """Found by the property test: removing an offload leaves an instance-level ``forward`` on the modules it
    hooked (the registry puts the bound original back as an attribute); cache-dit, applied next, takes it for
    the user's own, patches it and keeps its patch on removal: the transformer ran cache-dit's
    ``__patch_transformer_forward__`` after leaving."""
    target, baseline, state = untouched()
    for config in configs(names):  # one after the other, each its own apply()
        with apply(target.pipeline, config, num_inference_steps=REQUEST.steps):
            generate(target)
    assert_untouched(target, baseline, state, " + ".join(names))


def layout(pipeline: Any) -> dict[str, tuple[Any, ...]]:
    """Every parameter and buffer: shape, strides, dtype, device, contiguity and memory format."""
    found = {}
    for component, root in pipeline.components.items():
        if isinstance(root, torch.nn.Module):
            for name, tensor in root.state_dict(keep_vars=True).items():
                channels_last = tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
                found[f"{component}.{name}"] = (
                    tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device, tensor.is_contiguous(),
                    channels_last,
                )  # fmt: skip
    return found


@pytest.mark.parametrize("offload", ["enable_cpu_offload", "group_offload", "enable_layerwise_offload"])
def test_a_cache_after_an_offload_is_the_cache_applied_first(offload):
    """The review's sequence, exactly: an offload applied and left, then a cache, against the same cache on the
    untouched pipeline. After ``enable_cpu_offload`` the parameters are equal copies in new storage (accelerate
    moves them; putting the original storage back would mean holding it on the device the offload frees), so
    their layout is checked as well: same strides, dtype, device and memory format, the same values."""
    target, baseline, state = untouched()
    with apply(target.pipeline, *configs(["first_block_cache"]), num_inference_steps=REQUEST.steps):
        cache_first = generate(target)[0]
    before = layout(target.pipeline)
    weights = {name: tensor.clone() for name, tensor in target.pipeline.transformer.state_dict().items()}
    with apply(target.pipeline, *configs([offload]), num_inference_steps=REQUEST.steps):
        generate(target)
    assert layout(target.pipeline) == before, f"parameter layout changed after {offload}"
    after = target.pipeline.transformer.state_dict()
    assert all(torch.equal(after[name], tensor) for name, tensor in weights.items()), offload
    with apply(target.pipeline, *configs(["first_block_cache"]), num_inference_steps=REQUEST.steps):
        assert np.array_equal(generate(target)[0], cache_first), f"the cache after {offload} is not the cache alone"
    assert_untouched(target, baseline, state, f"{offload} then first_block_cache")
