"""Parallel inference (``context_parallel``, ``tensor_parallel``): one cell split over ``world_size`` ranks.

Both go through diffusers' own parallelism (``ModelMixin.enable_parallelism``): ``context_parallel`` with a
``ContextParallelConfig`` (Ulysses all-to-all and/or Ring attention over the model's ``_cp_plan``),
``tensor_parallel`` with a ``TensorParallelConfig`` (weights sharded by the model's ``_tp_plan``). On a native
pipeline ``context_parallel`` takes the same config and diffusers' split/gather hooks from the native model's
own ``_cp_plan``, and the native attention layer runs the Ulysses all-to-all (``accel.native.context_parallel``;
Ulysses only: ring attention is refused there before any rank starts). A variant
with either runs as ``world_size`` ranks, each its own process, started by the harness
(``accel.sweep.ranks``): this module only declares what a rank needs and applies the feature inside one.

Requirements are declared here and checked on the driver before any rank starts (``launch_support``):
the world size fits the device (one GPU per rank on CUDA), ring attention has an attention backend that
returns the log-sum-exp, tensor parallelism has an accelerator; the model's ``_cp_plan`` / ``_tp_plan`` is
checked on the loaded pipeline (``check``). Refusals quote diffusers' own reason.

Evidence comes from the timed calls: every ``torch.distributed`` collective diffusers called (all-to-all,
all-gather: count and bytes per call, by wrapping the functions diffusers looks up at call time), the
sequence split this rank saw (tokens entering the transformer vs entering its first block), and, added by
the rank supervisor, that every rank produced the same images. No collective, no engagement.

CPU shim: diffusers places rank ``r`` on device ``r % torch.accelerator.device_count()``, which is 0 on a
CPU-only host (ZeroDivisionError). On the CPU, and only for the ``enable_parallelism`` call, the device
count reads 1; the evidence says so (``cpu_device_count_shim``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import Field, model_validator

from accel.features.base import (
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    denoisers,
)
from accel.features.uneven_gather import GLOO_UNEVEN_GATHER_NOTE, EvenSplitRequired, UnevenGatherOnGloo

# The torch.distributed functions diffusers' context parallelism calls (attention_dispatch.py, hooks/
# context_parallel.py, diffusers 0.42), looked up on their module at every call: wrapping them counts them.
FUNCTIONAL_COLLECTIVES = ("all_to_all_single", "all_gather_tensor", "permute_tensor")
C10D_COLLECTIVES = ("all_gather", "all_to_all_single", "all_reduce")
# Where a collective is the attention's own (not the _cp_plan's input split or output gather, which both modes
# run): diffusers' dispatcher and the native attention layer. A call is attributed by its caller's file.
ATTENTION_SITES = ("diffusers/models/attention_dispatch.py", "accel/native/attention.py")
CPU_SHIM_NOTE = (
    "on the CPU, torch.accelerator.device_count() read 1 (not 0) during enable_parallelism only: diffusers places "
    "rank r on device r % device_count()"
)


class ContextParallelConfig(FeatureConfig):
    """Options of ``context_parallel`` (diffusers ``ContextParallelConfig``); world size = ulysses x ring."""

    ulysses: int = Field(
        default=2,
        ge=1,
        description="Ulysses degree: ranks exchanging heads for sequence by all-to-all (default 2). Lossless: "
        "each rank attends over the full sequence for 1/ulysses of the heads; speed needs fast interconnect.",
    )
    ring: int = Field(
        default=1,
        ge=1,
        description="Ring degree: ranks passing key/value chunks around a ring (default 1: off). Needs an "
        "attention backend that returns the log-sum-exp (flash, cuDNN on a GPU); less memory per rank.",
    )

    anything: bool = Field(
        default=False,
        description="Any sequence length and head count, also those the degree does not divide (diffusers' "
        "ulysses_anything / ring_anything; default false). Uneven splits cost padding and a size exchange.",
    )

    @model_validator(mode="after")
    def _some_parallelism(self) -> ContextParallelConfig:
        if self.ulysses * self.ring < 2:
            raise ValueError("ulysses x ring must be at least 2 (one rank is the baseline); e.g. {ulysses: 2}")
        if self.anything and self.ulysses > 1 and self.ring > 1:
            raise ValueError("anything needs one of ulysses or ring, not both (diffusers)")
        return self


class TensorParallelConfig(FeatureConfig):
    """Options of ``tensor_parallel`` (diffusers ``TensorParallelConfig``); world size = tp."""

    tp: int = Field(
        default=2,
        ge=2,
        description="Tensor-parallel degree: ranks each holding 1/tp of every planned Linear (default 2). "
        "Less weight memory per rank, an all-reduce per sharded layer pair; must divide the attention heads.",
    )


def collective_backend(device: str) -> str:
    """The torch.distributed backend of a cell on ``device``: NCCL on CUDA, gloo on the CPU."""
    return "nccl" if device.startswith("cuda") else "gloo"


@functools.cache
def native_lse_refusal() -> str:
    """diffusers' own reason the CPU attention backend cannot serve ring attention, from calling it."""
    import torch
    from diffusers.models import attention_dispatch

    query = torch.zeros(1, 2, 1, 4)
    try:
        attention_dispatch._native_attention_forward_op(None, query, query, query, return_lse=True)  # type: ignore[arg-type]
    except ValueError as error:
        return str(error)
    return "native attention returned the log-sum-exp"  # a diffusers that can: nothing to refuse


