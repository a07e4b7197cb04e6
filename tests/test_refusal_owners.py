"""Every refusal names its owner (issue 40, item 2): the library (its message quoted), the model (a structure it
lacks, named), the device (named) or the harness (omni-accel does not support or observe it yet). One test per
owner calls the library directly on a zoo family and checks the label; the rule: no refusal is labelled the
model's or the library's where the library call succeeds on that model."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from features_helpers import loaded

import accel.features
from accel.errors import ModelUnavailable
from accel.features import FEATURES
from accel.features.applied import FeatureUnavailable
from accel.features.base import Owner, Support

FEATURE_MODULES = sorted(Path(accel.features.__file__).parent.glob("*.py"))


def _refusals_without_owner(path: Path) -> list[str]:
    """The ``Support.no(...)`` calls in ``path`` that name no owner (``Owner.X``, or a refusal's they forward)."""
    tree = ast.parse(path.read_text())
    missing = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "no"):
            continue
        if ast.unparse(node.func.value) != "Support":
            continue
        owner = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "owner"), None)
        named = owner is not None and ast.unparse(owner).startswith("Owner.")
        forwarded = owner is not None and ast.unparse(owner).endswith("support.owner")  # another refusal's owner
        if not (named or forwarded):
            missing.append(f"{path.name}:{node.lineno}")
    return missing


def test_every_built_in_refusal_names_its_owner():
    calls = sum(path.read_text().count("Support.no(") for path in FEATURE_MODULES)
    assert calls > 40  # the walk sees the features' refusals (58 when written)
    missing = [where for path in FEATURE_MODULES for where in _refusals_without_owner(path)]
    assert not missing, f"Support.no without an owner (library, model, device or harness): {missing}"


def test_a_refusal_without_owner_falls_back_to_its_scope():
    """A plugin's ``Support.no(reason)``: the device's from ``probe``, the model's from ``check`` (as before)."""
    assert Support.no("why").owner is None
    assert FeatureUnavailable("plugin", "environment", "why").owner is Owner.DEVICE
    assert FeatureUnavailable("plugin", "model", "why").owner is Owner.MODEL
    assert FeatureUnavailable("plugin", "model", "why", Owner.HARNESS).owner is Owner.HARNESS
    assert ModelUnavailable("environment", "why").owner == "device"
    assert ModelUnavailable("model", "why", "harness").owner == "harness"


def _refused(feature: str, pipeline, raw, device: str = "cpu") -> Support:
    config = FEATURES[feature].parse_options(raw)
    support = FEATURES[feature].probe(device, config)
    return support if not support.supported else FEATURES[feature].check(pipeline, device, config)


def test_library_regional_compile_without_repeated_blocks():
    """diffusers' ``compile_repeated_blocks`` raises on PixArt's transformer (no ``_repeated_blocks``): the
    library refuses, and the refusal quotes it."""
    target = loaded("tiny-pixart-sigma")
    transformer = target.pipeline.transformer
    with pytest.raises(ValueError, match="`_repeated_blocks` attribute is empty") as raised:
        transformer.compile_repeated_blocks(backend="eager")
    support = _refused("compile", target.pipeline, "regional")
    assert not support.supported and support.owner is Owner.LIBRARY
    assert str(raised.value).split(". ")[0] in support.reason  # its own words


@pytest.mark.parametrize("feature", ["group_offload", "enable_layerwise_offload"])
def test_library_group_offload_on_a_model_that_declares_it_unsupported(feature):
    """HunyuanDiT2DModel sets ``_supports_group_offloading = False``; diffusers' ``enable_group_offload`` raises.
    The library's, not the model's: the model has blocks to offload (group offload is a diffusers hook over
    any module tree); diffusers' maintainers declared the class unsupported, and diffusers enforces it."""
    import torch

    target = loaded("tiny-hunyuandit")
    transformer = target.pipeline.transformer
    assert len(list(transformer.children())) > 1  # the structure group offload partitions is there
    with pytest.raises(ValueError, match="does not support group offloading") as raised:
        transformer.enable_group_offload(onload_device=torch.device("cpu"), offload_type="block_level")
    support = _refused(feature, target.pipeline, None)
    assert not support.supported and support.owner is Owner.LIBRARY
    assert str(raised.value).split(". ")[0] in support.reason


