"""diffusers' own cache hooks, where the model supports them (``transformer.enable_cache``).

``first_block_cache``, ``mag_cache`` and ``taylorseer_cache`` here (``pyramid_attention_broadcast`` and
``faster_cache``, scheduled by the timestep, in ``timestep_caches.py`` on the same base): each builds diffusers'
hook config from its options and enables it on every denoiser through the model's own cache context
(``enable_cache``: Wan 2.2's ``transformer`` and ``transformer_2`` each get their own), and a ``WorkCounter``
counts the block work each run computed per denoiser; evidence is the share it skipped (``accel.features.cache``).
A model whose blocks show no attention or feed-forward submodule is refused as the harness's gap
("harness: ..."), not the model's.

Who refuses (issue 40): a denoiser without ``enable_cache`` is the library's refusal for the hooks that keep
their state in a cache context only CacheMixin sets (First Block Cache, MagCache, TaylorSeer: "No cache context
is set"); PAB and FasterCache, whose ``diffusers.hooks.apply_*`` functions hook any module (``library_apply``),
run on it through that function. MagCache without ratios for the family "needs calibration": a data gap of the
harness (diffusers calibrates any model), not the model's.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from accel.errors import ConfigError
from accel.features.base import (
    LOSSY_LIMITS,
    ConfigT,
    Feature,
    FeatureClass,
    FeatureConfig,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    denoisers,
)
from accel.features.cache import (
    SKIPS_WORK,
    WorkCounter,
    skipped_work_verdict,
)
from accel.features.dispatch import native_attention_layers
from accel.features.work import work_units


class _DiffusersHookFeature(Feature[ConfigT, WorkCounter]):
    """A diffusers cache hook enabled with ``transformer.enable_cache(config)``."""

    family = "cache"
    feature_class = FeatureClass.LOSSY
    stage = Stage.CACHE
    lossy_limits = LOSSY_LIMITS
    roofline_exempt = SKIPS_WORK
    denoiser_evidence = ("skipped_work_per_run", "block work skipped (share)")
    global_state = ("attention_backends",)  # the work counter wraps diffusers' registered backends
    needs_diffusers_attention = False  # PAB and FasterCache hook diffusers' Attention modules themselves
    needs_current_timestep = False  # PAB and FasterCache schedule by the pipeline's current timestep
    # diffusers' function that applies the hook to any module (no cache context needed: PAB, FasterCache); where
    # set, a denoiser without enable_cache() gets the hook through it. Empty: the hook keeps its state in a cache
    # context that only CacheMixin sets ("No cache context is set"), so the library refuses such a denoiser.
    library_apply = ""

    def hook_config(self, pipeline: Any, model: Any, options: ConfigT, context: RunContext) -> Any:
        raise NotImplementedError

    def check(self, pipeline: Any, device: str, options: ConfigT) -> Support:
        models = denoisers(pipeline)
        lacking = [name for name, model in models.items() if not hasattr(model, "enable_cache")]
        if not models or (lacking and not self.library_apply):
            found = ", ".join(f"{n} ({type(m).__name__})" for n, m in models.items() if n in lacking) or "none"
            return Support.no(
                f"diffusers' cache hooks need a denoiser with enable_cache() (CacheMixin); lacking: {found}",
                Owner.LIBRARY,
            )
        for name, model in models.items():
            support = self.check_model(pipeline, model, options)
            if not support.supported:
                return support
            if not work_units(model):
                return Support.no(
                    f"harness: cannot observe the work {self.name} skips on {name} ({type(model).__name__}): no "
                    "attention or feed-forward submodule inside its block lists",
                    Owner.HARNESS,
                )
        if getattr(options, "calibration", None) is not None:
            from accel.features.calibration import calibration_refusal

            refusal = calibration_refusal(self.name, pipeline, options)
            if refusal is not None:
                return refusal
        return Support.yes()

    def check_model(self, pipeline: Any, model: Any, options: ConfigT) -> Support:
        """Whether the hook can run on one denoiser of the pipeline (default: the checks every hook shares)."""
        if self.needs_diffusers_attention and native_attention_layers(model):
            return Support.no(
                f"{self.name} hooks attach to diffusers Attention modules; {type(model).__name__} has its own "
                "attention layer",
                Owner.HARNESS,
            )
        if self.needs_current_timestep:
            from accel.features.timestep_source import timestep_refusal

            why = timestep_refusal(pipeline)
            if why is not None:
                return Support.no(
                    f"not supported by omni-accel yet: {self.name} schedules by the current timestep; {why} "
                    "(diffusers' hook takes any current_timestep_callback)",
                    Owner.HARNESS,
                )
        return Support.yes()

    def apply(self, pipeline: Any, options: ConfigT, context: RunContext) -> WorkCounter:
        models = denoisers(pipeline)
        for model in models.values():  # each model its own hooks and cache context (a config per model)
            model.enable_cache(self.hook_config(pipeline, model, options, context))

        def undo() -> None:
            for model in models.values():
                model.disable_cache()

        return WorkCounter(models, undo=undo, device=context.device)

    def verify(self, handle: WorkCounter) -> Verdict:
        return skipped_work_verdict(handle.runs, self.name)


class FirstBlockCacheConfig(FeatureConfig):
    """Options of ``first_block_cache``."""

    threshold: float = Field(default=0.05, gt=0, description="Reuse when the first block changed less; higher: faster.")
    calibration: str | None = Field(
        default=None,
        description="A calibration file (omni-accel calibrate): a threshold outside its observed range is refused "
        "as inert before anything is timed.",
    )


class FirstBlockCache(_DiffusersHookFeature[FirstBlockCacheConfig]):
    name = "first_block_cache"
    reach = Reach.EVERY_DENOISER
    config_cls = FirstBlockCacheConfig
    primary_option = "threshold"
    description = "diffusers FirstBlockCache"

    def hook_config(self, pipeline: Any, model: Any, options: FirstBlockCacheConfig, context: RunContext) -> Any:
        from diffusers import FirstBlockCacheConfig as DiffusersFirstBlockCacheConfig

        return DiffusersFirstBlockCacheConfig(threshold=options.threshold)

    def apply(self, pipeline: Any, options: FirstBlockCacheConfig, context: RunContext) -> WorkCounter:
        from accel.features.parallel import context_parallel_group

        handle = super().apply(pipeline, options, context)
        for model in denoisers(pipeline).values():
            group = context_parallel_group(model)
            if group is not None:
                agree_across_ranks(model, group)
        return handle


def agree_across_ranks(transformer: Any, group: Any) -> int:
    """Under context parallelism, make every First Block Cache head hook of ``transformer`` decide from the whole
    sequence, as one rank would, instead of from this rank's share: the residual's change is summed over the
    ranks (one all-reduce per step) before it is compared with the threshold. Without it each rank judged its own
    share, the ranks could disagree, and their collectives stopped matching (measured on native Qwen-Image over
    two ranks: a gloo allgather of 8 tokens against 99). Returns the number of hooks changed.

    The decision is diffusers' ``FBCHeadBlockHook._should_compute_remaining_blocks`` (mean |residual - previous|
    / mean |previous| > threshold) with the means taken over every rank's tokens: the element counts cancel, so
    it is a ratio of sums."""
    import torch
    import torch.distributed._functional_collectives as funcol
    from diffusers.hooks.first_block_cache import FBCHeadBlockHook

    changed = 0
    for module in transformer.modules():
        registry = getattr(module, "_diffusers_hook", None)
        for hook in registry.hooks.values() if registry is not None else ():
            if not isinstance(hook, FBCHeadBlockHook):
                continue

            def decide(residual: torch.Tensor, hook: Any = hook) -> bool:
                previous = hook.state_manager.get_state().head_block_residual
                if previous is None:
                    return True
                sums = torch.stack([(residual - previous).abs().sum(), previous.abs().sum()]).double()
                sums = funcol.all_reduce(sums, "sum", group)
                if isinstance(sums, funcol.AsyncCollectiveTensor):
                    sums = sums.wait()
                return bool((sums[0] / sums[1]).item() > hook.threshold)

            hook._should_compute_remaining_blocks = decide
            changed += 1
    return changed


class MagCacheConfig(FeatureConfig):
    """Options of ``mag_cache``; without ``mag_ratios`` the model's published ratios are used (Flux)."""

    threshold: float = Field(default=0.06, gt=0, description="Accumulated error allowed; higher: faster, lossier.")
    max_skip_steps: int = Field(default=3, ge=1, description="Consecutive skips allowed.")
    retention_ratio: float = Field(default=0.2, ge=0, le=1, description="Share of first steps always computed.")
    mag_ratios: list[float] | None = Field(default=None, description="Per-step magnitude ratios (calibrated).")
    calibration: str | None = Field(
        default=None,
        description="A calibration file (omni-accel calibrate): its ratios per denoiser (mag_ratios wins); a "
        "threshold that would skip no step on them is refused as inert before anything is timed.",
    )


