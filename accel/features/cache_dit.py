"""The ``cache_dit`` feature: Cache-DiT's DBCache on the whole pipeline (``cache_dit.enable_cache``).

Fn/Bn compute blocks, residual threshold, warmup and caps, with the TaylorSeer calibrator and SCM step masks
as options; a native transformer that names its block lists (``_cache_blocks``) gets Cache-DiT's block
adapter in transformer-only mode. Pipeline mode reaches every denoiser Cache-DiT's adapter for the pipeline
names (Wan 2.2's ``transformer`` and ``transformer_2``).

Evidence: ``cache_dit.summary`` cached steps of every timed run (both CFG branches where the model runs them
separately), judged against the block work the harness counted per denoiser (``accel.features.work``): cached
steps that skipped no work (a block list holding only the ``Fn_compute_blocks`` it always computes) are
"engaged, no effect", never supported. Removing it also takes away what ``disable_cache`` leaves on the modules
(``module_state``), so a cache applied later in the same process starts clean.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    LOSSY_LIMITS,
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
from accel.features.cache import SKIPS_WORK, skipped_work_verdict
from accel.features.work import BlockWork


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
    calibration: str | None = Field(
        default=None,
        description="A calibration file (omni-accel calibrate): a residual_diff_threshold outside its observed "
        "residual diffs is refused as inert before anything is timed.",
    )


def _diff_values(diffs: dict[str, Any] | None) -> list[float]:
    """The residual differences of one ``cache_dit.summary`` stats entry (a value or a list per step)."""
    values: list[float] = []
    for value in (diffs or {}).values():
        values += [float(v) for v in value] if isinstance(value, list | tuple) else [float(value)]
    return values


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
        # Transformer-only mode (native pipelines) keeps step counters across runs: refreshed before each denoising
        # loop (a native pipeline's denoise hook) with the call's CFG: ``refresh_for``.
        self.transformer_only_steps = transformer_only_steps
        self.config_kwargs: dict[str, Any] = {}
        self.calibrator: Any = None
        self.work: BlockWork | None = None  # set by apply, once the cache is in place

    def begin_run(self) -> None:
        super().begin_run()
        if self.work is not None:
            self.work.begin()
        if self.transformer_only_steps is not None:  # a native pipeline without denoise hooks still gets its steps
            import cache_dit

            cache_dit.refresh_context(self.pipeline.transformer, num_inference_steps=self.transformer_only_steps)

    def refresh_for(self, request: Any) -> None:
        """A fresh cache context for this call of a native pipeline: its steps, and Cache-DiT's separate CFG
        when the call runs true CFG with both branches here (the conditional call first, then the
        unconditional one, each with its own cached residuals; one context for both mixed them, and a negative
        prompt of another length crashed the cached step)."""
        import copy

        import cache_dit
        from cache_dit import DBCacheConfig

        from accel.native.contract import runs_true_cfg

        separate = runs_true_cfg(request) and getattr(self.pipeline.cfg_branches, "local_branches", 2) == 2
        self.current["separate_cfg"] = separate
        config = DBCacheConfig(
            **self.config_kwargs, num_inference_steps=self.transformer_only_steps, enable_separate_cfg=separate
        )
        refresh: dict[str, Any] = {"cache_config": config}
        if self.calibrator is not None:
            refresh["calibrator_config"] = copy.deepcopy(self.calibrator)
        cache_dit.refresh_context(self.pipeline.transformer, **refresh)

    def end_run(self) -> None:
        import cache_dit

        if self.work is not None:
            self.current["work"] = self.work.end()

        target = self.pipeline.transformer if self.transformer_only_steps is not None else self.pipeline
        stats = cache_dit.summary(target, logging=False)
        self.current["cached_steps"] = [list(s.cached_steps or []) for s in stats]
        self.current["cfg_cached_steps"] = [list(s.cfg_cached_steps or []) for s in stats]
        # The signal its threshold is compared with, per denoiser (both CFG branches): what calibration reads.
        self.current["residual_diffs"] = [
            _diff_values(s.residual_diffs) + _diff_values(s.cfg_residual_diffs) for s in stats
        ]

    def remove(self) -> None:
        import cache_dit

        if self.work is not None:
            self.work.remove()
        if self.refresh_for in getattr(self.pipeline, "denoise_hooks", []):
            self.pipeline.denoise_hooks.remove(self.refresh_for)
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
    reach = Reach.EVERY_DENOISER
    denoiser_evidence = ("skipped_work_per_run", "block work skipped (share)")
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
            return Support.no("package cache-dit not installed: pip install cache-dit", Owner.DEVICE)
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: CacheDitConfig) -> Support:
        probed = self.probe(device, options)
        if not probed.supported:
            return probed
        if not getattr(getattr(pipeline, "transformer", None), "_cache_blocks", None) and not _cache_dit_supported(
            pipeline
        ):
            return Support.no(f"Cache-DiT has no adapter for {type(pipeline).__name__}", Owner.LIBRARY)
        if options.calibration is not None:
            from accel.features.calibration import calibration_refusal

            refusal = calibration_refusal(self.name, pipeline, options)
            if refusal is not None:
                return refusal
        return Support.yes()

    def apply(self, pipeline: Any, options: CacheDitConfig, context: RunContext) -> _CacheDitHandle:
        import cache_dit
        from cache_dit import DBCacheConfig, TaylorSeerCalibratorConfig

        kwargs = options.model_dump(exclude={"taylorseer", "taylorseer_order", "steps_mask", "calibration"})
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
            handle = _CacheDitHandle(pipeline, before, transformer_only_steps=context.steps)
            handle.config_kwargs, handle.calibrator = kwargs, calibrator
            pipeline.denoise_hooks.append(handle.refresh_for)
        else:
            cache_dit.enable_cache(pipeline, cache_config=DBCacheConfig(**kwargs), calibrator_config=calibrator)
            handle = _CacheDitHandle(pipeline, before)
        handle.work = BlockWork(denoisers(pipeline), context.device)
        return handle

    def verify(self, handle: _CacheDitHandle) -> Verdict:
        # One entry per cached block group; they share the steps, so a run's count is the largest.
        per_run = [max((len(s) for s in run.get("cached_steps", [])), default=0) for run in handle.runs]
        evidence = {
            "cached_steps_per_run": [run.get("cached_steps") for run in handle.runs],
            "cfg_cached_steps_per_run": [run.get("cfg_cached_steps") for run in handle.runs],
        }
        if any("separate_cfg" in run for run in handle.runs):  # a native pipeline's calls: true CFG cached apart
            evidence["separate_cfg_per_run"] = [run.get("separate_cfg") for run in handle.runs]
        verdict = skipped_work_verdict(handle.runs, self.name, cached=per_run)
        verdict.evidence.update(evidence)
        return verdict


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
