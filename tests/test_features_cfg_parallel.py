"""``cfg_parallel``: true CFG's two branches on two CPU ranks of the native FLUX pipeline against the one-rank
true-CFG run, the exchange counted, ranks given different seeds failing the cell, and the refusals (adapter
target, no true CFG, another parallel feature) made before any rank starts.

Two-rank cells run on tiny-flux (native) with 2 steps at 32x32, one repeat and sequential timing, as the
Ulysses cells of ``test_features_parallel.py`` do.
"""

from __future__ import annotations

import re
import types

import pytest
from conftest import small_profile

from accel.errors import ConfigError
from accel.features import validate_variant_features
from accel.features.cfg_parallel import CFGParallelConfig, verify_cfg_parallel
from accel.features.parallel import variant_world_size
from accel.profile import parse_profile
from accel.sweep import ranks
from accel.sweep.runner import plan, run_sweep

CFG = {"name": "cfg", "features": {"cfg_parallel": {}}}
TIMEOUT_S = 240.0
NEGATIVE = "blurry, low quality"


def _profile(
    variants: list[dict],
    target: str = "native",
    true_cfg_scale: float = 2.5,
    source: str = "tiny-flux",
    call_kwargs: dict | None = None,
    **workload,
) -> dict:
    profile = small_profile([source], variants, steps=2, height=32, width=32, **workload)
    profile["workload"].setdefault("negative_prompt", NEGATIVE)
    call_kwargs = {"true_cfg_scale": true_cfg_scale, **(call_kwargs or {})}
    profile["models"] = [{"name": source, "source": source, "target": target, "call_kwargs": call_kwargs}]
    profile["measure"] = {
        "warmup": 0, "repeats": 1, "executor": "inline", "noise_floor": False, "timing": "sequential",
        "timeout_s": TIMEOUT_S,
    }  # fmt: skip
    return profile


def _spec(tmp_path, profile: dict):
    cells = plan(parse_profile(profile), tmp_path)
    return next(cell for cell in cells if cell.variant == "cfg")


def _no_launch(monkeypatch) -> None:
    def refuse_to_start():
        raise AssertionError("a rank was started for a cell that should be refused before launch")

    monkeypatch.setattr(ranks, "_forkserver_context", refuse_to_start)


def _two_ranks_against_one(tmp_path, profile: dict) -> tuple[dict, dict]:
    """Sweep ``profile`` (a baseline and the cfg cell) and check what every CFG-parallel cell must show: both ok,
    images identical to the one-rank run's bit for bit, the one-rank run calling the transformer for two
    branches x two steps, and each rank computing its own branch once per step. Returns (baseline, cell)."""
    import numpy as np

    result = run_sweep(parse_profile(profile), "p.yaml", tmp_path, show_progress=False)
    records = {r["variant"]: r for r in result.records}
    baseline, cell = records["baseline"], records["cfg"]
    assert baseline["status"] == "ok" and cell["status"] == "ok", cell.get("error")
    # Each rank computes its branch exactly as the one-rank run does (same inputs, same batch of one, same
    # kernels) and the all_gather copies bytes: not one bit differs, not just within float32 rounding.
    with np.load(tmp_path / baseline["outputs_file"]) as one, np.load(tmp_path / cell["outputs_file"]) as two:
        assert set(one.files) == set(two.files)
        for key in one.files:
            assert np.array_equal(one[key], two[key]), (key, float(np.abs(one[key] - two[key]).max()))
    assert baseline["denoiser_calls_per_call"] == 4  # the one-rank run: two branches x two steps
    evidence = cell["evidence"]["cfg_parallel"]
    assert evidence["engaged"] and evidence["ranks_identical"] is True, evidence
    assert [rank["branch_last_run"] for rank in evidence["ranks"]] == ["cond", "uncond"]
    for rank in evidence["ranks"]:
        assert rank["transformer_calls_per_step_last_run"] == 1 and rank["steps_last_run"] == 2, rank
    return baseline, cell