def _calibrated_ratios(pipeline: Any, model: Any, options: MagCacheConfig) -> tuple[list[float], int] | None:
    """The calibration's ratios for ``model`` and the denoiser's steps per run they were taken at (None: none)."""
    if options.calibration is None:
        return None
    from accel.calibration.store import load_calibration

    name = next(n for n, m in denoisers(pipeline).items() if m is model)
    section = load_calibration(options.calibration).denoisers.get(name)
    if section is None or section.mag_cache is None:
        return None
    return list(section.mag_cache.mag_ratios), section.mag_cache.steps


class MagCache(_DiffusersHookFeature[MagCacheConfig]):
    name = "mag_cache"
    reach = Reach.EVERY_DENOISER
    config_cls = MagCacheConfig
    needs_steps = True  # diffusers' MagCache takes num_inference_steps
    description = "diffusers MagCache (magnitude-ratio skipping)"

    def check_model(self, pipeline: Any, model: Any, options: MagCacheConfig) -> Support:
        support = super().check_model(pipeline, model, options)
        if not support.supported or options.mag_ratios is not None:
            return support
        if options.calibration is not None:
            if _calibrated_ratios(pipeline, model, options) is None:
                return Support.no(
                    f"calibration {options.calibration} holds no MagCache ratios for {type(model).__name__}: "
                    "recalibrate this model with omni-accel calibrate (a calibration data gap, not the model's)",
                    Owner.HARNESS,
                )
            return support
        if type(model).__name__ not in ("FluxTransformer2DModel", "NativeFluxTransformer"):
            return Support.no(
                f"needs calibration: omni-accel calibrate PROFILE --model MODEL, then calibration: PATH (MagCache "
                f"ratios are published for Flux only, found {type(model).__name__}); or pass mag_ratios",
                Owner.HARNESS,  # diffusers' MagCacheConfig(calibrate=True) runs on any model: a data gap
            )
        return support

    def hook_config(self, pipeline: Any, model: Any, options: MagCacheConfig, context: RunContext) -> Any:
        from diffusers import MagCacheConfig as DiffusersMagCacheConfig
        from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

        ratios = options.mag_ratios if options.mag_ratios is not None else FLUX_MAG_RATIOS
        steps = context.steps
        calibrated = _calibrated_ratios(pipeline, model, options) if options.mag_ratios is None else None
        if calibrated is not None:
            ratios, own_steps = calibrated
            if len(denoisers(pipeline)) > 1:  # each denoiser counts its own steps (its state resets after them)
                from accel.calibration.store import load_calibration

                at = load_calibration(str(options.calibration)).steps
                if at != context.steps:
                    raise ConfigError(
                        f"mag_cache: calibration {options.calibration} was taken at {at} steps, this run has "
                        f"{context.steps}; a pipeline with two denoisers splits the steps between them: calibrate "
                        "at the steps you run"
                    )
                steps = own_steps
        return DiffusersMagCacheConfig(
            threshold=options.threshold,
            max_skip_steps=options.max_skip_steps,
            retention_ratio=options.retention_ratio,
            num_inference_steps=steps,
            mag_ratios=ratios,
        )


