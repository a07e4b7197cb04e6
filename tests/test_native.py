"""The native FLUX pipeline: parity with diffusers from one checkpoint, strict loading, registry,
features through the contract, explicit stage timings."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import small_profile
from safetensors.torch import load_file, save_file

from accel import zoo
from accel.errors import ConfigError
from accel.gate import gate_records, load_gate_data
from accel.measure.parity import aggregate, compare
from accel.native import NativePipeline, native_for
from accel.native.flux import NativeFluxPipeline
from accel.profile import ModelSpec, load_profile, parse_profile
from accel.sweep.runner import run_sweep
from accel.targets.adapter import AdapterTarget, Request
from accel.targets.native import NativeTarget


def test_native_matches_the_diffusers_pipeline_from_the_same_checkpoint():
    adapter = AdapterTarget(ModelSpec(name="a", source="tiny-flux"))
    native = NativeTarget(ModelSpec(name="n", source="tiny-flux", target="native"))
    adapter.load()
    native.load()
    parities = []
    for prompt, seed in (("a red fox in the snow", 0), ("a lighthouse at dusk", 1)):
        request = Request(prompt, seed, steps=4, height=64, width=64, guidance_scale=3.5, num_images_per_prompt=2)
        for ours, theirs in zip(native.generate(request), adapter.generate(request), strict=True):
            parities.append(compare(ours, theirs))
    parity = aggregate(parities)
    assert parity.ssim >= 0.999 and parity.psnr >= 40, parity
    assert parity.max_abs_diff < 1e-5, parity  # on CPU fp32 the two are bit-identical here


def test_native_true_cfg_is_bit_identical_to_flux_pipeline_with_true_cfg_scale():
    """FluxPipeline(..., true_cfg_scale=s, negative_prompt=...): the negative prompt encoded as the prompt is,
    a second transformer call per step, ``neg + s * (pos - neg)``; on CPU float32 not one bit differs."""
    import numpy as np

    cfg = {"true_cfg_scale": 2.5}
    adapter = AdapterTarget(ModelSpec(name="a", source="tiny-flux", call_kwargs=cfg))
    native = NativeTarget(ModelSpec(name="n", source="tiny-flux", target="native", call_kwargs=cfg))
    plain = NativeTarget(ModelSpec(name="p", source="tiny-flux", target="native"))
    for target in (adapter, native, plain):
        target.load()
    request = Request("a red fox in the snow", 0, steps=2, height=32, width=32, guidance_scale=3.5,
                      negative_prompt="blurry, low quality", num_images_per_prompt=2)  # fmt: skip
    ours, theirs = native.generate(request), adapter.generate(request)
    assert native.stage_report()["denoiser_calls"] == 4  # two branches per step
    for mine, reference in zip(ours, theirs, strict=True):
        assert np.array_equal(mine, reference), float(np.abs(mine - reference).max())
    # The unconditional branch changed the image (a CFG that ran one branch would also be "identical" to
    # itself), and without a negative prompt or at scale 1 there is one branch, as in FluxPipeline.
    assert float(np.abs(ours[0] - plain.generate(request)[0]).max()) > 1e-3
    unguided = Request(**{**request.__dict__, "negative_prompt": None})
    assert np.array_equal(native.generate(unguided)[0], plain.generate(unguided)[0])
    assert native.stage_report()["denoiser_calls"] == 2


def _copy_checkpoint(tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(zoo.build("tiny-flux"), target)
    return target, target / "transformer" / "diffusion_pytorch_model.safetensors"


def test_a_renamed_tensor_fails_with_the_keys_named(tmp_path):
    root, path = _copy_checkpoint(tmp_path)
    tensors = load_file(path)
    tensors["x_embedder.weight_renamed"] = tensors.pop("x_embedder.weight")
    save_file(tensors, path)
    with pytest.raises(
        ValueError, match=r"missing \['x_embedder.weight'\]; unexpected \['x_embedder.weight_renamed'\]"
    ):
        NativeFluxPipeline(root)


def test_a_missing_tensor_fails_with_the_key_named(tmp_path):
    root, path = _copy_checkpoint(tmp_path)
    tensors = load_file(path)
    del tensors["transformer_blocks.0.ff.net.2.bias"]
    save_file(tensors, path)
    with pytest.raises(ValueError, match=r"missing \['transformer_blocks.0.ff.fc2.bias'\]"):
        NativeFluxPipeline(root)


def test_registry_picks_by_class_name_and_explains_the_rest(tmp_path):
    assert native_for(zoo.build("tiny-flux")) is NativeFluxPipeline
    with pytest.raises(ConfigError, match="unknown native pipeline for _class_name 'WanPipeline'"):
        native_for(zoo.build("tiny-wan"))
    with pytest.raises(ConfigError, match="cannot import it"):
        native_for(zoo.build("tiny-flux"), "nowhere.module:Pipeline")
    with pytest.raises(ConfigError, match=r"is not a subclass of accel\.native\.NativePipeline"):
        native_for(zoo.build("tiny-flux"), "json:JSONDecoder")
    assert issubclass(NativeFluxPipeline, NativePipeline)


def test_contract_declares_components_and_blocks():
    pipeline = NativeFluxPipeline(zoo.build("tiny-flux"))
    assert set(pipeline.components) >= {"transformer", "text_encoder", "text_encoder_2", "vae", "scheduler"}
    transformer = pipeline.transformer
    assert transformer._repeated_blocks == ("DoubleStreamBlock", "SingleStreamBlock")
    for attr in transformer._layerwise_offload_blocks_attrs:
        assert len(getattr(transformer, attr)) == 2
    assert "FluxTransformer2DModel" not in {type(m).__name__ for m in pipeline.modules()}


def test_a_native_transformer_names_its_block_lists_once_and_runs_them_in_order():
    """``NativeTransformer``: the block lists declared once (``_block_lists``) are what Cache-DiT's adapter and
    layerwise offload read; ``run_blocks`` calls every block of every list in that order, each block's
    ``(encoder_hidden_states, hidden_states)`` feeding the next; ``RENAMES`` is the port's weight-name mapping."""
    import torch

    from accel.native.blocks import NativeTransformer

    calls: list[str] = []

    class Block(torch.nn.Module):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def forward(self, hidden_states, encoder_hidden_states, temb, image_rotary_emb):
            calls.append(self.name)
            return encoder_hidden_states + 1, hidden_states * 2 + temb

    class Toy(NativeTransformer):
        _block_lists = ("first", "second")
        RENAMES = ((r"\.ff\.net\.2\.", ".ff.fc2."),)

        def __init__(self) -> None:
            super().__init__()
            self.first = torch.nn.ModuleList([Block("a"), Block("b")])
            self.second = torch.nn.ModuleList([Block("c")])

    assert Toy._cache_blocks == Toy._layerwise_offload_blocks_attrs == ("first", "second")
    text, image = Toy().run_blocks(torch.zeros(1), torch.zeros(1), torch.ones(1), None)
    assert calls == ["a", "b", "c"] and (text.item(), image.item()) == (3.0, 7.0)  # ((0 * 2 + 1) * 2 + 1) * 2 + 1
    assert Toy.map_name("blocks.0.ff.net.2.weight") == "blocks.0.ff.fc2.weight"
    assert Toy.map_name("blocks.0.attn.to_q.weight") == "blocks.0.attn.to_q.weight"


