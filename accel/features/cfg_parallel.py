"""``cfg_parallel``: the two branches of true classifier-free guidance on two ranks (vLLM-Omni's CFGParallelMixin).

A pipeline with true CFG (FLUX's and Qwen-Image's ``true_cfg_scale`` > 1 with a negative prompt) calls its
transformer twice per step, once per branch, and combines the two noise predictions (``uncond + scale * (cond -
uncond)``; Qwen-Image then rescales to the conditional prediction's norm).
Here the branches run on two ranks: rank 0 computes the conditional one, rank 1 the unconditional one, an
``all_gather`` gives both ranks both predictions, and each combines them and steps the scheduler itself, so
the ranks' latents (and the scheduler's state) stay identical with no second exchange. vLLM-Omni steps on
rank 0 and broadcasts the latents instead; stepping on both ranks keeps a multistep scheduler's history in
sync too.

The split needs the harness to own the denoising loop: it swaps the native pipeline's ``cfg_branches``
strategy (``accel.native.contract.CFGBranches``) for one that computes this rank's branch and exchanges it.
An adapter target cannot be split (diffusers runs both branches inside its own ``__call__``); a cell whose
model and workload run no true CFG has nothing to split. Both are refused on the driver before any rank
starts (``cell_support``), as is a world size the device cannot hold.

Evidence from the timed calls, per rank: the collectives called (count and bytes per call, the wrapped
``torch.distributed`` functions ``accel.features.parallel`` counts), which branch this rank computed, and its
transformer calls per denoising step (1, where the one-rank run makes 2). No exchange per step, no
engagement; the rank supervisor adds that every rank produced the same images.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from accel.features.base import Feature, FeatureClass, FeatureConfig, Handle, Owner, RunContext, Stage, Support, Verdict
from accel.features.parallel import _Collectives, _in_ranks, _ParallelFeature, _world_fits

if TYPE_CHECKING:  # accel.native imports the native pipelines (diffusers): only where a pipeline is loaded
    from accel.native.contract import CFGBranches

# Rank r computes BRANCHES[r]: the order FluxPipeline computes them in, and vLLM-Omni's rank assignment.
BRANCHES = ("cond", "uncond")
GATHER = "c10d.all_gather"


class CFGParallelConfig(FeatureConfig):
    """Options of ``cfg_parallel``: the conditional and unconditional branches on ``degree`` ranks."""

    degree: int = Field(
        default=2,
        description="Ranks the CFG branches are split over (default 2, the only value: true CFG has two "
        "branches, one per rank). Lossless: each rank computes one branch as the one-rank run does; one "
        "all_gather of the noise prediction per step.",
    )

    @field_validator("degree")
    @classmethod
    def _two_branches(cls, value: int) -> int:
        if value != 2:
            raise ValueError(f"degree must be 2 (got {value}): true CFG has two branches, one per rank")
        return value


class ParallelBranches:
    """A ``CFGBranches``: this rank's branch of each true-CFG step, exchanged with the other's by ``all_gather``."""

    local_branches = 1

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.steps = 0

    def predict(
        self,
        cond: Callable[[], Any],
        uncond: Callable[[], Any],
        combine: Callable[[Any, Any], Any],
    ) -> Any:
        """Rank 0 computes ``cond``, rank 1 ``uncond``; both combine the gathered pair, in the same order."""
        import torch
        import torch.distributed as dist

        mine = (cond, uncond)[self.rank]().contiguous()
        gathered = [torch.empty_like(mine) for _ in BRANCHES]
        dist.all_gather(gathered, mine)  # looked up at call time: the collective counter sees it
        self.steps += 1
        return combine(gathered[0], gathered[1])


class CFGParallelHandle(Handle):
    """The swapped ``cfg_branches`` strategy, the transformer-call counter and the collective counter."""

    def __init__(self, pipeline: Any, rank: int) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.rank = rank
        self.branch = BRANCHES[rank]
        self.previous: CFGBranches = pipeline.cfg_branches
        self.strategy = ParallelBranches(rank)
        self.collectives = _Collectives()
        self.transformer_calls = 0
        self.hook = pipeline.transformer.register_forward_pre_hook(self._count)
        pipeline.cfg_branches = self.strategy

    def _count(self, module: Any, args: Any) -> None:
        self.transformer_calls += 1

    def begin_run(self) -> None:
        super().begin_run()
        self.collectives.take()
        self.transformer_calls = 0
        self.strategy.steps = 0

    def end_run(self) -> None:
        self.current.update(
            collectives=self.collectives.take(), steps=self.strategy.steps, transformer_calls=self.transformer_calls
        )

    def remove(self) -> None:
        self.pipeline.cfg_branches = self.previous
        self.hook.remove()
        self.collectives.remove()


def verify_cfg_parallel(handle: CFGParallelHandle) -> Verdict:
    """Engaged when every timed call exchanged each step's prediction and called the transformer once a step."""
    runs = handle.runs
    per_step = [round(r.get("transformer_calls", 0) / r["steps"], 3) if r.get("steps") else None for r in runs]
    evidence: dict[str, Any] = {
        "rank": handle.rank,
        "world_size": len(BRANCHES),
        "branch": handle.branch,
        "collectives_per_run": [r.get("collectives", {}) for r in runs],
        "branch_per_run": [handle.branch for _ in runs],
        "steps_per_run": [r.get("steps", 0) for r in runs],
        "transformer_calls_per_step_per_run": per_step,
    }
    if not runs:
        return Verdict(False, "no timed call ran", evidence)
    unguided = sum(1 for r in runs if not r.get("steps"))
    if unguided:
        return Verdict(False, f"no true-CFG step went through the split in {unguided} of {len(runs)} calls", evidence)
    gathers = [r.get("collectives", {}).get(GATHER, {}).get("calls", 0) for r in runs]
    short = sum(1 for g, r in zip(gathers, runs, strict=True) if g < r["steps"])
    if short:
        return Verdict(
            False, f"no all_gather exchanged the noise predictions each step in {short} of {len(runs)} calls", evidence
        )
    if any(calls != 1 for calls in per_step):
        return Verdict(
            False, f"this rank called the transformer {per_step} times per step: one branch each expected", evidence
        )
    last = runs[-1]
    gathered = last["collectives"][GATHER]
    summary = (
        f"cfg parallel over 2 ranks: rank {handle.rank} computed the {handle.branch} branch, 1 transformer call "
        f"per step (of 2), {gathered['calls']} all_gather per call ({gathered['bytes'] // gathered['calls']} "
        "bytes each)"
    )
    return Verdict(True, summary, evidence)