def tp_device_refusal(device_type: str) -> str | None:
    """diffusers' reason tensor parallelism refuses ``device_type`` (its own sentence and list), or None."""
    from diffusers.hooks.tensor_parallel import _SUPPORTED_TP_DEVICES

    if device_type in _SUPPORTED_TP_DEVICES:
        return None
    return (
        f"Tensor parallelism is not supported on device type '{device_type}'. Supported device types are "
        f"{list(_SUPPORTED_TP_DEVICES)} (diffusers)"
    )


def tp_model_refusal(model: Any, tp: int) -> str | None:
    """diffusers' own reason ``model`` cannot be sharded over ``tp`` ranks (no ``_tp_plan``, a head count ``tp``
    does not divide, a quantized or offloaded model), asked of ``enable_parallelism``'s check without sharding
    anything; None when it can."""
    from diffusers import TensorParallelConfig as DiffusersTensorParallelConfig
    from diffusers.hooks.tensor_parallel import _check_tp_supported

    heads = getattr(getattr(model, "config", None), "num_attention_heads", None)
    config = DiffusersTensorParallelConfig(tp_degree=tp)
    try:
        _check_tp_supported(type(model).__name__, getattr(model, "_tp_plan", None), heads, config, model=model)
    except ValueError as error:
        return f'diffusers: "{error}"'
    return None


def _world_fits(device: str, world_size: int) -> Support:
    import torch

    if not torch.distributed.is_available():
        return Support.no("this torch build has no torch.distributed", Owner.DEVICE)
    if device.startswith("cuda"):
        found = torch.cuda.device_count()
        if found < world_size:
            return Support.no(f"needs {world_size} GPUs, one per rank (found: {found})", Owner.DEVICE)
    return Support.yes()


class _ParallelFeature:
    """What the parallel features share: ``world_size`` and the checks made before any rank starts."""

    def world_size(self, options: Any) -> int:
        raise NotImplementedError

    def cell_support(self, model: Any, workload: Any, call_kwargs: dict[str, Any], options: Any) -> Support:
        """Whether the cell's model (a ``ModelSpec``), workload and pipeline call kwargs (the source's defaults
        and the model's) can be split, decided on the driver before any rank starts. Default: diffusers'
        parallel plans, which only the adapter target's models have."""
        if model.target != "adapter":
            return Support.no(
                "the native pipelines have no _tp_plan (tensor parallelism: target adapter only)", Owner.HARNESS
            )
        return Support.yes()

    def launch_support(self, device: str, options: Any, configs: dict[str, Any]) -> Support:
        """Whether the ranks can run here, decided on the driver before any starts (``configs``: the variant's)."""
        raise NotImplementedError


def _is_native(transformer: Any) -> bool:
    """A transformer of the native target (``accel.native``), not a diffusers model."""
    return type(transformer).__module__.startswith("accel.native.")


def context_parallel_group(transformer: Any) -> Any:
    """The device mesh over which ``transformer``'s sequence is split by context parallelism, or None: diffusers'
    (``_parallel_config``) or the native attention layer's (``Attention.ulysses``)."""
    config = getattr(getattr(transformer, "_parallel_config", None), "context_parallel_config", None)
    if config is not None:
        return config._flattened_mesh
    for module in transformer.modules():
        group = getattr(module, "ulysses", None)
        if group is not None and hasattr(group, "mesh"):
            return group.mesh
    return None


def _split_models(pipeline: Any) -> dict[str, Any]:
    """The denoisers context parallelism splits: the pipeline's transformers (Wan 2.2's ``transformer`` and
    ``transformer_2``), by component name; a UNet has no diffusers context-parallel plan to apply."""
    return {name: model for name, model in denoisers(pipeline).items() if name != "unet"}


def _in_ranks(world_size: int) -> Support:
    import torch

    if not torch.distributed.is_initialized():
        return Support.no(
            f"needs {world_size} ranks with torch.distributed initialised; the sweep starts them (any executor)",
            Owner.HARNESS,
        )
    if torch.distributed.get_world_size() != world_size:
        return Support.no(
            f"needs world size {world_size}, the ranks have {torch.distributed.get_world_size()}", Owner.HARNESS
        )
    return Support.yes()


