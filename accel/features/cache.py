"""Step caching: reuse transformer work across denoising steps. Lossy; trades quality for speed.

- ``cache_dit``: Cache-DiT's DBCache (Fn/Bn compute blocks, residual threshold, warmup, caps), with the
  TaylorSeer calibrator and SCM step masks as options. Evidence: ``cache_dit.summary`` cached steps of
  every timed run (both CFG branches where the model runs them separately).
- diffusers' hooks, where the model supports them (``transformer.enable_cache``): ``first_block_cache``,
  ``mag_cache``, ``taylorseer_cache``, ``pyramid_attention_broadcast``, ``faster_cache``.
- ``tea_cache`` lives in ``teacache.py`` (diffusers has none).

Evidence for the hooks is the work they skip: attention computations that reached the dispatcher per
transformer call, against the number of attention modules (what an uncached call computes). A cache
that computed everything on a run has not engaged, whatever it was configured to do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    LOSSY_LIMITS,
    ConfigT,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    RunContext,
    Stage,
    Support,
    Tally,
    Verdict,
)
from accel.features.dispatch import native_attention_layers, tallied

SKIPS_WORK = "a cache skips work on cached steps"


def cached_steps_verdict(counts: list[int], evidence: dict[str, Any], detail: str = "") -> Verdict:
    """Engaged when every timed run cached at least one step; the summary gives the range per run, and how
    many runs cached nothing, so a cache that engages on some prompts only is not shown as never engaging."""
    if counts and all(counts):
        return Verdict(True, f"{min(counts)}-{max(counts)} cached steps per run{detail}", evidence)
    if any(counts):
        idle = sum(1 for n in counts if n == 0)
        return Verdict(
            False,
            f"cached {min(counts)}-{max(counts)} steps per run: none on {idle} of {len(counts)} runs "
            "(engaged on some runs only)",
            evidence,
        )
    return Verdict(False, f"enabled but no step cached on any of {len(counts)} runs", evidence)


class WorkCounter(Handle):
    """Counts transformer calls and the attention computations dispatched during them.

    The counters are ``Tally`` tensors: they count inside code that torch.compile traces (the pre-hook of a
    fully compiled transformer, attention inside compiled blocks) without a guard that would recompile.
    """

    def __init__(self, transformer: Any, undo: Any = None, device: str = "cpu") -> None:
        super().__init__()
        from diffusers.models.attention_dispatch import _AttentionBackendRegistry

        self.undo = undo
        self.registry = _AttentionBackendRegistry
        self.native_layers = native_attention_layers(transformer)
        for layer in self.native_layers:  # the native attention layer counts its own computations
            layer.count_calls = True
        self.attention_modules = len(self.native_layers) or count_attention_modules(transformer)
        # The modules a hook matched by name (taylorseer_cache fills it; its evidence).
        self.hooked: list[str] = []
        self.calls = Tally(device)
        self.computed = Tally(device)
        self.start = (0, 0)
        self.originals = dict(self.registry._backends)
        for name, function in self.originals.items():
            self.registry._backends[name] = tallied(function, self.computed)
        self.hook = transformer.register_forward_pre_hook(self._count_call)

    def begin_run(self) -> None:
        super().begin_run()
        for layer in self.native_layers:
            layer.reset_calls()
        self.start = (self.calls.value, self.computed.value)

    def end_run(self) -> None:
        self.current["transformer_calls"] = self.calls.value - self.start[0]
        if self.native_layers:
            self.current["attention_computed"] = sum(sum(layer.calls.values()) for layer in self.native_layers)
        else:
            self.current["attention_computed"] = self.computed.value - self.start[1]

    def _count_call(self, *args: Any) -> None:
        self.calls.add()

    def skipped_fractions(self) -> list[float]:
        """Per run: the share of attention computations a full forward would make that were skipped."""
        fractions = []
        for run in self.runs:
            full = run.get("transformer_calls", 0) * self.attention_modules
            fractions.append(1.0 - run.get("attention_computed", 0) / full if full else 0.0)
        return fractions

    def remove(self) -> None:
        self.hook.remove()
        for layer in self.native_layers:
            layer.count_calls = False
        for name, original in self.originals.items():
            self.registry._backends[name] = original
        if self.undo is not None:
            self.undo()


def count_attention_modules(transformer: Any) -> int:
    """Attention modules whose processor dispatches through diffusers (one computation per forward)."""
    return sum(1 for m in transformer.modules() if hasattr(getattr(m, "processor", None), "_attention_backend"))


def verify_skipped_work(handle: WorkCounter, name: str) -> Verdict:
    fractions = handle.skipped_fractions()
    evidence = {
        "attention_modules": handle.attention_modules,
        "transformer_calls_per_run": [r.get("transformer_calls", 0) for r in handle.runs],
        "attention_computed_per_run": [r.get("attention_computed", 0) for r in handle.runs],
        "skipped_fraction_per_run": [round(f, 4) for f in fractions],
    }
    if not handle.attention_modules:
        return Verdict(False, f"{name}: no attention module dispatches through diffusers; cannot observe", evidence)
    if fractions and all(f > 0 for f in fractions):
        return Verdict(True, f"skipped {min(fractions):.0%}-{max(fractions):.0%} of attention work per run", evidence)
    return Verdict(False, f"{name} enabled but a run computed every step (0 cached)", evidence)


# --- Cache-DiT --------------------------------------------------------------------------------------


class CacheDitConfig(FeatureConfig):
    """Options of ``cache_dit`` (DBCache). Defaults as vLLM-Omni's, tuned for few steps."""

    Fn_compute_blocks: int = Field(default=1, ge=1, description="Front blocks always computed; more: safer, slower.")
    Bn_compute_blocks: int = Field(default=0, ge=0, description="Back blocks always computed; more: safer, slower.")
    residual_diff_threshold: float = Field(
        default=0.24, gt=0, description="Cache when the first blocks' residual changed less; higher: faster, lossier."
    )
    max_warmup_steps: int = Field(default=4, ge=0, description="Steps always computed first; more: safer.")
    warmup_interval: int = Field(default=1, ge=1)
    max_cached_steps: int = Field(default=-1, ge=-1, description="Cap on cached steps per run (-1: none).")
    max_continuous_cached_steps: int = Field(
        default=3, ge=-1, description="Cap on consecutive cached steps (-1: none)."
    )
    taylorseer: bool = Field(default=False, description="TaylorSeer calibrator: extrapolates cached residuals.")
    taylorseer_order: int = Field(default=1, ge=1, le=4)
    steps_mask: Literal["slow", "medium", "fast", "ultra"] | None = Field(
        default=None, description="SCM step-computation mask policy; faster policies compute fewer steps."
    )


