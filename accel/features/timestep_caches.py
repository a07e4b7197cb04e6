"""diffusers' timestep-scheduled attention caches: ``pyramid_attention_broadcast`` and ``faster_cache``.

Both reuse attention outputs inside a timestep range, read through a ``current_timestep_callback``
(``accel.features.timestep_source``: the pipeline's ``current_timestep``, else the scheduler's). On a denoiser
with diffusers' CacheMixin they are enabled through its ``enable_cache``; on any other (SD3, PixArt, the UNets,
Sana, ...) through diffusers' own ``apply_pyramid_attention_broadcast(module, config)`` /
``apply_faster_cache(module, config)``, which hook any module, with the hooks' state reset at each generation.
Evidence is the block work skipped per denoiser (``accel.features.cache``), with the timesteps each denoiser's
hooks saw; a denoiser that skipped nothing because every step it ran lies outside its range says so (Wan 2.2's
high-noise ``transformer`` runs at t >= 875, outside PAB's default (100, 800)): ``timestep_skip_ranges`` gives a
denoiser its own range.

FasterCache's frequency filtering takes ``tensor_format`` BCFHW, BFCHW or BCHW (diffusers refuses any other;
its TODO: "Support BSC for LTX Video"): ``FASTER_CACHE_FORMATS`` holds the format of each transformer's latents
as measured on the zoo (the ``hidden_states`` each is called with); a layout the library cannot take is its
refusal, one not measured yet is the harness's.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from accel.features.base import ConfigT, FeatureConfig, Owner, Reach, RunContext, Support, Verdict, denoisers
from accel.features.cache import WorkCounter, runs_cfg_as_separate_calls, skipped_work_verdict
from accel.features.diffusers_cache import _DiffusersHookFeature
from accel.features.timestep_source import DenoiserTimestep


class _TimestepHookFeature(_DiffusersHookFeature[ConfigT]):
    """A diffusers hook scheduled by the current timestep: ``enable_cache`` where the denoiser has CacheMixin,
    else diffusers' ``library_apply`` function on the module itself."""

    needs_diffusers_attention = True
    needs_current_timestep = True
    hook_names: tuple[str, ...] = ()  # diffusers' registry names of the hooks (removed on undo)
    range_hint = ""  # what to set where a denoiser ran outside its range only

    def timestep_config(self, name: str, model: Any, options: ConfigT, current_timestep: Any) -> Any:
        """diffusers' config for the denoiser ``name`` with the given ``current_timestep_callback``."""
        raise NotImplementedError

    def counts_rows(self, options: ConfigT) -> bool:
        """Whether a call may compute part of its batch (work counted in rows, ``accel.features.work``)."""
        return False

    def window(self, name: str, options: ConfigT) -> tuple[int, int]:
        """The timestep range inside which ``name``'s hooks may reuse attention."""
        return tuple(options.spatial_attention_timestep_skip_range)  # type: ignore[attr-defined]

    def apply(self, pipeline: Any, options: ConfigT, context: RunContext) -> WorkCounter:
        import diffusers.hooks
        from diffusers.hooks import HookRegistry

        models = denoisers(pipeline)
        direct = {name: model for name, model in models.items() if not hasattr(model, "enable_cache")}
        timestep = DenoiserTimestep(pipeline, reset=direct)
        for name, model in models.items():  # each model its own hooks (and cache context, with CacheMixin)
            config = self.timestep_config(name, model, options, timestep.callback(name))
            if name in direct:
                getattr(diffusers.hooks, self.library_apply)(model, config)
            else:
                model.enable_cache(config)

        def undo() -> None:
            timestep.remove()
            for name, model in models.items():
                if name not in direct:
                    model.disable_cache()
                    continue
                registry = HookRegistry.check_if_exists_or_initialize(model)
                for hook in self.hook_names:
                    registry.remove_hook(hook, recurse=True)
                registry.invalidate_child_registries_cache()

        handle = WorkCounter(models, undo=undo, device=context.device, rows=self.counts_rows(options))
        handle.schedule = (timestep, {name: self.window(name, options) for name in models})
        return handle

    def verify(self, handle: WorkCounter) -> Verdict:
        verdict = skipped_work_verdict(handle.runs, self.name)
        note = shared_across_cfg_branches(handle, verdict)
        if note:
            verdict.evidence["caveat"] = note
        if handle.schedule is None:
            return verdict
        timestep, windows = handle.schedule
        verdict.evidence["timesteps_by_denoiser"] = timestep.span()
        verdict.evidence["timestep_skip_range_by_denoiser"] = {n: list(w) for n, w in windows.items()}
        outside = [why for name, window in windows.items() if (why := timestep.outside(name, window))]
        if outside and not verdict.engaged:
            verdict.summary += f"; {'; '.join(outside)}: {self.range_hint}"
        return verdict


