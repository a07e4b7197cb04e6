"""The native Qwen-Image pipeline: bit-identical to diffusers' ``QwenImagePipeline`` from one checkpoint (CPU
float32, two sizes, with and without true CFG), the registry, strict loading and the true-CFG default."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from accel import zoo
from accel.native import native_for
from accel.native.qwen_image import NativeQwenImagePipeline
from accel.profile import ModelSpec
from accel.targets.adapter import AdapterTarget, Request
from accel.targets.native import NativeTarget

# tiny-qwen-image's tokenizer is byte-level: the chat template leaves ~120 tokens after the 34 dropped, so a
# max_sequence_length of 64 (the zoo's until it was raised to 256) cuts every prompt off before it reaches the
# transformer (and makes the two CFG branches equal). 512, the pipelines' default, keeps any prompt here.
LONG = {"max_sequence_length": 512}
CFG = {"true_cfg_scale": 2.5, **LONG}
NEGATIVE = "blurry, low quality"


@pytest.fixture(scope="module")
def targets():
    adapter = AdapterTarget(ModelSpec(name="a", source="tiny-qwen-image", call_kwargs=CFG))
    native = NativeTarget(ModelSpec(name="n", source="tiny-qwen-image", target="native", call_kwargs=CFG))
    adapter.load()
    native.load()
    return adapter, native


# tiny: 32x32 (4 image tokens), 2 steps, 2 images per prompt; mini: 64x64 (16 tokens), 4 steps, another seed.
SIZES = {"tiny": (32, 2, 0, 2), "mini": (64, 4, 3, 1)}


@pytest.mark.parametrize("negative", [None, NEGATIVE], ids=["no-cfg", "true-cfg"])
@pytest.mark.parametrize("size", list(SIZES))
def test_native_qwen_image_is_bit_identical_to_qwen_image_pipeline(targets, size, negative):
    """Same ops in the same order as diffusers 0.42 (complex RoPE tables built whole, the timestep scaled after
    ``t * freq``, the norm-rescaled CFG): on CPU float32 not one bit differs."""
    adapter, native = targets
    side, steps, seed, images = SIZES[size]
    request = Request("a red fox in the snow", seed, steps=steps, height=side, width=side, guidance_scale=3.5,
                      negative_prompt=negative, num_images_per_prompt=images)  # fmt: skip
    ours, theirs = native.generate(request), adapter.generate(request)
    assert len(ours) == len(theirs) == images
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == (1, side, side, 3)
        assert np.array_equal(mine, reference), float(np.abs(mine - reference).max())
    assert native.stage_report()["denoiser_calls"] == steps * (2 if negative else 1)
    if negative:  # the unconditional branch changed the image: the CFG above was not one branch matching itself
        unguided = native.generate(Request(**{**request.__dict__, "negative_prompt": None}))
        assert float(np.abs(ours[0] - unguided[0]).max()) > 1e-4  # ~6e-4 on the tiny model


def test_true_cfg_changes_the_image_and_defaults_to_qwen_image_pipelines_scale():
    """The unconditional branch matters (a CFG that ran one branch would match itself), and a model without
    ``true_cfg_scale`` runs at QwenImagePipeline's default, 4.0, not FLUX's 1.0."""
    plain = NativeTarget(ModelSpec(name="p", source="tiny-qwen-image", target="native", call_kwargs=LONG))
    scaled = NativeTarget(
        ModelSpec(name="s", source="tiny-qwen-image", target="native", call_kwargs={"true_cfg_scale": 4.0, **LONG})
    )
    plain.load()
    scaled.load()
    request = Request("a red fox", 0, steps=2, height=32, width=32, guidance_scale=1.0, negative_prompt=NEGATIVE)
    assert plain.native_request(request).true_cfg_scale == 4.0
    guided = plain.generate(request)[0]
    assert np.array_equal(guided, scaled.generate(request)[0])
    unguided = plain.generate(Request(**{**request.__dict__, "negative_prompt": None}))[0]
    assert float(np.abs(guided - unguided).max()) > 1e-4


def test_registry_picks_native_qwen_image_and_loading_is_strict(tmp_path):
    root = tmp_path / "ckpt"
    shutil.copytree(zoo.build("tiny-qwen-image"), root)
    assert native_for(root) is NativeQwenImagePipeline
    path = root / "transformer" / "diffusion_pytorch_model.safetensors"
    tensors = load_file(path)
    del tensors["transformer_blocks.0.img_mlp.net.2.bias"]
    save_file(tensors, path)
    with pytest.raises(
        ValueError, match=r"NativeQwenImageTransformer: missing \['transformer_blocks.0.img_mlp.fc2.bias'\]"
    ):
        NativeQwenImagePipeline(root)


def test_an_edit_or_layered_variant_is_refused_with_what_to_do():
    from accel.errors import ConfigError
    from accel.native.qwen_image import NativeQwenImageTransformer

    with pytest.raises(ConfigError, match=r"enables \['zero_cond_t'\].*use target: adapter"):
        NativeQwenImageTransformer(num_layers=1, zero_cond_t=True)


def test_cache_dit_caches_each_true_cfg_branch_apart_on_native_qwen_image(targets):
    """Cache-DiT's block adapter on the native transformer gets a fresh context per call with separate CFG when the
    call runs true CFG (conditional, then unconditional, each with its own residuals): one shared context mixed
    the branches, and a negative prompt of another length than the prompt crashed the first cached step. A call
    without true CFG runs one context; removing the feature takes its denoise hook away."""
    from accel import apply
    from accel.features import FEATURES

    _, native = targets
    pipeline = native.pipeline
    request = Request("a red fox in the snow", 0, steps=8, height=32, width=32, guidance_scale=3.5,
                      negative_prompt=NEGATIVE, num_images_per_prompt=1)  # fmt: skip
    baseline = native.generate(request)
    options = FEATURES["cache_dit"].parse_options({"residual_diff_threshold": 0.5, "max_warmup_steps": 2})
    for negative, separate in ((NEGATIVE, True), (None, False)):
        with apply(pipeline, options, num_inference_steps=8) as applied:
            native.generate(Request(**{**request.__dict__, "negative_prompt": negative}))
            verdict = applied.verdicts()["cache_dit"]
        assert verdict.engaged, verdict.summary
        assert verdict.evidence["separate_cfg_per_run"] == [separate]
        cfg_cached = verdict.evidence["cfg_cached_steps_per_run"][0]
        assert any(cfg_cached) is separate, cfg_cached  # the unconditional branch's own cached steps
        assert pipeline.denoise_hooks == []
    assert np.array_equal(native.generate(request)[0], baseline[0])