VARIANTS = [
    {"name": "attn-math", "features": {"attention_backend": "_native_math"}},
    {"name": "compile", "features": {"compile": {"granularity": "regional", "backend": "aot_eager"}}},
    {"name": "cache-dit", "features": {"cache_dit": {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}}},
    {"name": "tea-cache", "features": {"tea_cache": 0.4}},
    {"name": "int8wo", "features": {"quantization": "int8wo"}},
    {"name": "model-offload", "features": {"enable_cpu_offload": True}},
    {"name": "layerwise", "features": {"enable_layerwise_offload": {}}},
    {"name": "slicing", "features": {"vae_use_slicing": True}},
    {"name": "fbc", "features": {"first_block_cache": 0.5}},
    {"name": "mag", "features": {"mag_cache": {"threshold": 0.5}}},
    {"name": "pab", "features": {"pyramid_attention_broadcast": {}}},
]


def test_features_engage_on_the_native_target_with_explicit_stages(tmp_path):
    profile = small_profile(["tiny-flux"], VARIANTS, steps=8, num_images_per_prompt=2)
    profile["models"] = [{"name": "native", "source": "tiny-flux", "target": "native"}]
    result = run_sweep(parse_profile(profile), "p.yaml", tmp_path, show_progress=False)
    records = {r["variant"]: r for r in result.records}
    for variant in VARIANTS[:-1]:  # all but PAB
        record = records[variant["name"]]
        assert record["status"] == "ok", (variant["name"], record.get("error"))
        evidence = record["evidence"]
        assert set(evidence) == set(variant["features"]), (variant["name"], evidence)  # all() of {} is True
        assert all(entry["engaged"] is True for entry in evidence.values()), (variant["name"], evidence)
    # The lossless ones at the gate's own float32 limits (a looser bar here let a broken feature through).
    limits = load_gate_data().thresholds["lossless"]["float32"]["image"]
    for lossless in ("attn-math", "compile", "model-offload", "layerwise", "slicing"):
        parity = records[lossless]["parity"]
        assert parity["ssim"] >= limits["ssim"] and parity["psnr"] >= limits["psnr"], (lossless, parity)
    verdicts = {v.variant: v for v in gate_records(result.records, load_gate_data()).verdicts}
    for variant in VARIANTS[:-1]:
        assert verdicts[variant["name"]].outcome == "pass", verdicts[variant["name"]].message()
    assert records["pab"]["status"] == "unsupported"
    assert "hooks attach to diffusers Attention modules" in records["pab"]["error"]
    baseline = records["baseline"]
    assert baseline["stages"]["steps_per_call"] == 8 and baseline["flops_per_denoiser_call"] > 0