class PyramidAttentionBroadcastConfig(FeatureConfig):
    """Options of ``pyramid_attention_broadcast``."""

    spatial_attention_block_skip_range: int = Field(default=2, ge=2, description="Recompute every N steps.")
    spatial_attention_timestep_skip_range: tuple[int, int] = Field(
        default=(100, 800), description="Timesteps (0-1000) strictly within which attention may be reused."
    )
    timestep_skip_ranges: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="Per denoiser (transformer, transformer_2, unet), a spatial_attention_timestep_skip_range of "
        "its own: Wan 2.2's high-noise transformer runs at t >= 875 (boundary_ratio 0.875), outside the default "
        "(100, 800), e.g. {transformer: [100, 1001]}.",
    )

    @field_validator("timestep_skip_ranges", mode="before")
    @classmethod
    def _ranges_as_tuples(cls, value: Any) -> Any:
        """YAML has no tuples: each range may be given as a list."""
        if isinstance(value, dict):
            return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
        return value


class PyramidAttentionBroadcast(_TimestepHookFeature[PyramidAttentionBroadcastConfig]):
    library_apply = "apply_pyramid_attention_broadcast"
    hook_names = ("pyramid_attention_broadcast",)
    range_hint = (
        "give it a range that covers its steps (pyramid_attention_broadcast: {timestep_skip_ranges: "
        "{DENOISER: [LOW, HIGH]}})"
    )
    name = "pyramid_attention_broadcast"
    reach = Reach.EVERY_DENOISER
    config_cls = PyramidAttentionBroadcastConfig
    description = "diffusers Pyramid Attention Broadcast"

    def window(self, name: str, options: PyramidAttentionBroadcastConfig) -> tuple[int, int]:
        return options.timestep_skip_ranges.get(name, options.spatial_attention_timestep_skip_range)

    def apply(self, pipeline: Any, options: PyramidAttentionBroadcastConfig, context: RunContext) -> WorkCounter:
        handle = super().apply(pipeline, options, context)
        if runs_cfg_as_separate_calls(pipeline):
            handle.branch_sharing = (type(pipeline).__name__, context.steps, options.spatial_attention_block_skip_range)
        return handle

    def check_model(self, pipeline: Any, model: Any, options: PyramidAttentionBroadcastConfig) -> Support:
        unknown = sorted(set(options.timestep_skip_ranges) - set(denoisers(pipeline)))
        if unknown:
            return Support.no(
                f"timestep_skip_ranges names {unknown}, which {type(pipeline).__name__} has no denoiser called; its "
                f"denoisers: {list(denoisers(pipeline))}",
                Owner.MODEL,
            )
        return super().check_model(pipeline, model, options)

    def timestep_config(
        self, name: str, model: Any, options: PyramidAttentionBroadcastConfig, current_timestep: Any
    ) -> Any:
        from diffusers import PyramidAttentionBroadcastConfig as DiffusersPyramidAttentionBroadcastConfig

        return DiffusersPyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=options.spatial_attention_block_skip_range,
            spatial_attention_timestep_skip_range=self.window(name, options),
            current_timestep_callback=current_timestep,
        )