def test_device_sequential_offload_on_a_cpu():
    """Sequential offload moves weights from an accelerator to the host: on a CPU-only host there is nothing to
    offload from. The device's (named), found before any pipeline is loaded."""
    support = FEATURES["enable_sequential_cpu_offload"].probe(
        "cpu", FEATURES["enable_sequential_cpu_offload"].parse_options(None)
    )
    assert not support.supported and support.owner is Owner.DEVICE and "found: cpu" in support.reason


def test_model_a_component_the_pipeline_lacks():
    """Quantizing ``transformer_2`` of FLUX: the pipeline has no such component (named), whatever the library."""
    target = loaded("tiny-flux")
    assert getattr(target.pipeline, "transformer_2", None) is None
    support = _refused("quantization", target.pipeline, {"components": ["transformer_2"]})
    assert not support.supported and support.owner is Owner.MODEL and "'transformer_2'" in support.reason


def test_harness_first_block_cache_where_the_library_runs_it():
    """diffusers' FirstBlockCache runs on tiny-cogvideox (issue 40: ``enable_cache`` runs and changes the
    output). Where omni-accel still refuses it, the refusal is the harness's, never the model's or library's."""
    from diffusers.hooks import FirstBlockCacheConfig

    target = loaded("tiny-cogvideox")
    transformer = target.pipeline.transformer
    transformer.enable_cache(FirstBlockCacheConfig(threshold=0.5))  # the library call succeeds on this model
    transformer.disable_cache()
    support = _refused("first_block_cache", target.pipeline, 0.5)
    assert support.supported or support.owner in (Owner.HARNESS, Owner.DEVICE), support


def test_harness_a_second_denoiser_a_first_denoiser_feature_leaves_untouched(monkeypatch):
    """tiny-wan22 denoises with ``transformer`` and ``transformer_2``. diffusers' cache runs on the second
    (``enable_cache`` on ``transformer_2``, called here); a feature that reached the first denoiser only would
    leave it untouched: omni-accel's gap, labelled so (the built-ins reach both now: caches through each model's
    cache context, context parallelism through each model's ``_cp_plan``)."""
    from diffusers.hooks import FirstBlockCacheConfig

    from accel import apply
    from accel.features.base import Reach

    target = loaded("tiny-wan22")
    second = target.pipeline.transformer_2
    second.enable_cache(FirstBlockCacheConfig(threshold=0.5))  # the library call succeeds on transformer_2
    second.disable_cache()
    assert getattr(second, "_cp_plan", None), "diffusers' context-parallel plan reaches transformer_2 too"
    feature = FEATURES["first_block_cache"]
    monkeypatch.setattr(type(feature), "reach", Reach.FIRST_DENOISER)  # the harness narrowed to the first
    with pytest.raises(FeatureUnavailable) as refused:
        apply(target.pipeline, feature.parse_options(0.5), num_inference_steps=4)
    assert refused.value.owner is Owner.HARNESS and "transformer_2 would run untouched" in str(refused.value)


def test_the_sweep_records_who_refused(tmp_path):
    """A cell the library refuses carries ``refused_by: library`` in its record, beside its scope."""
    from conftest import small_profile

    from accel.profile import parse_profile
    from accel.sweep.runner import run_sweep

    variants = [{"name": "compile-regional", "features": {"compile": {"granularity": "regional", "backend": "eager"}}}]
    profile = small_profile(["tiny-pixart-sigma"], variants, height=32, width=32)
    profile["measure"].update(noise_floor=False, timing="sequential")
    run = run_sweep(parse_profile(profile), "owners.yaml", tmp_path / "run", show_progress=False)
    record = next(r for r in run.records if r["variant"] == "compile-regional")
    assert (record["status"], record["unsupported_scope"], record["refused_by"]) == ("unsupported", "model", "library")