def test_native_stage_times_agree_with_an_independent_outer_timer():
    """The native stages come from the pipeline's own marks; our own clocks around the call, the
    transformer and the VAE must agree with them (the marks tiling their own span proves nothing)."""
    import time

    target = NativeTarget(ModelSpec(name="n", source="tiny-flux", target="native"))
    pipeline = target.load()
    spans: dict[str, list[float]] = {"denoiser": [], "vae": []}
    opened: dict[str, float] = {}

    def begin(kind):
        opened[kind] = time.perf_counter()

    def end(kind):
        spans[kind].append(time.perf_counter() - opened.pop(kind))

    pipeline.transformer.register_forward_pre_hook(lambda *_: begin("denoiser"))
    pipeline.transformer.register_forward_hook(lambda *_: end("denoiser"))
    decode = pipeline.vae.decode

    def timed_decode(*args, **kwargs):
        begin("vae")
        try:
            return decode(*args, **kwargs)
        finally:
            end("vae")

    pipeline.vae.decode = timed_decode
    request = target.native_request(Request("a red fox", 0, steps=4, height=64, width=64, guidance_scale=3.5))
    pipeline(request)  # warm
    gaps = []
    for _ in range(5):
        spans.update(denoiser=[], vae=[])
        start = time.perf_counter()
        pipeline(request)
        outer = time.perf_counter() - start
        report = target.stage_report()
        stages = report["stages"]
        gaps.append((abs(sum(stages.values()) - outer) / outer, stages, outer))
        assert len(report["steps"]) == 4 and len(spans["denoiser"]) == 4
        denoiser, vae = sum(spans["denoiser"]), sum(spans["vae"])
        assert denoiser <= stages["denoising"] + 1e-3 and denoiser > 0.5 * stages["denoising"], (stages, denoiser)
        assert vae <= stages["vae_decode"] + 1e-3 and vae > 0.5 * stages["vae_decode"], (stages, vae)
    # A stage the marks miss is missed on every call; a preemption between the marks and the outer clock (a
    # ~40 ms call, CI once ran it beside four test workers) inflates one call: the closest call must agree.
    assert min(gaps, key=lambda gap: gap[0])[0] < 0.05, gaps