class _CacheDitHandle(Handle):
    def __init__(
        self,
        pipeline: Any,
        before: tuple[dict[str, set[str]], dict[str, list[str]]],
        transformer_only_steps: int | None = None,
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        # Each component module's instance attributes before enable_cache (what remove() takes away again) and its
        # children in their order (Cache-DiT's removal re-inserts block lists at the end): ``module_state``.
        self.attributes_before, self.children_before = before
        # Transformer-only mode (native pipelines) keeps step counters across runs: refresh before each.
        self.transformer_only_steps = transformer_only_steps

    def begin_run(self) -> None:
        super().begin_run()
        if self.transformer_only_steps is not None:
            import cache_dit

            cache_dit.refresh_context(self.pipeline.transformer, num_inference_steps=self.transformer_only_steps)

    def end_run(self) -> None:
        import cache_dit

        target = self.pipeline.transformer if self.transformer_only_steps is not None else self.pipeline
        stats = cache_dit.summary(target, logging=False)
        self.current["cached_steps"] = [list(s.cached_steps or []) for s in stats]
        self.current["cfg_cached_steps"] = [list(s.cfg_cached_steps or []) for s in stats]

    def remove(self) -> None:
        import cache_dit

        cache_dit.disable_cache(self.pipeline.transformer if self.transformer_only_steps is not None else self.pipeline)
        # disable_cache leaves what its patch functor set on the modules (seen with cache-dit 1.5.3 on Flux: an
        # instance-level forward, _is_patched and a diffusers hook registry on the transformer): the output is
        # unchanged, but a later enable_cache skips the patching and a diffusers cache hook applied later fails.
        # It also re-registers the transformer's block lists, so they come back last among its children: diffusers'
        # FirstBlockCache, applied later, takes the first listed block as the head (seen: the single-stream
        # blocks, which run after the double-stream ones) and crashes on the tail's missing head output.
        for key, module in _submodules(self.pipeline).items():
            before = self.attributes_before.get(key)
            if before is not None:
                for name in set(vars(module)) - before:
                    if not name.startswith("__"):
                        del module.__dict__[name]
            order = self.children_before.get(key)
            if order is not None and list(module._modules) != order:
                children = module._modules
                module._modules = {
                    **{name: children[name] for name in order if name in children},
                    **{name: child for name, child in children.items() if name not in order},
                }


class CacheDit(Feature[CacheDitConfig, _CacheDitHandle]):
    """Cache-DiT DBCache on the whole pipeline (``cache_dit.enable_cache``)."""

    name = "cache_dit"
    family = "cache"
    feature_class = FeatureClass.LOSSY
    stage = Stage.CACHE
    config_cls = CacheDitConfig
    lossy_limits = LOSSY_LIMITS
    roofline_exempt = SKIPS_WORK
    needs_steps = True  # the step mask and the transformer-only mode count steps
    description = "Cache-DiT DBCache (+ TaylorSeer, SCM)"

    def probe(self, device: str, options: CacheDitConfig, dtype: str | None = None) -> Support:
        import importlib.util

        if importlib.util.find_spec("cache_dit") is None:
            return Support.no("package cache-dit not installed: pip install cache-dit")
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: CacheDitConfig) -> Support:
        probed = self.probe(device, options)
        if not probed.supported:
            return probed
        if not getattr(getattr(pipeline, "transformer", None), "_cache_blocks", None) and not _cache_dit_supported(
            pipeline
        ):
            return Support.no(f"Cache-DiT has no adapter for {type(pipeline).__name__}")
        return Support.yes()

    def apply(self, pipeline: Any, options: CacheDitConfig, context: RunContext) -> _CacheDitHandle:
        import cache_dit
        from cache_dit import DBCacheConfig, TaylorSeerCalibratorConfig

        kwargs = options.model_dump(exclude={"taylorseer", "taylorseer_order", "steps_mask"})
        if options.steps_mask is not None:
            kwargs["steps_computation_mask"] = cache_dit.steps_mask(
                mask_policy=options.steps_mask, total_steps=context.steps
            )
        calibrator = (
            TaylorSeerCalibratorConfig(taylorseer_order=options.taylorseer_order) if options.taylorseer else None
        )
        before = module_state(pipeline)
        native_blocks = getattr(pipeline.transformer, "_cache_blocks", None)
        if native_blocks:  # a native transformer: Cache-DiT's block adapter in transformer-only mode
            from cache_dit import BlockAdapter, ForwardPattern

            adapter = BlockAdapter(
                transformer=pipeline.transformer,
                blocks=[getattr(pipeline.transformer, name) for name in native_blocks],
                forward_pattern=[ForwardPattern.Pattern_1] * len(native_blocks),
                check_forward_pattern=True,
            )
            config = DBCacheConfig(**kwargs, num_inference_steps=context.steps)
            cache_dit.enable_cache(adapter, cache_config=config, calibrator_config=calibrator)
            return _CacheDitHandle(pipeline, before, transformer_only_steps=context.steps)
        cache_dit.enable_cache(pipeline, cache_config=DBCacheConfig(**kwargs), calibrator_config=calibrator)
        return _CacheDitHandle(pipeline, before)

    def verify(self, handle: _CacheDitHandle) -> Verdict:
        # One entry per cached block group; they share the steps, so a run's count is the largest.
        per_run = [max((len(s) for s in run.get("cached_steps", [])), default=0) for run in handle.runs]
        evidence = {
            "cached_steps_per_run": [run.get("cached_steps") for run in handle.runs],
            "cfg_cached_steps_per_run": [run.get("cfg_cached_steps") for run in handle.runs],
        }
        return cached_steps_verdict(per_run, evidence)