class TaylorSeerCacheConfig(FeatureConfig):
    """Options of ``taylorseer_cache``."""

    cache_interval: int = Field(default=5, ge=1, description="Compute every N steps, predict between; more: faster.")
    disable_cache_before_step: int = Field(default=3, ge=0, description="Steps always computed first.")
    max_order: int = Field(default=1, ge=1, le=4, description="Taylor expansion order.")
    cache_identifiers: tuple[str, ...] | None = Field(
        default=None,
        description="Regexes (re.fullmatch) of the module names to cache; default: derived from the model's module "
        "tree (every attention module inside its block lists, e.g. Wan's blocks.N.attn1 and blocks.N.attn2).",
    )


def taylorseer_identifiers(model: Any, options: TaylorSeerCacheConfig) -> tuple[str, ...]:
    """The module-name patterns TaylorSeer hooks on this model: the option, else derived from its module tree.

    Derived: one pattern per attention module position inside a block list, the block index generalised
    (``blocks.3.attn1`` gives ``blocks\\.\\d+\\.attn1``). diffusers' own defaults ("^blocks.*attn", ... with
    re.fullmatch) match the blocks' names on some models and nothing on others (Wan's ``blocks.N.attn1``)."""
    import re

    from diffusers.hooks._common import _ATTENTION_CLASSES

    if options.cache_identifiers is not None:
        return options.cache_identifiers
    patterns: dict[str, None] = {}
    for name, unit in work_units(model).items():
        if isinstance(unit, _ATTENTION_CLASSES):
            patterns[re.sub(r"\\\.\d+\\\.", r"\\.\\d+\\.", re.escape(name))] = None
    return tuple(patterns)