def _attention_calls(target, monkeypatch, steps: int = 4) -> int:
    """How many times the denoiser's attention processors ran in one generation of ``steps`` steps."""
    import functools

    from features_helpers import generate

    calls = []
    denoiser = target.pipeline.transformer
    for cls in {type(m.processor) for m in denoiser.modules() if hasattr(m, "processor")}:

        def counting(self, *args, __call__=cls.__call__, **kwargs):
            calls.append(1)
            return __call__(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__call__", functools.wraps(cls.__call__)(counting))
    generate(target, steps=steps)
    monkeypatch.undo()
    return len(calls)


def test_pab_runs_where_diffusers_apply_function_runs_it(monkeypatch):
    """tiny-sd3's SD3Transformer2DModel has no ``enable_cache`` (no CacheMixin) and its pipeline exposes no
    ``current_timestep``, yet diffusers' ``apply_pyramid_attention_broadcast(module, config)`` runs on it with a
    timestep read from the denoiser's own call: attention work is skipped. omni-accel used to refuse it as its own
    gap; it now applies the same function (the timestep from the scheduler), and the cell is a real verdict:
    engaged, with work skipped inside the blocks, the output changed, and the model restored on remove."""
    from diffusers.hooks import PyramidAttentionBroadcastConfig, apply_pyramid_attention_broadcast
    from features_helpers import applied_runs, generate

    target = loaded("tiny-sd3")
    transformer = target.pipeline.transformer
    assert not hasattr(transformer, "enable_cache") and not hasattr(type(target.pipeline), "current_timestep")
    steps = 7  # odd: a step counter carried into the next generation would shift which steps reuse attention
    baseline = generate(target, steps=steps)[0]
    verdict, outputs = applied_runs(target, "pyramid_attention_broadcast", None, runs=2, steps=steps)
    assert verdict.engaged, verdict.summary
    assert all(run["transformer"] > 0 for run in verdict.evidence["skipped_work_per_run"])
    assert not np.array_equal(outputs[0][0], baseline)
    assert np.array_equal(outputs[0][0], outputs[1][0]), "the hooks' state is reset at each generation"
    seen = verdict.evidence["timesteps_by_denoiser"]["transformer"]  # the schedule's scale, read from the scheduler
    scheduled = target.pipeline.scheduler.timesteps
    assert seen == [round(float(scheduled.min()), 1), round(float(scheduled.max()), 1)]
    assert np.array_equal(generate(target, steps=steps)[0], baseline)  # removed: the model as it was

    plain = _attention_calls(target, monkeypatch)
    timestep = [1000.0]
    hook = transformer.register_forward_pre_hook(  # the library call on its own, fed the denoiser's timestep
        lambda _, args, kwargs: timestep.__setitem__(0, float(kwargs["timestep"].flatten()[0])), with_kwargs=True
    )
    apply_pyramid_attention_broadcast(
        transformer,
        PyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=2,
            spatial_attention_timestep_skip_range=(-1, 1001),
            current_timestep_callback=lambda: timestep[0],
        ),
    )
    hooked = _attention_calls(target, monkeypatch)
    hook.remove()
    assert 0 < hooked < plain, (plain, hooked)  # the library skips attention work on tiny-sd3: so does omni-accel


def test_harness_pab_without_current_timestep_on_a_cache_mixin_denoiser():
    """The pipeline's ``current_timestep`` or its scheduler is omni-accel's way to feed PAB its schedule, not
    diffusers' need (the test above feeds it from the denoiser's call): a CacheMixin denoiser whose pipeline has
    neither is refused as the harness's gap."""
    pipeline = loaded("tiny-cogvideox").pipeline
    support = FEATURES["pyramid_attention_broadcast"].check_model(
        _NoTimestep(pipeline), pipeline.transformer, FEATURES["pyramid_attention_broadcast"].parse_options(None)
    )
    assert not support.supported and support.owner is Owner.HARNESS, support
    assert "current_timestep_callback" in support.reason


class _NoTimestep:
    """A pipeline stand-in with the pipeline's denoiser but no ``current_timestep`` on its type, nor a scheduler."""

    def __init__(self, pipeline):
        self.transformer = pipeline.transformer


