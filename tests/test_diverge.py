"""``omni-accel diverge``: native FLUX against diffusers' FluxPipeline finds no divergence, and ten faults
injected into the native pipeline (on its instance, undone after each test) are each located: the owning
component and step and, for denoiser faults, the block and the submodule where the fault was put."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import invoke, small_profile

from accel.diverge import DivergeResult, Side, compare_sides
from accel.native.contract import SequentialBranches
from accel.profile import ModelSpec
from accel.targets.adapter import AdapterTarget, Request
from accel.targets.native import NativeTarget

CFG = {"true_cfg_scale": 2.5}  # two denoiser calls per step: the CFG combination is a stage of its own
REQUEST = Request(
    "a red fox in the snow", 0, steps=3, height=32, width=32, guidance_scale=3.5, negative_prompt="blurry"
)
FAULT = 1.01  # a 1 % change: far beyond float32 tolerance, far below anything an image metric would localise


@pytest.fixture(scope="module")
def sides() -> tuple[Side, Side]:
    adapter = AdapterTarget(ModelSpec(name="adapter", source="tiny-flux", call_kwargs=CFG))
    native = NativeTarget(ModelSpec(name="native", source="tiny-flux", target="native", call_kwargs=CFG))
    adapter.load()
    native.load()
    return Side("adapter", adapter), Side("native", native)


def scaled(module: Any, attribute: str, when: Callable[[], bool] = lambda: True) -> Callable[..., Any]:
    """``module.attribute`` with its first tensor output scaled by ``FAULT`` while ``when()``."""
    original = getattr(module, attribute)

    def faulty(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if not when():
            return out
        if isinstance(out, torch.Tensor):
            return out * FAULT
        if isinstance(out, tuple):
            return (out[0] * FAULT, *out[1:])
        out[next(iter(out.keys()))] = out[0] * FAULT  # a transformers ModelOutput
        return out

    return faulty


def compare(sides: tuple[Side, Side]) -> DivergeResult:
    return compare_sides(*sides, REQUEST)


def test_native_flux_matches_its_diffusers_pipeline_in_every_row(sides):
    result = compare(sides)
    assert result.first is None and result.exit_code == 0, result.summary()
    stages = {row.stage for row in result.rows}
    assert stages == {"text", "latents", "timesteps", "denoiser", "prediction", "step_latents", "decode", "image"}
    assert all(row.within for row in result.rows)
    assert len([r for r in result.rows if r.stage == "denoiser"]) == 2 * REQUEST.steps  # both CFG branches
    # bit-identical today: every row exact, not merely within tolerance
    assert all(row.metrics.exact for row in result.rows), [r for r in result.rows if not r.metrics.exact]


def _pipeline(sides: tuple[Side, Side]) -> Any:
    return sides[1].target.pipeline


def _check(
    result: DivergeResult, component: str, step: int | None, block: str | None = None, submodule: str | None = None
) -> None:
    first = result.first
    assert first is not None, "the fault was not found"
    found = (first.component, first.step, first.block, first.submodule)
    assert found == (component, step, block, submodule), (found, first.evidence, result.summary())
    assert result.exit_code == 1


def test_a_text_encoder_fault_is_the_text_encoders(sides, monkeypatch):
    encoder = _pipeline(sides).text_encoder_2
    monkeypatch.setattr(encoder, "forward", scaled(encoder, "forward"))
    result = compare(sides)
    _check(result, "text_encoder_2", 0)
    assert result.first is not None and result.first.stage == "text"
    # ownership by isolation: the adapter's embeddings fed into the native denoiser give the adapter's output
    assert "native's transformer fed adapter's embeddings gives adapter's step-0 output" in result.first.evidence
    # a second fault, in the native denoiser: its embeddings are still the first difference, but not the only one
    norm = _pipeline(sides).transformer.transformer_blocks[1].norm2
    monkeypatch.setattr(norm, "forward", scaled(norm, "forward"))
    result = compare(sides)
    _check(result, "text_encoder_2", 0)
    assert result.first is not None and "fed adapter's embeddings still differs" in result.first.evidence
    assert result.first.evidence.endswith("the denoiser differs too"), result.first.evidence


def test_an_initial_noise_fault_is_the_latents(sides, monkeypatch):
    pipeline = _pipeline(sides)
    original = pipeline.prepare_latents

    def prepare(request: Any) -> dict[str, Any]:
        state = original(request)
        return {**state, "latents": state["latents"] * FAULT}

    monkeypatch.setattr(pipeline, "prepare_latents", prepare)
    _check(compare(sides), "latents", 0)


def test_inputs_of_the_loop_are_held_to_exact_equality(sides, monkeypatch):
    """Initial latents off by one part in a million: within any step tolerance, but not the same noise."""
    pipeline = _pipeline(sides)
    original = pipeline.prepare_latents

    def prepare(request: Any) -> dict[str, Any]:
        state = original(request)
        return {**state, "latents": state["latents"] * (1 + 1e-6)}

    monkeypatch.setattr(pipeline, "prepare_latents", prepare)
    result = compare(sides)
    _check(result, "latents", 0)
    assert result.first is not None and result.first.metrics.rel_l2 < result.tolerance


def test_a_warm_up_call_is_never_compared(sides, monkeypatch):
    """A side with a warm-up: a fault in its first call only (what a compile or cache warm-up may do) is not
    what the comparison sees; only the designated call is captured."""
    pipeline = _pipeline(sides)
    original, calls = pipeline.prepare_latents, [0]

    def prepare(request: Any) -> dict[str, Any]:
        calls[0] += 1
        state = original(request)
        return {**state, "latents": state["latents"] * FAULT} if calls[0] == 1 else state

    monkeypatch.setattr(pipeline, "prepare_latents", prepare)
    adapter, native = sides
    result = compare_sides(adapter, Side("native", native.target, warmup=1), REQUEST)
    assert calls[0] == 2 and result.first is None, result.summary()
    assert len([r for r in result.rows if r.stage == "denoiser"]) == 2 * REQUEST.steps


def test_a_scheduler_step_fault_is_the_schedulers_at_its_step(sides, monkeypatch):
    scheduler = _pipeline(sides).scheduler
    # step_index has moved on when the fault looks at it: 2 after the second step (step 1)
    monkeypatch.setattr(scheduler, "step", scaled(scheduler, "step", lambda: scheduler.step_index == 2))
    result = compare(sides)
    _check(result, "scheduler", 1)
    assert result.first is not None and "still differs" in result.first.evidence  # the isolated replay
    assert result.first_step == 1


def test_a_timestep_embedding_fault_is_the_denoisers_time_embedding(sides, monkeypatch):
    embedder = _pipeline(sides).transformer.time_text_embed.timestep_embedder
    monkeypatch.setattr(embedder, "forward", scaled(embedder, "forward"))
    _check(compare(sides), "transformer", 0, "time_text_embed", "timestep_embedder")


def test_a_modulation_fault_is_named_with_its_block_and_submodule(sides, monkeypatch):
    linear = _pipeline(sides).transformer.transformer_blocks[1].norm1.linear
    monkeypatch.setattr(linear, "forward", scaled(linear, "forward"))
    result = compare(sides)
    _check(result, "transformer", 0, "transformer_blocks.1", "norm1")
    assert result.first is not None and result.first.operation == "norm1.linear"


def test_an_attention_fault_from_step_one_is_found_at_step_one(sides, monkeypatch):
    attention = _pipeline(sides).transformer.single_transformer_blocks[1].attn
    calls = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return faulty(*args, **kwargs)

    # from the third call of the block on: step 1's conditional branch (two calls per step)
    faulty = scaled(attention, "forward", lambda: calls[0] > 2)
    monkeypatch.setattr(attention, "forward", counting)
    _check(compare(sides), "transformer", 1, "single_transformer_blocks.1", "attn")


def test_an_mlp_fault_is_the_feed_forward_through_the_ports_weight_names(sides, monkeypatch):
    fc2 = _pipeline(sides).transformer.transformer_blocks[0].ff.fc2  # diffusers' ff.net.2 (the port's map_name)
    monkeypatch.setattr(fc2, "forward", scaled(fc2, "forward"))
    result = compare(sides)
    _check(result, "transformer", 0, "transformer_blocks.0", "ff")
    assert result.first is not None and result.first.operation == "ff.fc2"
    # inside ff, operator by operator: fc1's matmul and the gelu agree, fc2's matmul too; the fault's multiply not
    expected = "aten.mul.Tensor where the reference runs nothing (operation 4 of transformer_blocks.0.ff)"
    assert result.first.op == expected, result.first.op


def test_a_fault_between_modules_is_named_by_its_operation(sides, monkeypatch):
    """A port whose feed-forward calls silu where the reference calls gelu (a function, not a module): hooks
    see fc2's output differ (its input is the activation's output); operator-level tracing inside ff names
    the activation, against the reference's. (An exact gelu for the tanh one stays within 1e-4 here.)"""
    from accel.native.flux.transformer import FeedForward

    def silu(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.silu(self.fc1(x)))

    monkeypatch.setattr(FeedForward, "forward", silu)  # the native side's class only
    result = compare(sides)
    _check(result, "transformer", 0, "transformer_blocks.0", "ff")
    first = result.first
    assert first is not None and first.operation == "ff.fc2"  # where the module hooks see it
    assert first.op == "aten.silu.default where the reference runs aten.gelu.default (operation 2 of " \
        "transformer_blocks.0.ff)", first.op  # fmt: skip
    assert "op aten.silu.default" in result.summary()