def _submodules(pipeline: Any) -> dict[str, Any]:
    """Every module of every component, keyed by component and dotted name."""
    import torch

    return {
        f"{component}.{name}": module
        for component, root in pipeline.components.items()
        if isinstance(root, torch.nn.Module)
        for name, module in root.named_modules()
    }


def module_state(pipeline: Any) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Per module of every component: its instance attributes and its children's names, in order."""
    modules = _submodules(pipeline)
    return {key: set(vars(m)) for key, m in modules.items()}, {key: list(m._modules) for key, m in modules.items()}


def _cache_dit_supported(pipeline: Any) -> bool:
    import cache_dit

    _, prefixes = cache_dit.supported_pipelines()
    return any(type(pipeline).__name__.startswith(prefix) for prefix in prefixes)


# --- diffusers cache hooks ----------------------------------------------------------------------------


class _DiffusersHookFeature(Feature[ConfigT, WorkCounter]):
    """A diffusers cache hook enabled with ``transformer.enable_cache(config)``."""

    family = "cache"
    feature_class = FeatureClass.LOSSY
    stage = Stage.CACHE
    lossy_limits = LOSSY_LIMITS
    roofline_exempt = SKIPS_WORK
    global_state = ("attention_backends",)  # the work counter wraps diffusers' registered backends
    needs_diffusers_attention = False  # PAB and FasterCache hook diffusers' Attention modules themselves
    needs_current_timestep = False  # PAB and FasterCache schedule by the pipeline's current timestep

    def hook_config(self, pipeline: Any, options: ConfigT, context: RunContext) -> Any:
        raise NotImplementedError

    def check(self, pipeline: Any, device: str, options: ConfigT) -> Support:
        transformer = getattr(pipeline, "transformer", None)
        if transformer is None or not hasattr(transformer, "enable_cache"):
            return Support.no(f"pipeline {type(pipeline).__name__} has no transformer with enable_cache()")
        if self.needs_diffusers_attention and native_attention_layers(transformer):
            return Support.no(
                f"{self.name} hooks attach to diffusers Attention modules; {type(transformer).__name__} has its own "
                "attention layer"
            )
        if self.needs_current_timestep and not hasattr(type(pipeline), "current_timestep"):
            return Support.no(f"{type(pipeline).__name__} exposes no current_timestep for the {self.name} schedule")
        if not native_attention_layers(transformer) and not count_attention_modules(transformer):
            return Support.no(f"{type(transformer).__name__} does not dispatch attention through diffusers")
        return Support.yes()

    def apply(self, pipeline: Any, options: ConfigT, context: RunContext) -> WorkCounter:
        transformer = pipeline.transformer
        transformer.enable_cache(self.hook_config(pipeline, options, context))
        return WorkCounter(transformer, undo=transformer.disable_cache, device=context.device)

    def verify(self, handle: WorkCounter) -> Verdict:
        return verify_skipped_work(handle, self.name)