def test_cfg_parallel_on_two_ranks_is_identical_to_the_one_rank_true_cfg_run(tmp_path):
    _, cell = _two_ranks_against_one(tmp_path, _profile([CFG]))
    assert cell["parity"]["max_abs_diff"] == 0.0, cell["parity"]
    evidence = cell["evidence"]["cfg_parallel"]
    assert re.fullmatch(
        r"cfg parallel over 2 ranks: rank 0 computed the cond branch, 1 transformer call per step \(of 2\), "
        r"2 all_gather per call \(\d+ bytes each\)",
        evidence["summary"],
    ), evidence["summary"]
    assert cell["timing"]["ranks"] == 2 and cell["timing"]["collective_backend"] == "gloo"
    for rank in evidence["ranks"]:  # every rank exchanged its prediction each step
        gathered = rank["collectives_last_run"]["c10d.all_gather"]
        assert gathered["calls"] == 2 and gathered["bytes"] > 0, rank


def test_cfg_parallel_on_native_qwen_image_is_identical_to_the_one_rank_run(tmp_path):
    """Qwen-Image's true CFG rescales the combination to the conditional branch's norm: both ranks combine the
    gathered pair with that formula, so the images are the one-rank run's, bit for bit."""
    # max_sequence_length 512, as tests/test_native_qwen_image.py: past the byte-level template for any prompt
    _two_ranks_against_one(
        tmp_path, _profile([CFG], source="tiny-qwen-image", call_kwargs={"max_sequence_length": 512})
    )


def test_ranks_given_different_seeds_fail_the_cell(tmp_path, monkeypatch):
    spec = _spec(tmp_path, _profile([CFG]))
    spec = type(spec)(**{**spec.__dict__, "measure": spec.measure.model_copy(update={"exclusive": True})})
    monkeypatch.setenv("OMNI_ACCEL_FAULT", f"rank-seeds:{spec.key}")
    record = ranks.run_ranks(spec, 120.0)
    assert record["status"] == "failed"
    assert re.match(r"rank 1's output p0_s0_n0 differs from rank 0's \(max abs diff [0-9.e-]+\)", record["error"])


def test_no_exchange_no_engagement_and_the_cell_fails():
    from accel.gate import judge_measured_cell

    def handle(collectives: dict, calls: int = 2) -> types.SimpleNamespace:
        run = {"collectives": collectives, "steps": 2, "transformer_calls": calls}
        return types.SimpleNamespace(runs=[run], rank=1, branch="uncond")

    gathered = {"c10d.all_gather": {"calls": 2, "bytes": 96}}
    assert verify_cfg_parallel(handle(gathered)).engaged
    verdict = verify_cfg_parallel(handle({}))  # what the evidence is when the exchange is gone
    assert not verdict.engaged
    assert verdict.summary == "no all_gather exchanged the noise predictions each step in 1 of 1 calls"
    both = verify_cfg_parallel(handle(gathered, calls=4))  # a rank that computed both branches split nothing
    assert not both.engaged and "called the transformer [2.0] times per step" in both.summary
    unguided = verify_cfg_parallel(types.SimpleNamespace(runs=[{"steps": 0}], rank=0, branch="cond"))
    assert unguided.summary == "no true-CFG step went through the split in 1 of 1 calls"
    record = {
        "model": "m", "variant": "cfg", "status": "ok", "features": {"cfg_parallel": {}},
        "evidence": {"cfg_parallel": {"engaged": False, "summary": verdict.summary}},
    }  # fmt: skip
    judge_measured_cell(record)
    assert record["status"] == "failed" and "cfg_parallel" in record["error"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"target": "adapter"}, r"cfg_parallel: diffusers' pipeline runs both branches inside its own __call__; "
         r"the harness cannot split them: native targets only"),
        ({"negative_prompt": None}, r"cfg_parallel: the cell runs no true CFG \(true_cfg_scale 2\.5, negative prompt "
         r"none\): there is one branch per step, nothing to split; .*"),
        ({"true_cfg_scale": 1.0}, r"cfg_parallel: the cell runs no true CFG \(true_cfg_scale 1\.0, negative prompt "
         r"given\): .*true_cfg_scale above 1"),
    ],
)  # fmt: skip
def test_adapter_targets_and_cells_without_true_cfg_are_refused_before_any_rank_starts(
    tmp_path, monkeypatch, changes, reason
):
    _no_launch(monkeypatch)
    workload = {"negative_prompt": changes.pop("negative_prompt")} if "negative_prompt" in changes else {}
    record = ranks.run_ranks(_spec(tmp_path, _profile([CFG], **changes, **workload)), TIMEOUT_S)
    assert record["status"] == "unsupported" and record["unsupported_scope"] == "model"
    assert re.fullmatch(reason, record["error"]), record["error"]