def test_library_first_block_cache_without_a_cache_context():
    """diffusers' ``apply_first_block_cache`` keeps its state in a cache context only CacheMixin's
    ``cache_context`` sets: applied to tiny-sd3's transformer (no CacheMixin) it raises "No cache context is set"
    at the first call. The library's refusal, labelled so (unlike PAB's, above)."""
    from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache
    from features_helpers import generate

    target = loaded("tiny-sd3")
    apply_first_block_cache(target.pipeline.transformer, FirstBlockCacheConfig(threshold=0.5))
    with pytest.raises(ValueError, match="No cache context is set"):
        generate(target, steps=2)
    support = _refused("first_block_cache", target.pipeline, 0.5)
    assert not support.supported and support.owner is Owner.LIBRARY and "CacheMixin" in support.reason


def test_harness_mag_cache_needs_calibration_where_diffusers_calibrates():
    """MagCache without published ratios for tiny-qwen-image: diffusers' ``MagCacheConfig(calibrate=True)`` runs
    on the model and records its ratios (omni-accel calibrate fits them the same way). The model lacks nothing:
    "needs calibration" is a data gap of the harness, labelled so, never the model's."""
    from diffusers import MagCacheConfig
    from features_helpers import generate

    target = loaded("tiny-qwen-image")
    transformer = target.pipeline.transformer
    transformer.enable_cache(MagCacheConfig(calibrate=True, num_inference_steps=2))  # the library call succeeds
    generate(target, steps=2)
    transformer.disable_cache()
    support = _refused("mag_cache", target.pipeline, {"threshold": 0.5})
    assert not support.supported and support.owner is Owner.HARNESS, support
    assert support.reason.startswith("needs calibration: omni-accel calibrate")


def test_harness_tea_cache_needs_calibration_where_its_hooks_run():
    """A FLUX-style transformer without published TeaCache coefficients: tea_cache's hooks compute its modulated
    input and run with coefficients given (the same model is accepted with them), so without them it is a data
    gap of the harness ("needs calibration"), never the model's."""
    target = loaded("tiny-flux")
    transformer = target.pipeline.transformer
    transformer.__class__ = type("MyFluxLikeTransformer", (type(transformer),), {})
    assert _refused("tea_cache", target.pipeline, {"rel_l1_thresh": 0.4, "coefficients": [1.0, 0.0]}).supported
    support = _refused("tea_cache", target.pipeline, 0.4)
    assert not support.supported and support.owner is Owner.HARNESS, support
    assert support.reason.startswith("needs calibration: omni-accel calibrate")


@pytest.mark.parametrize(("model", "bypasses"), [("tiny-sd3", True), ("tiny-sdxl", True), ("tiny-flux", False)])
def test_library_attention_backend_where_diffusers_passes_over_every_processor(model, bypasses, monkeypatch):
    """diffusers' ``set_attention_backend`` sets only processors with an ``_attention_backend`` (those that call its
    dispatcher) and passes over the rest without a word: on tiny-sd3 (JointAttnProcessor2_0) and tiny-sdxl's UNet
    (AttnProcessor2_0) it returns, sets nothing, and the call's attention never reaches a registered backend. The
    cells read "failed: backend set but no attention call reached the diffusers dispatcher" before; it is the
    library's refusal, checked here against the library called directly (tiny-flux: it does reach them)."""
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry
    from features_helpers import generate

    from accel.features.base import denoisers

    target = loaded(model)
    models = denoisers(target.pipeline)
    calls = {"registry": 0}

    def counted(function):
        def call(*args, **kwargs):
            calls["registry"] += 1
            return function(*args, **kwargs)

        return call

    for name, function in list(_AttentionBackendRegistry._backends.items()):
        monkeypatch.setitem(_AttentionBackendRegistry._backends, name, counted(function))
    for denoiser in models.values():
        denoiser.set_attention_backend("native")  # returns: no refusal raised by the library
    try:
        generate(target, steps=2)
    finally:
        for denoiser in models.values():
            denoiser.reset_attention_backend()
    assert (calls["registry"] == 0) == bypasses, calls
    support = _refused("attention_backend", target.pipeline, {"backend": "native"})
    if bypasses:
        assert not support.supported and support.owner is Owner.LIBRARY, support
        assert "passes over the rest without a word" in support.reason
    else:
        assert support.supported, support