class FirstBlockCacheConfig(FeatureConfig):
    """Options of ``first_block_cache``."""

    threshold: float = Field(default=0.05, gt=0, description="Reuse when the first block changed less; higher: faster.")


class FirstBlockCache(_DiffusersHookFeature[FirstBlockCacheConfig]):
    name = "first_block_cache"
    config_cls = FirstBlockCacheConfig
    primary_option = "threshold"
    description = "diffusers FirstBlockCache"

    def hook_config(self, pipeline: Any, options: FirstBlockCacheConfig, context: RunContext) -> Any:
        from diffusers import FirstBlockCacheConfig as DiffusersFirstBlockCacheConfig

        return DiffusersFirstBlockCacheConfig(threshold=options.threshold)


class MagCacheConfig(FeatureConfig):
    """Options of ``mag_cache``; without ``mag_ratios`` the model's published ratios are used (Flux)."""

    threshold: float = Field(default=0.06, gt=0, description="Accumulated error allowed; higher: faster, lossier.")
    max_skip_steps: int = Field(default=3, ge=1, description="Consecutive skips allowed.")
    retention_ratio: float = Field(default=0.2, ge=0, le=1, description="Share of first steps always computed.")
    mag_ratios: list[float] | None = Field(default=None, description="Per-step magnitude ratios (calibrated).")