def test_a_mapping_given_by_the_user_makes_modules_correspond(sides, monkeypatch):
    """Without the port's own weight-name mapping, ff.fc2 has no counterpart (diffusers' ff.net.2): the fault
    is named at ff only; a user's mapping (reference names to the port's) names ff.fc2 again."""
    transformer = _pipeline(sides).transformer
    monkeypatch.setattr(type(transformer), "map_name", None)
    fc2 = transformer.transformer_blocks[0].ff.fc2
    monkeypatch.setattr(fc2, "forward", scaled(fc2, "forward"))
    first = compare(sides).first
    assert first is not None and (first.block, first.submodule, first.operation) == (
        "transformer_blocks.0", "ff", "ff"
    ), first  # fmt: skip
    first = compare_sides(*sides, REQUEST, mapping={"ff.net.0.proj": "ff.fc1", "ff.net.2": "ff.fc2"}).first
    assert first is not None and (first.block, first.submodule, first.operation) == (
        "transformer_blocks.0", "ff", "ff.fc2"
    ), first  # fmt: skip


def test_a_norm_fault_is_the_norm(sides, monkeypatch):
    norm = _pipeline(sides).transformer.transformer_blocks[1].norm2
    monkeypatch.setattr(norm, "forward", scaled(norm, "forward"))
    _check(compare(sides), "transformer", 0, "transformer_blocks.1", "norm2")