def shared_across_cfg_branches(handle: WorkCounter, verdict: Verdict) -> str | None:
    """What a reader of an engaged PAB cell on a pipeline that calls its denoiser once per CFG branch must know.

    diffusers' PAB keeps one state per attention module (``PyramidAttentionBroadcastState``), not one per
    ``cache_context`` as FirstBlockCache's ``StateManager`` does: where the unconditional branch is a call of its
    own, the module's calls alternate between the branches and its count of calls decides which compute: with an
    even ``block_skip_range`` (the default 2) only the branch called first in each step ever computes inside the
    range and the other branch's calls always take its attention (never computing their own: CFG's difference is
    lost in those layers); with an odd one a reused call takes whichever branch computed last. Said only where the
    runs show more denoiser calls than steps (the unconditional calls were made)."""
    if handle.branch_sharing is None or not verdict.engaged:
        return None
    pipeline, steps, skip_range = handle.branch_sharing
    calls = [sum(counts.values()) for counts in verdict.evidence.get("denoiser_calls_per_run", [])]
    if not calls or max(calls) <= steps:
        return None
    shared = (
        f"{pipeline} calls the denoiser once per CFG branch and diffusers' PAB keeps one attention cache per module, "
        "not one per branch (no cache_context), counting the two branches' calls as one sequence: "
    )
    if skip_range is None:  # FasterCache, guidance-distilled: its block state is one per module as PAB's
        return (
            f"{pipeline} calls the denoiser once per CFG branch and diffusers' FasterCache keeps one attention state "
            "per module, not one per branch (no cache_context): a reused call takes the attention the other "
            "branch's call cached"
        )
    if skip_range % 2 == 0:
        return shared + (
            f"with spatial_attention_block_skip_range {skip_range} (even), inside the timestep range only one "
            "branch's calls compute that attention and the other branch's take it instead of computing their own "
            "(both branches' attention there is the one branch's)"
        )
    return shared + "on a reused step a branch takes the attention whichever branch computed last"


# The tensor_format of each transformer's latents, as measured on the zoo (the hidden_states it is called with),
# by class-name prefix ("Native" dropped). diffusers' FasterCache takes BCFHW, BFCHW and BCHW only.
FASTER_CACHE_FORMATS = {
    # 5-D video latents: filtered per frame. CogVideoX takes (B, F, C, H, W); the others (B, C, F, H, W), whose
    # (B, C) flattening filters each channel of each frame alike.
    **dict.fromkeys(("Wan", "SkyReelsV2", "CogVideoX", "HunyuanVideo", "Mochi", "Latte", "Allegro"), "BFCHW"),
    # 4-D image latents (B, C, H, W).
    **dict.fromkeys(
        (
            "SD3",
            "PixArt",
            "UNet2DCondition",
            "Sana",
            "AuraFlow",
            "HiDreamImage",
            "CogView3Plus",
            "CogView4",
            "Lumina2",
            "HunyuanImage",
            "HunyuanDiT",
        ),
        "BCHW",
    ),
}
# Latents in a layout none of diffusers' tensor_formats describes (measured on the zoo).
FASTER_CACHE_UNSUPPORTED_LAYOUTS = {
    **dict.fromkeys(("Flux", "Chroma", "QwenImage", "LTX"), "packed token sequences (B, S, C)"),
    "ZImage": "a list of per-sample latents (C, F, H, W)",
    "Kandinsky5": "channels-last video latents (B, F, H, W, C)",
}


def _by_prefix(table: dict[str, str], model: Any) -> str | None:
    name = type(model).__name__.removeprefix("Native")
    return next((value for prefix, value in table.items() if name.startswith(prefix)), None)


def faster_cache_format(model: Any) -> str | None:
    """diffusers' ``tensor_format`` for ``model``'s latents (None: not one FasterCache takes, or not measured)."""
    return _by_prefix(FASTER_CACHE_FORMATS, model)