class MagCache(_DiffusersHookFeature[MagCacheConfig]):
    name = "mag_cache"
    config_cls = MagCacheConfig
    needs_steps = True  # diffusers' MagCache takes num_inference_steps
    description = "diffusers MagCache (magnitude-ratio skipping)"

    def check(self, pipeline: Any, device: str, options: MagCacheConfig) -> Support:
        support = super().check(pipeline, device, options)
        if (
            support.supported
            and options.mag_ratios is None
            and type(pipeline.transformer).__name__ not in ("FluxTransformer2DModel", "NativeFluxTransformer")
        ):
            return Support.no(
                f"MagCache ratios are published for Flux only (found {type(pipeline.transformer).__name__}); "
                "pass mag_ratios calibrated for this model"
            )
        return support

    def hook_config(self, pipeline: Any, options: MagCacheConfig, context: RunContext) -> Any:
        from diffusers import MagCacheConfig as DiffusersMagCacheConfig
        from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

        ratios = options.mag_ratios if options.mag_ratios is not None else FLUX_MAG_RATIOS
        return DiffusersMagCacheConfig(
            threshold=options.threshold,
            max_skip_steps=options.max_skip_steps,
            retention_ratio=options.retention_ratio,
            num_inference_steps=context.steps,
            mag_ratios=ratios,
        )


# Modules TaylorSeer caches, per transformer class, where diffusers' default patterns miss them: its
# defaults ("^blocks.*attn", ... with re.fullmatch) never match Wan's "blocks.N.attn1"/"blocks.N.attn2".
TAYLORSEER_IDENTIFIERS: dict[str, tuple[str, ...]] = {
    "WanTransformer3DModel": (r"^blocks\.\d+\.attn[12]$",),
}


class TaylorSeerCacheConfig(FeatureConfig):
    """Options of ``taylorseer_cache``."""

    cache_interval: int = Field(default=5, ge=1, description="Compute every N steps, predict between; more: faster.")
    disable_cache_before_step: int = Field(default=3, ge=0, description="Steps always computed first.")
    max_order: int = Field(default=1, ge=1, le=4, description="Taylor expansion order.")
    cache_identifiers: tuple[str, ...] | None = Field(
        default=None,
        description="Regexes (re.fullmatch) of the module names to cache; default: per model (Wan: its attn1/attn2 "
        "modules), else diffusers' own patterns.",
    )


def taylorseer_identifiers(transformer: Any, options: TaylorSeerCacheConfig) -> tuple[str, ...]:
    """The module-name patterns TaylorSeer hooks on this transformer: the option, the model's, or diffusers'."""
    if options.cache_identifiers is not None:
        return options.cache_identifiers
    if type(transformer).__name__ in TAYLORSEER_IDENTIFIERS:
        return TAYLORSEER_IDENTIFIERS[type(transformer).__name__]
    from diffusers.hooks.taylorseer_cache import _TRANSFORMER_BLOCK_IDENTIFIERS

    return tuple(_TRANSFORMER_BLOCK_IDENTIFIERS)


def _matching_modules(transformer: Any, patterns: tuple[str, ...]) -> list[str]:
    import re

    return [name for name, _ in transformer.named_modules() if any(re.fullmatch(p, name) for p in patterns)]


class TaylorSeerCache(_DiffusersHookFeature[TaylorSeerCacheConfig]):
    name = "taylorseer_cache"
    config_cls = TaylorSeerCacheConfig
    description = "diffusers TaylorSeer cache (feature forecasting)"

    def check(self, pipeline: Any, device: str, options: TaylorSeerCacheConfig) -> Support:
        support = super().check(pipeline, device, options)
        if not support.supported:
            return support
        transformer = pipeline.transformer
        patterns = taylorseer_identifiers(transformer, options)
        if not _matching_modules(transformer, patterns):
            attention = [n for n, m in transformer.named_modules() if hasattr(m, "processor")][:2]
            return Support.no(
                f"TaylorSeer cache_identifiers {list(patterns)} match no module of {type(transformer).__name__} "
                f"(its attention modules are named like {attention}); set cache_identifiers"
            )
        return support

    def apply(self, pipeline: Any, options: TaylorSeerCacheConfig, context: RunContext) -> WorkCounter:
        handle = super().apply(pipeline, options, context)
        handle.hooked = _matching_modules(pipeline.transformer, taylorseer_identifiers(pipeline.transformer, options))
        return handle

    def hook_config(self, pipeline: Any, options: TaylorSeerCacheConfig, context: RunContext) -> Any:
        import torch
        from diffusers import TaylorSeerCacheConfig as DiffusersTaylorSeerCacheConfig

        return DiffusersTaylorSeerCacheConfig(
            **options.model_dump(exclude={"cache_identifiers"}),
            cache_identifiers=list(taylorseer_identifiers(pipeline.transformer, options)),
            taylor_factors_dtype=torch.float32,
        )

    def verify(self, handle: WorkCounter) -> Verdict:
        verdict = verify_skipped_work(handle, self.name)
        verdict.evidence["hooked_modules"] = len(handle.hooked)
        return verdict