def test_a_native_pipeline_whose_own_default_runs_true_cfg_is_not_refused(tmp_path):
    """Native Qwen-Image runs true CFG at its own default scale (4.0, QwenImagePipeline's) when the call gives
    none: a cell relying on that default is planned, found from the zoo entry's class or the checkpoint's
    model_index.json, while FLUX's default (1.0) is still refused; a hub id that cannot be looked up offline
    counts as 1.0."""
    import json

    from accel.features import FEATURES
    from accel.features.cfg_parallel import native_default_true_cfg_scale
    from accel.profile import ModelSpec, Workload

    feature, options = FEATURES["cfg_parallel"], CFGParallelConfig()
    workload = Workload(prompts=["a"], negative_prompt=NEGATIVE)
    qwen = ModelSpec(name="q", source="tiny-qwen-image", target="native")
    assert native_default_true_cfg_scale(qwen) == 4.0
    assert feature.cell_support(qwen, workload, {}, options).supported
    flux = ModelSpec(name="f", source="tiny-flux", target="native")
    refused = feature.cell_support(flux, workload, {}, options)
    assert not refused.supported and "true_cfg_scale 1.0" in refused.reason
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model_index.json").write_text(json.dumps({"_class_name": "QwenImagePipeline"}))
    assert native_default_true_cfg_scale(ModelSpec(name="c", source=str(checkpoint), target="native")) == 4.0
    assert native_default_true_cfg_scale(ModelSpec(name="h", source="org/some-model", target="native")) == 1.0
    assert not feature.cell_support(qwen, workload, {"true_cfg_scale": 1.0}, options).supported


def test_the_adapter_pipeline_is_refused_by_check_too():
    from accel.features import FEATURES

    support = FEATURES["cfg_parallel"].check(types.SimpleNamespace(), "cpu", CFGParallelConfig())
    assert not support.supported and support.reason.endswith("the harness cannot split them: native targets only")


def test_options_world_size_and_conflicts():
    assert variant_world_size(validate_variant_features({"cfg_parallel": {}}, "v")) == 2
    assert variant_world_size(validate_variant_features({"cfg_parallel": 2}, "v")) == 2
    with pytest.raises(ConfigError, match=r"degree must be 2 \(got 4\): true CFG has two branches, one per rank"):
        validate_variant_features({"cfg_parallel": {"degree": 4}}, "v")
    with pytest.raises(ConfigError, match=r"cfg_parallel\.ulysses: unknown option"):
        validate_variant_features({"cfg_parallel": {"ulysses": 2}}, "v")
    with pytest.raises(ConfigError, match=r"cannot be combined: diffusers applies one parallelism per model"):
        validate_variant_features({"cfg_parallel": {}, "context_parallel": 2}, "v")


def test_apply_and_remove_restore_the_sequential_branches():
    """Outside the ranks ``check`` refuses; applied on one rank of a world of one, ``remove`` restores the
    pipeline's own strategy and hooks (the round trip: same output as before)."""
    import datetime
    import tempfile

    import numpy as np
    import torch

    from accel.features import FEATURES
    from accel.features.base import RunContext
    from accel.native.contract import SequentialBranches
    from accel.profile import ModelSpec
    from accel.targets.adapter import Request
    from accel.targets.native import NativeTarget

    target = NativeTarget(ModelSpec(name="n", source="tiny-flux", target="native", call_kwargs={"true_cfg_scale": 2.5}))
    pipeline = target.load()
    request = Request("a red fox", 0, steps=2, height=32, width=32, guidance_scale=3.5, negative_prompt=NEGATIVE)
    before = target.generate(request)[0]
    feature = FEATURES["cfg_parallel"]
    assert "torch.distributed initialised" in feature.check(pipeline, "cpu", CFGParallelConfig()).reason
    with tempfile.TemporaryDirectory() as scratch:
        store = torch.distributed.FileStore(f"{scratch}/store", 1)
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1,
                                             timeout=datetime.timedelta(seconds=60))  # fmt: skip
        try:
            handle = feature.apply(pipeline, CFGParallelConfig(), RunContext("cpu", 2))
            assert pipeline.cfg_branches is handle.strategy
            handle.remove()
        finally:
            torch.distributed.destroy_process_group()
    assert isinstance(pipeline.cfg_branches, SequentialBranches)
    assert not pipeline.transformer._forward_pre_hooks
    assert np.array_equal(target.generate(request)[0], before)