def _matching_modules(transformer: Any, patterns: tuple[str, ...]) -> list[str]:
    import re

    return [name for name, _ in transformer.named_modules() if any(re.fullmatch(p, name) for p in patterns)]


class TaylorSeerCache(_DiffusersHookFeature[TaylorSeerCacheConfig]):
    name = "taylorseer_cache"
    reach = Reach.EVERY_DENOISER
    config_cls = TaylorSeerCacheConfig
    description = "diffusers TaylorSeer cache (feature forecasting)"

    def check_model(self, pipeline: Any, model: Any, options: TaylorSeerCacheConfig) -> Support:
        support = super().check_model(pipeline, model, options)
        if not support.supported:
            return support
        transformer = model
        patterns = taylorseer_identifiers(transformer, options)
        if not _matching_modules(transformer, patterns):
            attention = [n for n, m in transformer.named_modules() if hasattr(m, "processor")][:2]
            return Support.no(
                f"TaylorSeer cache_identifiers {list(patterns)} match no module of {type(transformer).__name__} "
                f"(its attention modules are named like {attention}); set cache_identifiers",
                Owner.HARNESS,
            )
        return support

    def apply(self, pipeline: Any, options: TaylorSeerCacheConfig, context: RunContext) -> WorkCounter:
        handle = super().apply(pipeline, options, context)
        handle.hooked = [
            f"{component}.{name}"
            for component, model in denoisers(pipeline).items()
            for name in _matching_modules(model, taylorseer_identifiers(model, options))
        ]
        return handle

    def hook_config(self, pipeline: Any, model: Any, options: TaylorSeerCacheConfig, context: RunContext) -> Any:
        import torch
        from diffusers import TaylorSeerCacheConfig as DiffusersTaylorSeerCacheConfig

        return DiffusersTaylorSeerCacheConfig(
            **options.model_dump(exclude={"cache_identifiers"}),
            cache_identifiers=list(taylorseer_identifiers(model, options)),
            taylor_factors_dtype=torch.float32,
        )

    def verify(self, handle: WorkCounter) -> Verdict:
        verdict = skipped_work_verdict(handle.runs, self.name)
        verdict.evidence["hooked_modules"] = len(handle.hooked)
        return verdict