def test_native_vs_adapter_profile_is_valid():
    profile = load_profile("profiles/native-vs-adapter.yaml")
    assert [m.target for m in profile.models] == ["adapter", "native"]
    assert json.loads((zoo.build("tiny-flux") / "model_index.json").read_text())["_class_name"] == "FluxPipeline"


def test_a_native_pipeline_without_a_constructor_refuses_a_checkpoint():
    class Bare(NativePipeline):
        _dit_modules = ("transformer",)

    with pytest.raises(ConfigError, match=r"native pipeline Bare defines no __init__\(checkpoint, dtype\)"):
        Bare("/some/checkpoint")
    assert isinstance(Bare(), NativePipeline)  # built empty on purpose (from_components' route) is fine


def test_compile_with_native_attention_backend_keeps_one_graph_per_block_and_counts_dispatches():
    """The attention feature's dispatch counter is traced by dynamo (an in-place add on a buffer): no graph
    break, no eager fallback, and the counts are still there (``torch.compiler.disable`` on the counter gave
    6 graph breaks and a failed cell)."""
    import torch

    from accel import apply
    from accel.features import AttentionBackendConfig, CompileConfig

    target = NativeTarget(ModelSpec(name="n", source="tiny-flux", target="native"))
    pipeline = target.load()
    request = target.native_request(Request("a red fox", 0, steps=2, height=64, width=64, guidance_scale=3.5))
    configs = (
        CompileConfig(granularity="regional", backend="aot_eager"),
        AttentionBackendConfig(backend="_native_math"),
    )
    torch._dynamo.reset()
    try:
        with apply(pipeline, *configs, num_inference_steps=2, windows_on_calls=False) as applied:
            with applied.window():
                pipeline(request)  # compiles
            applied.reset_evidence()
            for _ in range(2):
                with applied.window():
                    pipeline(request)
            evidence = applied.evidence()
    finally:
        torch._dynamo.reset()
    compiled, attention = evidence["compile"], evidence["attention_backend"]
    assert compiled["engaged"] and attention["engaged"], evidence
    assert compiled["graph_breaks"] == 0 and compiled["frames_failed"] == 0, compiled
    layers = len(pipeline.transformer.transformer_blocks) + len(pipeline.transformer.single_transformer_blocks)
    # 2 steps per call, one attention per block: every dispatch counted, none to another backend.
    assert attention["dispatched_per_run"] == [{"_native_math": 2 * layers}] * 2, attention


@pytest.mark.parametrize("source", ["tiny-flux", "tiny-qwen-image"])
def test_a_cache_on_a_native_pipeline_starts_every_call_afresh(source):
    """First Block Cache keeps a residual between steps; diffusers' pipelines reset it after each call
    (``maybe_free_model_hooks``). The native pipelines do too: a second call with the same seed is bit-identical
    to the first, while the cache skipped block work in both (native FLUX skipped more on the second call and
    its image moved by 0.06 before the reset)."""
    import numpy as np

    from accel import apply
    from accel.features import validate_variant_features

    target = NativeTarget(ModelSpec(name="n", source=source, target="native"))
    target.load()
    request = Request("a red fox in the snow", 0, steps=8, height=64, width=64, guidance_scale=3.5)
    configs = validate_variant_features({"first_block_cache": 0.5}, "test")
    with apply(target.pipeline, *configs.values(), num_inference_steps=8, device="cpu") as applied:
        first, second = (np.asarray(target.generate(request)[0]) for _ in range(2))
        verdict = applied.verdicts()["first_block_cache"]
    skipped = verdict.evidence["skipped_work_per_run"]
    assert len(skipped) == 2 and all(run["transformer"] > 0 for run in skipped), skipped
    assert skipped[0] == skipped[1], skipped  # the same steps cached in both calls
    np.testing.assert_array_equal(second, first)