def test_a_cfg_combination_fault_is_the_cfg(sides, monkeypatch):
    class Skewed(SequentialBranches):
        def predict(self, cond: Any, uncond: Any, combine: Any) -> torch.Tensor:
            return super().predict(cond, uncond, lambda c, u: combine(c, u) * FAULT)

    monkeypatch.setattr(_pipeline(sides), "cfg_branches", Skewed())
    result = compare(sides)
    _check(result, "cfg", 0)
    assert result.first is not None and result.first.stage == "prediction"


def test_a_vae_fault_is_the_vae(sides, monkeypatch):
    conv = _pipeline(sides).vae.decoder.conv_out
    monkeypatch.setattr(conv, "forward", scaled(conv, "forward"))
    result = compare(sides)
    _check(result, "vae", None)
    assert result.first_step is None  # every denoising step agreed


def test_the_cli_reports_json_and_writes_the_table_and_plot(monkeypatch, capsys, write_profile, tmp_path):
    profile = small_profile(steps=2, height=32, width=32)
    profile["models"] = [
        {"name": "adapter", "source": "tiny-flux"},
        {"name": "native", "source": "tiny-flux", "target": "native"},
    ]
    path = write_profile(profile)
    code, out, err = invoke(
        monkeypatch,
        capsys,
        "diverge",
        str(path),
        "--model",
        "adapter",
        "--against",
        "native",
        "--json",
        "--out",
        str(tmp_path / "d"),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["diverged"] is False and data["component"] is None and data["tolerance"]["rel_l2"] == 1e-4
    assert {"step", "block", "submodule"} <= set(data)
    assert (tmp_path / "d" / "diverge.png").stat().st_size > 0
    assert "| denoiser | 1 | transformer output |" in (tmp_path / "d" / "diverge.md").read_text()


def test_sides_with_different_requests_are_refused_before_loading(monkeypatch, capsys, write_profile):
    profile = small_profile()
    profile["models"] = [
        {"name": "adapter", "source": "tiny-flux"},
        {"name": "native", "source": "tiny-flux", "target": "native", "workload": {"steps": 3}},
    ]
    path = write_profile(profile)
    code, out, err = invoke(monkeypatch, capsys, "diverge", str(path), "--model", "adapter", "--against", "native")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "run different requests (workload.steps: 2 vs 3)" in err
    for args, message in (
        (("--variant", "nope"), "'nope' is not a variant"),
        (("--against", "native", "--variant", "x"), "give exactly one of --variant"),
        (("--against", "nobody"), "'nobody' is not a model of the profile"),
        (("--against", "native", "--tolerance", "0"), "not a positive relative-L2 limit"),
    ):
        code, out, err = invoke(monkeypatch, capsys, "diverge", str(path), "--model", "adapter", *args)
        assert code == 2 and err.count("\n") == 1 and message in err, (args, err)


def test_a_cache_variant_is_exact_until_its_first_cached_step_then_owned_by_the_cache_state():
    """``--variant``: the features applied to a second copy of the model, one warm-up, then the compared call.
    First Block Cache computes step 0 in full (exact) and reuses a residual from step 1; with identical inputs
    and a fresh cache every block agrees, so no block is blamed."""
    from accel.diverge import diverge
    from accel.profile import parse_profile

    variants = [{"name": "fbc", "features": {"first_block_cache": 0.5}}]
    profile = parse_profile(small_profile(variants=variants, steps=4, height=32, width=32))
    result = diverge(profile, "tiny-flux", variant="fbc")
    assert result.exit_code == 1 and result.first is not None, result.summary()
    first_step = result.first_step
    assert first_step is not None and first_step >= 1
    before = [r for r in result.rows if r.step is not None and r.step < first_step]
    assert before and all(r.metrics.exact for r in before)
    assert (result.first.component, result.first.step, result.first.block) == ("transformer", first_step, None)
    assert "state (a cache)" in result.first.evidence


@pytest.fixture(scope="module")
def qwen_sides() -> tuple[Side, Side]:
    adapter = AdapterTarget(ModelSpec(name="adapter", source="tiny-qwen-image"))
    native = NativeTarget(ModelSpec(name="native", source="tiny-qwen-image", target="native"))
    adapter.load()
    native.load()
    return Side("adapter", adapter), Side("native", native)


def test_native_qwen_image_matches_its_diffusers_pipeline_and_a_block_fault_is_located(qwen_sides, monkeypatch):
    """QwenImagePipeline runs true CFG by default (4.0): two calls per step, every row exact; an MLP fault in
    the native port is found through its own weight-name mapping (diffusers' img_mlp.net.2 is img_mlp.fc2)."""
    result = compare_sides(*qwen_sides, REQUEST)
    assert result.first is None and all(row.metrics.exact for row in result.rows), result.summary()
    assert len([r for r in result.rows if r.stage == "denoiser"]) == 2 * REQUEST.steps
    fc2 = qwen_sides[1].target.pipeline.transformer.transformer_blocks[0].img_mlp.fc2
    monkeypatch.setattr(fc2, "forward", scaled(fc2, "forward"))
    result = compare_sides(*qwen_sides, REQUEST)
    _check(result, "transformer", 0, "transformer_blocks.0", "img_mlp")
    assert result.first is not None and result.first.operation == "img_mlp.fc2"


def test_the_cli_exits_1_with_the_place_in_one_line_and_tolerance_overrides(monkeypatch, capsys, write_profile):
    variants = [{"name": "fbc", "features": {"first_block_cache": 0.5}}]
    path = write_profile(small_profile(variants=variants, steps=3, height=32, width=32))
    code, out, err = invoke(monkeypatch, capsys, "diverge", str(path), "--model", "tiny-flux", "--variant", "fbc")
    assert code == 1, err
    last = out.strip().splitlines()[-1]
    assert last.startswith("diverged at component transformer, step ") and "rel-L2" in last, last
    assert "Tolerance (float32): relative L2 <= 0.0001" in out  # the tolerance used is stated
    code, out, err = invoke(monkeypatch, capsys, "diverge", str(path), "--model", "tiny-flux", "--variant", "fbc",
                            "--tolerance", "1", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["diverged"] is False and data["tolerance"]["rel_l2"] == 1.0, err


def test_int8_weight_only_is_located_at_the_first_quantized_module():
    """int8 weight-only quantizes the Linear layers: the first unit to finish beyond tolerance with identical
    inputs is a module without submodules, and the report says the module's own computation owns it."""
    from accel.diverge import diverge
    from accel.profile import parse_profile

    variants = [{"name": "int8", "features": {"quantization": "int8wo"}}]
    profile = parse_profile(small_profile(variants=variants, steps=2, height=32, width=32))
    result = diverge(profile, "tiny-flux", variant="int8")
    first = result.first
    assert first is not None and (first.component, first.step) == ("transformer", 0), result.summary()
    assert first.block is not None and first.submodule is None and "is one module" in first.evidence
    inputs = [r.within for r in result.rows if r.stage in ("text", "latents", "timesteps")]
    assert inputs and all(inputs)  # the text encoders are not quantized: the loop's inputs are the baseline's