def split_every_batched_input(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Before each denoiser call: tell FasterCache's denoiser hook to split, besides its default kwargs
    (hidden_states, encoder_hidden_states, timestep, attention masks), every tensor kwarg batched like the latents.

    The hook skips the unconditional half of a [uncond, cond] batch by halving the kwargs its config names
    (``_unconditional_conditional_input_kwargs_identifiers``) and leaves the others whole: SD3's
    ``pooled_projections``, CogView3-Plus's ``original_size``/``target_size``/``crop_coords`` and HunyuanDiT's text
    masks kept both halves, and the call failed or made two samples. With them named it runs (measured on the
    zoo's tiny builds)."""
    import torch
    from diffusers.hooks import HookRegistry
    from diffusers.hooks.faster_cache import _FASTER_CACHE_DENOISER_HOOK, _UNCOND_COND_INPUT_KWARGS_IDENTIFIERS

    hook: Any = HookRegistry.check_if_exists_or_initialize(module).get_hook(_FASTER_CACHE_DENOISER_HOOK)
    latents = kwargs.get("hidden_states", next((a for a in args if torch.is_tensor(a)), None))
    if hook is None or not torch.is_tensor(latents) or latents.ndim == 0:
        return
    batch = latents.shape[0]
    batched = [k for k, v in kwargs.items() if torch.is_tensor(v) and v.ndim > 0 and v.shape[0] == batch]
    hook.uncond_cond_input_kwargs_identifiers = list(dict.fromkeys([*_UNCOND_COND_INPUT_KWARGS_IDENTIFIERS, *batched]))


class FasterCacheConfig(FeatureConfig):
    """Options of ``faster_cache``."""

    spatial_attention_block_skip_range: int = Field(default=2, ge=2, description="Recompute every N steps.")
    spatial_attention_timestep_skip_range: tuple[int, int] = Field(default=(-1, 681))
    unconditional_batch_skip_range: int = Field(default=5, ge=1, description="Reuse the CFG branch every N steps.")
    is_guidance_distilled: bool = Field(default=False, description="True for guidance-distilled models (Flux-dev).")


class FasterCache(_TimestepHookFeature[FasterCacheConfig]):
    library_apply = "apply_faster_cache"
    hook_names = ("faster_cache_denoiser", "faster_cache_block")
    range_hint = (
        "give it a range that covers its steps (faster_cache: {spatial_attention_timestep_skip_range: [LOW, HIGH]})"
    )
    name = "faster_cache"
    reach = Reach.EVERY_DENOISER
    config_cls = FasterCacheConfig
    description = "diffusers FasterCache"

    def counts_rows(self, options: FasterCacheConfig) -> bool:
        # Its unconditional-batch skip runs the denoiser on half the batch: work is the rows computed.
        return not options.is_guidance_distilled

    def timestep_config(self, name: str, model: Any, options: FasterCacheConfig, current_timestep: Any) -> Any:
        from diffusers import FasterCacheConfig as DiffusersFasterCacheConfig

        return DiffusersFasterCacheConfig(
            **options.model_dump(),
            current_timestep_callback=current_timestep,
            attention_weight_callback=lambda _: 0.5,
            # Guidance-distilled: no unconditional batch to approximate, so the frequency filter that reads the
            # format never runs (diffusers returns before it); the library still checks the value is one it knows.
            tensor_format=faster_cache_format(model) or ("BCHW" if options.is_guidance_distilled else None),
        )

    def apply(self, pipeline: Any, options: FasterCacheConfig, context: RunContext) -> WorkCounter:
        handle = super().apply(pipeline, options, context)
        if options.is_guidance_distilled and runs_cfg_as_separate_calls(pipeline):
            handle.branch_sharing = (type(pipeline).__name__, context.steps, None)
        hooks = [
            model.register_forward_pre_hook(split_every_batched_input, with_kwargs=True)
            for model in denoisers(pipeline).values()
        ]
        undo = handle.undo

        def remove() -> None:
            for hook in hooks:
                hook.remove()
            undo()

        handle.undo = remove
        return handle

    def check_model(self, pipeline: Any, model: Any, options: FasterCacheConfig) -> Support:
        # The library's refusals first: where diffusers' FasterCache fails on the model, omni-accel's own gaps
        # (the current timestep) are not what stops it.
        name = type(model).__name__
        layout = _by_prefix(FASTER_CACHE_UNSUPPORTED_LAYOUTS, model)
        if layout is not None and not options.is_guidance_distilled:
            # Seen on Flux and Qwen-Image: "Tensors must have same number of dimensions: got 4 and 3".
            return Support.no(
                f"diffusers' FasterCache filters latents of tensor_format BCFHW, BFCHW or BCHW only (its TODO: "
                f'"Support BSC for LTX Video"); {name} takes {layout}. A guidance-distilled model (FLUX.1-dev) '
                "needs no filter: faster_cache: {is_guidance_distilled: true}",
                Owner.LIBRARY,
            )
        if runs_cfg_as_separate_calls(pipeline) and not options.is_guidance_distilled:
            # Seen on Wan: the hook splits every batch in halves as (uncond, cond); with two videos per prompt
            # it reused one video's features for the other (SSIM 0.87), with one it failed. Its state is not
            # kept per CFG branch either, so is_guidance_distilled would mix the two calls' attention.
            return Support.no(
                f"FasterCache takes each transformer batch as [uncond, cond] halves; {type(pipeline).__name__} runs "
                "the unconditional branch as a separate transformer call, so the halves are two different samples",
                Owner.LIBRARY,
            )
        if faster_cache_format(model) is None and not options.is_guidance_distilled:
            return Support.no(
                f"not supported by omni-accel yet: FasterCache needs the tensor_format of {name}'s latents, not "
                "measured yet: add its layout to accel.features.timestep_caches.FASTER_CACHE_FORMATS",
                Owner.HARNESS,
            )
        return super().check_model(pipeline, model, options)