class PyramidAttentionBroadcastConfig(FeatureConfig):
    """Options of ``pyramid_attention_broadcast``."""

    spatial_attention_block_skip_range: int = Field(default=2, ge=2, description="Recompute every N steps.")
    spatial_attention_timestep_skip_range: tuple[int, int] = Field(
        default=(100, 800), description="Timesteps (0-1000) within which attention may be reused."
    )


class PyramidAttentionBroadcast(_DiffusersHookFeature[PyramidAttentionBroadcastConfig]):
    name = "pyramid_attention_broadcast"
    needs_diffusers_attention = True
    needs_current_timestep = True
    config_cls = PyramidAttentionBroadcastConfig
    description = "diffusers Pyramid Attention Broadcast"

    def hook_config(self, pipeline: Any, options: PyramidAttentionBroadcastConfig, context: RunContext) -> Any:
        from diffusers import PyramidAttentionBroadcastConfig as DiffusersPyramidAttentionBroadcastConfig

        return DiffusersPyramidAttentionBroadcastConfig(
            **options.model_dump(), current_timestep_callback=lambda: pipeline.current_timestep
        )


# Transformers that take spatial (video) latents, which FasterCache's frequency filtering needs.
FASTER_CACHE_LAYOUTS = ("Wan", "CogVideoX", "HunyuanVideo", "Mochi", "Latte", "LTX", "Allegro")


class FasterCacheConfig(FeatureConfig):
    """Options of ``faster_cache``."""

    spatial_attention_block_skip_range: int = Field(default=2, ge=2, description="Recompute every N steps.")
    spatial_attention_timestep_skip_range: tuple[int, int] = Field(default=(-1, 681))
    unconditional_batch_skip_range: int = Field(default=5, ge=1, description="Reuse the CFG branch every N steps.")
    is_guidance_distilled: bool = Field(default=False, description="True for guidance-distilled models (Flux-dev).")


class FasterCache(_DiffusersHookFeature[FasterCacheConfig]):
    name = "faster_cache"
    needs_diffusers_attention = True
    needs_current_timestep = True
    config_cls = FasterCacheConfig
    description = "diffusers FasterCache"

    def hook_config(self, pipeline: Any, options: FasterCacheConfig, context: RunContext) -> Any:
        from diffusers import FasterCacheConfig as DiffusersFasterCacheConfig

        return DiffusersFasterCacheConfig(
            **options.model_dump(),
            current_timestep_callback=lambda: pipeline.current_timestep,
            attention_weight_callback=lambda _: 0.5,
            tensor_format="BFCHW",  # Wan-style video transformers take (B, C, F, H, W) but filter per frame
        )

    def check(self, pipeline: Any, device: str, options: FasterCacheConfig) -> Support:
        support = super().check(pipeline, device, options)
        if not support.supported:
            return support
        name = type(pipeline.transformer).__name__
        if not name.startswith(FASTER_CACHE_LAYOUTS):
            # Seen on Flux and Qwen-Image: "Tensors must have same number of dimensions: got 4 and 3".
            return Support.no(
                f"FasterCache's frequency filtering expects spatial latents (B, C, F, H, W); {name} takes packed "
                "token sequences"
            )
        if runs_cfg_as_separate_calls(pipeline):
            # Seen on Wan: the hook splits every batch in halves as (uncond, cond); with two videos per prompt
            # it reused one video's features for the other (SSIM 0.87), with one it failed. Its state is not
            # kept per CFG branch either, so is_guidance_distilled would mix the two calls' attention.
            return Support.no(
                f"FasterCache takes each transformer batch as [uncond, cond] halves; {type(pipeline).__name__} runs "
                "the unconditional branch as a separate transformer call, so the halves are two different samples"
            )
        return support


def runs_cfg_as_separate_calls(pipeline: Any) -> bool:
    """Whether the pipeline calls the transformer once per CFG branch (diffusers marks those calls with
    ``cache_context("uncond")``) instead of batching [uncond, cond] in one call."""
    import inspect
    import re

    try:
        source = inspect.getsource(type(pipeline).__call__)
    except (OSError, TypeError):
        return False
    return re.search(r"cache_context\(\s*[\"']uncond[\"']", source) is not None