def native_default_true_cfg_scale(model: Any) -> float:
    """The ``true_cfg_scale`` the model's native pipeline runs with when the call gives none (Qwen-Image's 4.0,
    FLUX's 1.0), found without loading it: from ``native_pipeline``, the zoo entry's pipeline class or the
    checkpoint's ``model_index.json``. 1.0 where none can be found (a hub id offline, an unregistered class):
    the target's own load then says what is wrong."""
    from accel.errors import ConfigError
    from accel.native.registry import native_for, native_for_class
    from accel.zoo import ZOO

    try:
        if model.source in ZOO and not model.native_pipeline:
            cls = native_for_class(ZOO[model.source].pipeline_class)
        else:
            cls = native_for(model.source, model.native_pipeline)
    except (ConfigError, OSError, ValueError):
        return 1.0
    return float(cls.default_true_cfg_scale)


class CFGParallel(_ParallelFeature, Feature[CFGParallelConfig, CFGParallelHandle]):
    """True CFG's conditional and unconditional branches on two ranks (native pipelines)."""

    name = "cfg_parallel"
    family = "parallel"
    feature_class = FeatureClass.LOSSLESS  # each branch computed as one rank computes it: same numbers
    stage = Stage.PARALLEL
    config_cls = CFGParallelConfig
    primary_option = "degree"
    description = "true-CFG branches on two ranks (conditional on rank 0, unconditional on rank 1; all_gather)"
    roofline_exempt = "each rank computes one of the step's two CFG branches: half the one-rank step's FLOPs"

    def world_size(self, options: CFGParallelConfig) -> int:
        return options.degree

    def cell_support(
        self, model: Any, workload: Any, call_kwargs: dict[str, Any], options: CFGParallelConfig
    ) -> Support:
        if model.target != "native":
            return Support.no(
                "diffusers' pipeline runs both branches inside its own __call__; the harness cannot split them: "
                "native targets only",
                Owner.HARNESS,
            )
        scale = call_kwargs.get("true_cfg_scale", native_default_true_cfg_scale(model))
        negative = workload.negative_prompt
        if not (isinstance(scale, (int, float)) and scale > 1 and negative is not None):
            return Support.no(
                f"the cell runs no true CFG (true_cfg_scale {scale}, negative prompt "
                f"{'given' if negative is not None else 'none'}): there is one branch per step, nothing to split; "
                "set workload.negative_prompt and the model's call_kwargs true_cfg_scale above 1",
                Owner.HARNESS,
            )
        return Support.yes()

    def launch_support(self, device: str, options: CFGParallelConfig, configs: dict[str, Any]) -> Support:
        return _world_fits(device, self.world_size(options))

    def probe(self, device: str, options: CFGParallelConfig, dtype: str | None = None) -> Support:
        return self.launch_support(device, options, {})

    def check(self, pipeline: Any, device: str, options: CFGParallelConfig) -> Support:
        from accel.native.contract import NativePipeline

        if not isinstance(pipeline, NativePipeline):
            return Support.no(
                f"pipeline {type(pipeline).__name__} is not a native pipeline: diffusers' pipeline runs both "
                "branches inside its own __call__; the harness cannot split them: native targets only",
                Owner.HARNESS,
            )
        return _in_ranks(self.world_size(options))

    def apply(self, pipeline: Any, options: CFGParallelConfig, context: RunContext) -> CFGParallelHandle:
        import torch.distributed as dist

        return CFGParallelHandle(pipeline, dist.get_rank())

    def verify(self, handle: CFGParallelHandle) -> Verdict:
        return verify_cfg_parallel(handle)