def ulysses_heads_refusal(transformer: Any, degree: int, anything: bool) -> str | None:
    """Why diffusers' Ulysses cannot split ``transformer``'s attention heads over ``degree`` ranks, or None.

    diffusers 0.42 (``attention_dispatch.py``): heads the degree does not divide need ``ulysses_anything``, which
    pads them to a multiple of the degree only while the padding is smaller than each rank's share
    (``_maybe_pad_qkv_head``: an assertion mid-call otherwise). Heads read from the model's config; a model
    without ``num_attention_heads`` there is not checked."""
    heads = getattr(getattr(transformer, "config", None), "get", lambda key: None)("num_attention_heads")
    if degree <= 1 or not isinstance(heads, int) or heads % degree == 0:
        return None
    name = type(transformer).__name__
    padding = degree - heads % degree
    share = (heads + padding) // degree
    if padding < share:  # anything pads them
        if anything:
            return None
        return (
            f"Ulysses over {degree} ranks needs head counts divisible by it; {name} has {heads} (anything: true "
            "pads them)"
        )
    return (
        f"Ulysses over {degree} ranks splits the attention heads; {name} has {heads}, and diffusers pads them to a "
        f"multiple of the degree only while the padding ({padding}) is smaller than each rank's share ({share}): "
        f"use a degree that divides {heads}"
    )


# How a processor's source expands the attention mask to every head before dispatching attention (diffusers 0.42:
# LTX-Video's ``LTXVideoAttnProcessor``, ``attention_mask.view(batch_size, attn.heads, -1, ...)``).
_MASK_PER_HEAD = "attn.heads, -1, attention_mask.shape[-1]"


def ulysses_mask_refusal(transformer: Any, degree: int) -> str | None:
    """Why diffusers' Ulysses fails on ``transformer``'s attention masks, or None.

    Ulysses gives each rank ``heads / degree`` heads; a processor that expands its attention mask to every head
    (read from the processors' source) hands diffusers' context-parallel attention a mask it does not split, and
    SDPA fails mid-call ("The size of tensor a (2) must match the size of tensor b (4) at non-singleton
    dimension 1": tiny-ltx-video, 4 heads over 2 ranks, with and without ``anything``)."""
    import inspect

    if degree <= 1:
        return None
    processors = getattr(transformer, "attn_processors", None) or {}
    for processor in sorted({type(p) for p in processors.values()}, key=lambda kind: kind.__name__):
        try:
            source = inspect.getsource(processor.__call__)
        except (OSError, TypeError):
            continue
        if _MASK_PER_HEAD in source:
            import diffusers

            return (
                f"Ulysses over {degree} ranks splits the attention heads, but {type(transformer).__name__}'s "
                f"{processor.__name__} expands its attention mask to every head, which diffusers "
                f"{diffusers.__version__}'s context-parallel attention does not split (the call fails mid-way, "
                "whatever the degree or anything)"
            )
    return None


class _Collectives:
    """Counts (and sizes) the torch.distributed collectives called while installed; ``remove`` restores them."""

    def __init__(self) -> None:
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol

        self.calls: dict[str, list[int]] = {}  # name -> [calls, bytes]
        self.in_attention: dict[str, int] = {}  # name -> calls made from the attention (ATTENTION_SITES)
        # The denoiser running now (set by ParallelHandle's hooks around each denoiser's call), and the attention's
        # collectives by the denoiser that called them: denoiser -> name -> calls.
        self.denoiser: str | None = None
        self.in_attention_by_denoiser: dict[str, dict[str, int]] = {}
        self.by_denoiser: dict[str, dict[str, int]] = {}  # every collective by denoiser (tensor parallelism's)
        self.originals: list[tuple[Any, str, Any]] = []
        for module, names, prefix in ((funcol, FUNCTIONAL_COLLECTIVES, ""), (dist, C10D_COLLECTIVES, "c10d.")):
            for name in names:
                original = getattr(module, name, None)
                if original is not None:
                    self.originals.append((module, name, original))
                    setattr(module, name, self._counted(prefix + name, original))

    def _counted(self, name: str, function: Any) -> Any:
        @functools.wraps(function)
        def counted(*args: Any, **kwargs: Any) -> Any:
            tally = self.calls.setdefault(name, [0, 0])
            tally[0] += 1
            tally[1] += _tensor_bytes(args[:2])
            if self.denoiser is not None:
                ours = self.by_denoiser.setdefault(self.denoiser, {})
                ours[name] = ours.get(name, 0) + 1
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            if caller.endswith(ATTENTION_SITES):
                self.in_attention[name] = self.in_attention.get(name, 0) + 1
                if self.denoiser is not None:
                    mine = self.in_attention_by_denoiser.setdefault(self.denoiser, {})
                    mine[name] = mine.get(name, 0) + 1
            return function(*args, **kwargs)

        return counted

    def take(self) -> dict[str, dict[str, int]]:
        """The collectives since the last ``take``: name -> {calls, bytes}."""
        taken = {name: {"calls": c, "bytes": b} for name, (c, b) in sorted(self.calls.items())}
        self.calls = {}
        return taken

    def take_attention(self) -> dict[str, int]:
        """The collectives the attention called since the last ``take_attention``: name -> calls."""
        taken = dict(sorted(self.in_attention.items()))
        self.in_attention = {}
        return taken

    def take_attention_by_denoiser(self) -> dict[str, dict[str, int]]:
        """The attention's collectives since the last call, by the denoiser whose call made them."""
        taken = {name: dict(sorted(calls.items())) for name, calls in sorted(self.in_attention_by_denoiser.items())}
        self.in_attention_by_denoiser = {}
        return taken

    def take_by_denoiser(self) -> dict[str, dict[str, int]]:
        """Every collective since the last call, by the denoiser whose call made it."""
        taken = {name: dict(sorted(calls.items())) for name, calls in sorted(self.by_denoiser.items())}
        self.by_denoiser = {}
        return taken

    def remove(self) -> None:
        for module, name, original in self.originals:
            setattr(module, name, original)


def _partial(untouched: dict[str, int], lacking: str, splitter: str, evidence: dict[str, Any]) -> Verdict:
    """The verdict of a parallel feature that split some denoisers only: ``untouched`` (denoiser -> calls made
    without ``lacking``), named with what ``splitter`` did split."""
    unsplit = ", ".join(f"{name} on {calls} calls" for name, calls in untouched.items())
    return Verdict(
        False,
        f"partial: a denoiser ran without {lacking} ({unsplit}); {splitter} split the others only",
        {**evidence, "partial": True, "untouched_denoiser_calls": untouched},
    )


def _tensor_bytes(values: Any) -> int:
    import torch

    total = 0
    for value in values:
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def _tokens(value: Any) -> int | None:
    """The sequence length (dim 1) of packed tokens (B, N, C), or None."""
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    shape = getattr(value, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 3 else None


@contextlib.contextmanager
def cpu_device_count_shim(device: str) -> Iterator[bool]:
    """On the CPU with no accelerator, ``torch.accelerator.device_count()`` reads 1 inside the block (diffusers
    computes ``rank % device_count()``); yields whether the shim was in place. Elsewhere: nothing changes."""
    import torch

    if device != "cpu" or torch.accelerator.device_count() != 0:
        yield False
        return
    original = torch.accelerator.device_count
    torch.accelerator.device_count = lambda: 1
    try:
        yield True
    finally:
        torch.accelerator.device_count = original


class ParallelHandle(Handle):
    """diffusers' parallel hooks on each denoiser it splits (``models``: Wan 2.2's ``transformer`` and
    ``transformer_2``; the first alone where given one), the collective counters and the split recorder."""

    def __init__(self, transformer: Any, kind: str, world_size: int, models: dict[str, Any] | None = None) -> None:
        super().__init__()
        import torch.distributed as dist

        self.transformer = transformer
        self.models: dict[str, Any] = models if models is not None else {"transformer": transformer}
        self.kind = kind
        self.world_size = world_size
        self.rank = dist.get_rank()
        self.cpu_shim = False
        self.uneven_gather: Any = None  # accel.features.uneven_gather.UnevenGatherOnGloo, for uneven shares
        self.even_split: EvenSplitRequired | None = None  # without anything: an uneven length refused, not asserted
        self.padded_gather = False  # a share padded at a gather (accel.features.uneven_gather), set by end_run
        self.collectives = _Collectives()
        self.local_tokens: list[int] = []
        self.gathered_tokens: list[int] = []
        # proj_out is where every _cp_plan of diffusers 0.42 gathers the sequence (ContextParallelOutput): its
        # input is this rank's share, its output (after diffusers' gather hook) the whole sequence.
        self.hooks: list[Any] = []
        for name, model in self.models.items():
            proj_out = getattr(model, "proj_out", None)
            if proj_out is not None:
                self.hooks.append(proj_out.register_forward_pre_hook(self._note_local))
                self.hooks.append(proj_out.register_forward_hook(self._note_gathered))
            # Which denoiser's call a collective came from, and how often each denoiser was called.
            self.hooks.append(model.register_forward_pre_hook(functools.partial(self._enter, name)))
            self.hooks.append(model.register_forward_hook(self._leave, always_call=True))
        self.denoiser_calls: dict[str, int] = dict.fromkeys(self.models, 0)
        self.cp_plans: dict[str, Any] = {}  # denoiser -> the _cp_plan whose hooks diffusers installed on it
        self.native = False  # a native transformer (accel.native.context_parallel), not diffusers' hooks
        # mode -> the collectives its attention must call in every timed call (required_collectives)
        self.required: dict[str, tuple[str, ...]] = {}

    def _enter(self, name: str, module: Any, args: tuple[Any, ...]) -> None:
        self.collectives.denoiser = name
        self.denoiser_calls[name] += 1

    def _leave(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self.collectives.denoiser = None

    def _note_local(self, module: Any, args: tuple[Any, ...]) -> None:
        tokens = _tokens(args)
        if tokens is not None:
            self.local_tokens.append(tokens)

    def _note_gathered(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        tokens = _tokens(output)
        if tokens is not None:
            self.gathered_tokens.append(tokens)

    def begin_run(self) -> None:
        super().begin_run()
        self.collectives.take()
        self.collectives.take_attention()
        self.collectives.take_attention_by_denoiser()
        self.collectives.take_by_denoiser()
        self.denoiser_calls = dict.fromkeys(self.models, 0)
        self.local_tokens.clear()
        self.gathered_tokens.clear()

    def end_run(self) -> None:
        self.current["collectives"] = self.collectives.take()
        self.current["attention_collectives"] = self.collectives.take_attention()
        self.current["attention_collectives_by_denoiser"] = self.collectives.take_attention_by_denoiser()
        self.current["collectives_by_denoiser"] = self.collectives.take_by_denoiser()
        self.current["denoiser_calls"] = dict(self.denoiser_calls)
        # Said only where a share was padded: with "anything" and even shares nothing was (64x64 FLUX: 8 + 8).
        self.padded_gather = self.uneven_gather is not None and self.uneven_gather.uneven_gathers > 0
        self.current["tokens"] = {"rank": sorted(set(self.local_tokens)), "gathered": sorted(set(self.gathered_tokens))}

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.collectives.remove()
        if self.uneven_gather is not None:
            self.uneven_gather.remove()
        if self.even_split is not None:
            self.even_split.remove()
            self.even_split = None
        if self.native:
            from accel.native.context_parallel import disable_native_context_parallel

            disable_native_context_parallel(self.transformer)
            return
        from diffusers.hooks.context_parallel import remove_context_parallel

        for name, model in self.models.items():
            plan = self.cp_plans.pop(name, None)
            if plan is not None:
                remove_context_parallel(model, plan)
                for module in model.modules():
                    processor = getattr(module, "processor", None)
                    if processor is not None and hasattr(processor, "_parallel_config"):
                        processor._parallel_config = None
            if hasattr(model, "_parallel_config"):
                model._parallel_config = None


def required_collectives(options: ContextParallelConfig) -> dict[str, tuple[str, ...]]:
    """The collectives each mode of ``options`` calls inside the attention (diffusers 0.42,
    ``attention_dispatch.py``; the native layer alike): Ulysses exchanges heads for sequence with
    ``all_to_all_single`` (``TemplatedUlyssesAttention`` and its "anything" form, on gloo as on NCCL: there is
    no other path); ring gathers the other ranks' key/value with ``all_gather_tensor`` in its forward
    (``TemplatedRingAttention``; ``permute_tensor`` only in its backward). The ``_cp_plan``'s output gather
    (``all_gather_tensor`` or ``all_gather``, ``hooks/context_parallel.py``) runs in both modes and proves
    neither."""
    required: dict[str, tuple[str, ...]] = {}
    if options.ulysses > 1:
        required["ulysses"] = ("all_to_all_single",)
    if options.ring > 1:
        required["ring"] = ("all_gather_tensor", "permute_tensor")
    return required


def _unsplit_denoisers(
    runs: list[dict[str, Any]], names_needed: tuple[str, ...], counts: str = "attention_collectives_by_denoiser"
) -> dict[str, int]:
    """Denoisers called in a run whose attention (``counts``: or whole call) called none of ``names_needed`` in
    it: their calls, summed (runs without per-denoiser counts, as a handle of one transformer before them, say
    nothing)."""
    untouched: dict[str, int] = {}
    for run in runs:
        if counts not in run:
            continue
        by_denoiser = {d: {n.removeprefix("c10d."): c for n, c in named.items()} for d, named in run[counts].items()}
        for name, calls in run.get("denoiser_calls", {}).items():
            if calls and not any(by_denoiser.get(name, {}).get(n, 0) for n in names_needed):
                untouched[name] = untouched.get(name, 0) + calls
    return untouched


def _verify(handle: ParallelHandle, wanted: tuple[str, ...]) -> Verdict:
    """Engaged when a ``wanted`` collective ran in every timed call and each mode in ``handle.required`` had its
    own collective called by the attention in every timed call, from every denoiser that ran in it (a second
    denoiser whose attention ran unsplit is "partial", not engaged)."""
    per_run = [run.get("collectives", {}) for run in handle.runs]
    tokens = [run.get("tokens", {}) for run in handle.runs]
    evidence: dict[str, Any] = {
        "rank": handle.rank,
        "world_size": handle.world_size,
        "collectives_per_run": per_run,
        "attention_collectives_per_run": [run.get("attention_collectives", {}) for run in handle.runs],
        "attention_collectives_by_denoiser_per_run": [
            run.get("attention_collectives_by_denoiser", {}) for run in handle.runs
        ],
        "collectives_by_denoiser_per_run": [run.get("collectives_by_denoiser", {}) for run in handle.runs],
        "denoiser_calls_per_run": [run.get("denoiser_calls", {}) for run in handle.runs],
        "tokens_per_run": tokens,
        "cpu_device_count_shim": CPU_SHIM_NOTE if handle.cpu_shim else None,
        "gloo_uneven_gather": GLOO_UNEVEN_GATHER_NOTE if handle.padded_gather else None,
    }
    if not per_run:
        return Verdict(False, "no timed call ran", evidence)
    ran = [sum(c["calls"] for name, c in run.items() if name.removeprefix("c10d.") in wanted) for run in per_run]
    if not all(ran):
        return Verdict(
            False, f"no {' or '.join(wanted)} collective ran in {ran.count(0)} of {len(ran)} calls", evidence
        )
    untouched = _unsplit_denoisers(handle.runs, wanted, "collectives_by_denoiser")
    if untouched:  # a denoiser (Wan 2.2's transformer_2) ran without any of the feature's collectives
        return _partial(untouched, f"a {' or '.join(wanted)} collective", handle.kind, evidence)
    for mode, names_needed in getattr(handle, "required", {}).items():
        attention = [run.get("attention_collectives", {}) for run in handle.runs]
        missing = [i for i, run in enumerate(attention) if not any(run.get(n, 0) for n in names_needed)]
        if missing:
            seen = ", ".join(sorted({name for run in attention for name in run})) or "none"
            return Verdict(
                False,
                f"{mode} needs {' or '.join(names_needed)} in the attention, which ran none in {len(missing)} of "
                f"{len(attention)} calls (collectives the attention called: {seen}); another collective (the "
                "output gather) does not split the attention",
                evidence,
            )
        untouched = _unsplit_denoisers(handle.runs, names_needed)
        if untouched:  # a denoiser (Wan 2.2's transformer_2) ran with its attention unsplit
            return _partial(untouched, f"{' or '.join(names_needed)} in its attention", mode, evidence)
    split = tokens[-1]
    names = " + ".join(f"{c['calls']} {name}" for name, c in per_run[-1].items() if c["calls"])
    summary = f"{handle.kind} over {handle.world_size} ranks: {names} per call"
    if split.get("rank") and split.get("gathered"):
        summary += f"; {split['rank']} of {split['gathered']} tokens on this rank"
    return Verdict(True, summary, evidence)


class ContextParallel(_ParallelFeature, Feature[ContextParallelConfig, ParallelHandle]):
    """Split the transformer's sequence over ranks: Ulysses (all-to-all) and/or Ring attention (diffusers)."""

    name = "context_parallel"
    denoiser_evidence = ("attention_collectives_by_denoiser_per_run", "collectives in the attention")
    reach = Reach.EVERY_DENOISER  # Wan 2.2's transformer_2 too: diffusers' plan is per model
    family = "parallel"
    feature_class = FeatureClass.LOSSLESS  # reduction order only: judged at the dtype's lossless thresholds
    stage = Stage.PARALLEL
    config_cls = ContextParallelConfig
    primary_option = "ulysses"
    description = "context parallelism over ranks (transformer.enable_parallelism(ContextParallelConfig))"

    def world_size(self, options: ContextParallelConfig) -> int:
        return options.ulysses * options.ring

    def cell_support(
        self, model: Any, workload: Any, call_kwargs: dict[str, Any], options: ContextParallelConfig
    ) -> Support:
        """Adapter models: diffusers' plans. Native ones: Ulysses through the native attention layer."""
        if model.target == "native" and options.ring > 1:
            return Support.no(
                "the native attention layer implements Ulysses (all-to-all) only: use ring: 1", Owner.HARNESS
            )
        if model.target in ("adapter", "native"):
            return Support.yes()
        return super().cell_support(model, workload, call_kwargs, options)

    def launch_support(self, device: str, options: ContextParallelConfig, configs: dict[str, Any]) -> Support:
        from accel.features.attention import AttentionBackendConfig

        fits = _world_fits(device, self.world_size(options))
        if not fits.supported:
            return fits
        if options.ring > 1:
            chosen = next((c.backend for c in configs.values() if isinstance(c, AttentionBackendConfig)), "native")
            if device == "cpu" or chosen in ("native", "_native_math"):
                return Support.no(
                    f"ring attention needs an attention backend that returns the log-sum-exp (flash, _native_cudnn "
                    f"or _native_flash on a GPU; this cell: {chosen} on {device}); diffusers: "
                    f'"{native_lse_refusal()}"',
                    Owner.LIBRARY,
                )
        return Support.yes()

    def probe(self, device: str, options: ContextParallelConfig, dtype: str | None = None) -> Support:
        return self.launch_support(device, options, {})

    def check(self, pipeline: Any, device: str, options: ContextParallelConfig) -> Support:
        transformer = getattr(pipeline, "transformer", None)
        if transformer is not None and _is_native(transformer):
            from accel.native.context_parallel import native_cp_refusal

            refusal = native_cp_refusal(transformer, options.ulysses, options.ring, options.anything)
            return Support.no(refusal, Owner.HARNESS) if refusal else _in_ranks(self.world_size(options))
        if transformer is None or not hasattr(transformer, "enable_parallelism"):
            return Support.no(
                f"pipeline {type(pipeline).__name__} has no diffusers transformer with enable_parallelism",
                Owner.HARNESS,
            )
        models = _split_models(pipeline)
        for name, model in models.items():
            # Each denoiser the feature splits (Wan 2.2's transformer_2 too), named where there are several.
            where = f"{name} ({type(model).__name__})" if len(models) > 1 else type(model).__name__
            if not hasattr(model, "enable_parallelism"):
                return Support.no(f"{where} is not a diffusers model with enable_parallelism", Owner.HARNESS)
            if getattr(model, "_cp_plan", None) is None:
                return Support.no(
                    f"{where} has no _cp_plan (diffusers' context-parallel plan); diffusers' "
                    "enable_parallelism: \"`cp_plan` must be provided either as an argument or set in the model's "
                    '`_cp_plan` attribute."',
                    Owner.LIBRARY,
                )
            refusal = ulysses_heads_refusal(model, options.ulysses, options.anything) or ulysses_mask_refusal(
                model, options.ulysses
            )
            if refusal:
                return Support.no(refusal if len(models) == 1 else f"{name}: {refusal}", Owner.LIBRARY)
        return _in_ranks(self.world_size(options))

    def apply(self, pipeline: Any, options: ContextParallelConfig, context: RunContext) -> ParallelHandle:
        from diffusers import ContextParallelConfig as DiffusersContextParallelConfig

        transformer = pipeline.transformer
        kind = " x ".join(f"{name} {degree}" for name, degree in (("ulysses", options.ulysses), ("ring", options.ring)))
        models = _split_models(pipeline)
        handle = ParallelHandle(transformer, kind, self.world_size(options), models)
        handle.required = required_collectives(options)
        try:
            make_config = functools.partial(
                DiffusersContextParallelConfig,
                ulysses_degree=options.ulysses,
                ring_degree=options.ring,
                ulysses_anything=options.anything and options.ulysses > 1,
                ring_anything=options.anything and options.ring > 1,
            )
            if options.anything:
                handle.uneven_gather = UnevenGatherOnGloo()
            else:
                degree = f"ulysses {options.ulysses}" if options.ring == 1 else kind
                handle.even_split = EvenSplitRequired(degree)
            if _is_native(transformer):
                from accel.native.context_parallel import enable_native_context_parallel

                handle.native = True  # before enabling: a failure halfway is undone by remove()
                enable_native_context_parallel(transformer, make_config(), context.device)
                handle.cp_plans["transformer"] = transformer._cp_plan
            else:
                for name, model in models.items():  # each denoiser its own config: diffusers sets one up per model
                    with cpu_device_count_shim(context.device) as shimmed:
                        model.enable_parallelism(config=make_config())
                    handle.cp_plans[name] = model._cp_plan
                    handle.cpu_shim = handle.cpu_shim or shimmed
        except BaseException:
            handle.remove()
            raise
        return handle

    def verify(self, handle: ParallelHandle) -> Verdict:
        return _verify(handle, ("all_to_all_single", "all_gather_tensor", "all_gather", "permute_tensor"))


class TensorParallel(_ParallelFeature, Feature[TensorParallelConfig, ParallelHandle]):
    """Shard each transformer's planned Linear layers over ranks (diffusers ``TensorParallelConfig``)."""

    name = "tensor_parallel"
    reach = Reach.EVERY_DENOISER  # every transformer with its own _tp_plan (Wan 2.2's second one too)
    family = "parallel"
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.PARALLEL
    config_cls = TensorParallelConfig
    primary_option = "tp"
    description = "tensor parallelism over ranks (transformer.enable_parallelism(TensorParallelConfig))"

    def world_size(self, options: TensorParallelConfig) -> int:
        return options.tp

    def launch_support(self, device: str, options: TensorParallelConfig, configs: dict[str, Any]) -> Support:
        refusal = tp_device_refusal(device.split(":")[0])
        if refusal is not None:
            return Support.no(refusal, Owner.LIBRARY)
        return _world_fits(device, options.tp)

    def probe(self, device: str, options: TensorParallelConfig, dtype: str | None = None) -> Support:
        return self.launch_support(device, options, {})

    def check(self, pipeline: Any, device: str, options: TensorParallelConfig) -> Support:
        transformer = getattr(pipeline, "transformer", None)
        if transformer is None or not hasattr(transformer, "enable_parallelism"):
            return Support.no(
                f"pipeline {type(pipeline).__name__} has no diffusers transformer with enable_parallelism",
                Owner.HARNESS,
            )
        models = _split_models(pipeline)
        for name, model in models.items():
            # Each denoiser the feature shards (Wan 2.2's transformer_2 too), named where there are several.
            where = f"{name} ({type(model).__name__})" if len(models) > 1 else type(model).__name__
            if not hasattr(model, "enable_parallelism"):
                return Support.no(f"{where} is not a diffusers model with enable_parallelism", Owner.HARNESS)
            refusal = tp_model_refusal(model, options.tp)
            if refusal:
                heads = getattr(getattr(model, "config", None), "num_attention_heads", None)
                planned = getattr(model, "_tp_plan", None) is not None
                if planned and heads is not None and heads % options.tp:  # a head count tp cannot split
                    return Support.no(f"{where}: {refusal}", Owner.MODEL)
                return Support.no(f"{where}: {refusal}", Owner.LIBRARY)  # no plan, or a state it cannot shard
        return _in_ranks(options.tp)

    def apply(self, pipeline: Any, options: TensorParallelConfig, context: RunContext) -> ParallelHandle:
        from diffusers import TensorParallelConfig as DiffusersTensorParallelConfig

        models = _split_models(pipeline)
        handle = ParallelHandle(pipeline.transformer, f"tp {options.tp}", options.tp, models)
        try:
            for model in models.values():  # each denoiser its own config: diffusers shards per model
                model.enable_parallelism(config=DiffusersTensorParallelConfig(tp_degree=options.tp))
        except BaseException:
            handle.remove()
            raise
        return handle

    def verify(self, handle: ParallelHandle) -> Verdict:
        return _verify(handle, ("all_reduce", "all_gather_tensor", "all_gather"))


def variant_world_size(configs: dict[str, Any]) -> int:
    """The ranks a variant runs on: its parallel feature's world size, 1 without one."""
    from accel.features.registry import FEATURES

    sizes = [
        feature.world_size(config)
        for name, config in configs.items()
        if isinstance(feature := FEATURES[name], _ParallelFeature)
    ]
    return max(sizes, default=1)


def cell_refused(configs: dict[str, Any], model: Any, workload: Any, call_kwargs: dict[str, Any]) -> Support:
    """Whether the variant's parallel feature can split this model, workload and call, decided before any rank
    starts: a refusal names the feature and who refuses (``Support.owner``)."""
    from accel.features.registry import FEATURES

    for name, config in configs.items():
        feature = FEATURES[name]
        if isinstance(feature, _ParallelFeature):
            support = feature.cell_support(model, workload, call_kwargs, config)
            if not support.supported:
                return Support.no(f"{name}: {support.reason}", support.owner)
    return Support.yes()


def cell_refusal(configs: dict[str, Any], model: Any, workload: Any, call_kwargs: dict[str, Any]) -> str | None:
    """Why the variant's parallel feature cannot split this model, workload and call (the feature named),
    decided before any rank starts; None: it can."""
    return cell_refused(configs, model, workload, call_kwargs).reason or None


def launch_refused(configs: dict[str, Any], device: str) -> Support:
    """Whether the variant's ranks can run on ``device``, decided before any starts: a refusal names the feature
    and who refuses (``Support.owner``)."""
    from accel.features.registry import FEATURES

    for name, config in configs.items():
        feature = FEATURES[name]
        if isinstance(feature, _ParallelFeature):
            support = feature.launch_support(device, config, configs)
            if not support.supported:
                return Support.no(f"{name}: {support.reason}", support.owner)
    return Support.yes()


def launch_refusal(configs: dict[str, Any], device: str) -> str | None:
    """Why the variant's ranks cannot run on ``device`` (the feature named), decided before any starts; None: go."""
    return launch_refused(configs, device).reason or None
