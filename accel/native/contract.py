"""The native pipeline contract and the table native pipelines register in (``register_native``).

A native pipeline is an ``nn.Module`` with explicit stages, ``encode_prompt`` -> ``prepare_latents`` ->
``denoise`` (one transformer call per step and CFG branch, with a progress bar) -> ``decode``, and a
``forward(request)`` that runs them and records each stage's synchronised time. A pipeline with true
classifier-free guidance asks its ``cfg_branches`` strategy for each step's guided noise prediction (the
conditional and unconditional branches as callables, and how to combine them): the default runs both here,
one after the other; a feature swaps in another (``cfg_parallel``: one branch per rank). Components are declared
on the class (``_dit_modules``, ``_encoder_modules``, ``_vae_modules``, ``_resident_modules``; dotted paths
allowed) so that features find them without guessing. Native pipelines register under the
``model_index.json`` ``_class_name`` they implement; out-of-tree ones are named by import path.
``registry.py`` finds the pipeline for a checkpoint.

What the in-tree pipelines share is here too, as defaults a port overrides or fills in: ``encode_prompt`` (the
prompt's ``encode_text``, the negative prompt's under ``negative_`` keys with true CFG), ``denoise`` (the loop over
``euler_loop``: latents and timestep / 1000, the call's ``denoiser_inputs``, each branch's embeddings) and
``combine_cfg`` (``uncond + scale * (cond - uncond)``). Loading, latent packing and the timestep shift of the
flow-match pipelines are ``flow_match.FlowMatchPipeline``'s; a transformer's block lists, its loop over them, its
weight names and its building are ``blocks.NativeTransformer``'s.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import torch

from accel.errors import ConfigError
from accel.measure.timing import synchronize

NATIVE_PIPELINES: dict[str, type[NativePipeline]] = {}


def register_native(class_name: str) -> Callable[[type[NativePipeline]], type[NativePipeline]]:
    """Class decorator: the native pipeline for checkpoints whose ``_class_name`` is ``class_name``."""

    def decorator(cls: type[NativePipeline]) -> type[NativePipeline]:
        NATIVE_PIPELINES[class_name] = cls
        return cls

    return decorator


class CFGBranches(Protocol):
    """How a denoising step with true CFG gets its noise prediction from the conditional and unconditional
    branches (callables, each one transformer call) and ``combine(cond, uncond)``: the extension point of
    the denoising loop. A feature assigns another strategy to ``pipeline.cfg_branches`` and restores the
    previous one on ``remove``."""

    # How many of a step's two branches this process computes (2 here; cfg_parallel's rank computes 1): a cache
    # that keeps separate state per branch (Cache-DiT's separate CFG) needs it.
    local_branches: int

    def predict(
        self,
        cond: Callable[[], torch.Tensor],
        uncond: Callable[[], torch.Tensor],
        combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The guided noise prediction of one step."""
        ...


class SequentialBranches:
    """The default ``CFGBranches``: both branches here, the conditional first, then ``combine(cond, uncond)``
    (the order diffusers computes them in)."""

    local_branches = 2

    def predict(
        self,
        cond: Callable[[], torch.Tensor],
        uncond: Callable[[], torch.Tensor],
        combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """``combine(cond(), uncond())``, the two transformer calls in that order."""
        positive = cond()
        negative = uncond()
        return combine(positive, negative)


def runs_true_cfg(request: Any) -> bool:
    """Whether a request runs true CFG: ``true_cfg_scale`` > 1 and a negative prompt (``FluxPipeline``'s and
    ``QwenImagePipeline``'s ``do_true_cfg``; an empty negative prompt counts, as there)."""
    return bool(request.true_cfg_scale > 1 and request.negative_prompt is not None)


# The prefix of the negative prompt's embeddings: the unconditional branch's inputs.
NEGATIVE = "negative_"

STAGE_NAMES = ("text_encoding", "prepare", "denoising", "decode_prep", "vae_decode", "post_processing")


class NativePipeline(torch.nn.Module):
    """Base class of native pipelines: explicit, timed stages and declared components."""

    _dit_modules: tuple[str, ...] = ()
    _encoder_modules: tuple[str, ...] = ()
    _vae_modules: tuple[str, ...] = ()
    _resident_modules: tuple[str, ...] = ()
    # The true_cfg_scale a request without one runs at: the diffusers pipeline's default (FLUX 1.0: no CFG).
    default_true_cfg_scale: float = 1.0

    def __init__(self, checkpoint: str | Path | None = None, dtype: torch.dtype = torch.float32) -> None:
        """The constructor every native pipeline has: the native target builds one as ``cls(checkpoint,
        dtype=dtype)`` from a local checkpoint directory (a subclass loads its weights from it, in ``dtype``);
        ``from_components`` builds one from in-memory components instead. The base keeps no weights: a
        subclass that does not define ``__init__`` cannot load a checkpoint, and is refused one."""
        if checkpoint is not None and type(self).__init__ is NativePipeline.__init__:
            raise ConfigError(
                f"native pipeline {type(self).__name__} defines no __init__(checkpoint, dtype): it cannot load "
                f"'{checkpoint}'; define one that loads its components from the checkpoint"
            )
        super().__init__()
        self.stage_times: dict[str, Any] = {}
        self._progress_disabled = True
        self._offload_hooks: list[Any] = []
        # Each true-CFG step's branches go through this strategy (``CFGBranches``; cfg_parallel swaps it).
        self.cfg_branches: CFGBranches = SequentialBranches()
        # Transformer calls in the last pipeline call (one per step and CFG branch computed here).
        self.denoiser_calls = 0
        # Called with the request before each denoising loop (a cache that must know the call's steps and whether
        # it runs true CFG registers one and removes it again).
        self.denoise_hooks: list[Callable[[Any], None]] = []
        # Where the pipeline computes: set by ``to()`` and kept by offload, which moves weights to the CPU.
        self._execution_device: torch.device | None = None

    @classmethod
    def from_components(cls, components: dict[str, Any], dtype: torch.dtype = torch.float32) -> NativePipeline:
        """A pipeline from in-memory components (a ``synthetic:`` source's); subclasses that support it
        override this."""
        raise ConfigError(f"native pipeline {cls.__name__} cannot be built from in-memory components")

    # --- components -----------------------------------------------------------------------------------
    def _resolve(self, dotted: str) -> Any:
        obj: Any = self
        for part in dotted.split("."):
            obj = getattr(obj, part)
        return obj

    @property
    def components(self) -> dict[str, Any]:
        """Declared modules plus tokenizers and scheduler, by name (what features look for)."""
        names = [*self._encoder_modules, *self._dit_modules, *self._vae_modules]
        found = {name: self._resolve(name) for name in names}
        for extra in ("tokenizer", "tokenizer_2", "scheduler"):
            if hasattr(self, extra):
                found[extra] = getattr(self, extra)
        return found

    @property
    def execution_device(self) -> torch.device:
        """The device the stages compute on: the one the pipeline was moved to with ``to()``.

        Not the first transformer parameter's device: after model, group or layerwise offload that is
        the CPU, which would put latents on the wrong device and make ``synchronize`` a no-op.
        """
        if self._execution_device is not None:
            return self._execution_device
        device: torch.device = next(self._resolve(self._dit_modules[0]).parameters()).device
        return device

    def to(self, *args: Any, **kwargs: Any) -> NativePipeline:
        """``nn.Module.to``; a device argument also becomes the execution device."""
        device = kwargs.get("device")
        for arg in args:
            if isinstance(arg, (str, torch.device)):
                device = arg
        moved = super().to(*args, **kwargs)
        if device is not None:
            self._execution_device = torch.device(device)
        return moved

    @property
    def device(self) -> torch.device:
        return self.execution_device

    def set_progress_bar_config(self, disable: bool = True, **_: Any) -> None:
        self._progress_disabled = disable

    @contextmanager
    def progress_bar(self, total: int) -> Iterator[Any]:
        """A tqdm bar over denoising steps (disabled by default in sweeps); records each step's time."""
        from tqdm.auto import tqdm

        steps: list[float] = []
        bar = tqdm(total=total, disable=self._progress_disabled)
        last = [time.perf_counter()]
        original_update = bar.update

        def update(n: int = 1) -> None:
            synchronize(str(self.execution_device))
            now = time.perf_counter()
            steps.append(now - last[0])
            last[0] = now
            original_update(n)

        bar.update = update  # type: ignore[method-assign,assignment]  # this bar's steps are timed
        try:
            yield bar
        finally:
            bar.close()
            self.stage_times["steps"] = steps

    # --- offload --------------------------------------------------------------------------------------
    def enable_model_cpu_offload(self, device: str | torch.device = "cuda") -> None:
        """Encoders and DiT live on the CPU and move to ``device`` while they run; resident modules stay."""
        from accelerate import cpu_offload_with_hook

        self._execution_device = torch.device(device)
        previous = None
        for name in (*self._encoder_modules, *self._dit_modules):
            module = self._resolve(name)
            if name in self._resident_modules:
                continue
            module, previous = cpu_offload_with_hook(module, device, prev_module_hook=previous)
            self._offload_hooks.append(previous)

    def remove_all_hooks(self) -> None:
        """Remove offload hooks (``enable_model_cpu_offload``)."""
        from accelerate.hooks import remove_hook_from_module

        for name in (*self._encoder_modules, *self._dit_modules):
            remove_hook_from_module(self._resolve(name), recurse=True)
        self._offload_hooks = []

    # --- stages ---------------------------------------------------------------------------------------
    def encode_prompt(self, request: Any) -> dict[str, torch.Tensor]:
        """The prompt's ``encode_text``; with true CFG the negative prompt's too, encoded the same way, under
        ``negative_`` keys (what ``denoise`` hands the unconditional branch)."""
        embeddings = self.encode_text(request.prompt, request)
        if runs_true_cfg(request):
            negative = self.encode_text(request.negative_prompt, request)
            embeddings.update({f"{NEGATIVE}{key}": value for key, value in negative.items()})
        return embeddings

    def encode_text(self, prompt: str, request: Any) -> dict[str, torch.Tensor]:
        """One prompt's denoiser inputs by the denoiser's keyword (a port that uses the default
        ``encode_prompt`` and ``denoise`` defines it)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither encode_prompt nor encode_text")

    def prepare_latents(self, request: Any) -> dict[str, Any]:
        raise NotImplementedError

    def denoise(self, request: Any, embeddings: dict[str, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
        """``euler_loop`` from ``state["latents"]``: each transformer call takes the latents as ``hidden_states``,
        the step's timestep / 1000 as ``timestep`` (flow matching's [0, 1]), the call's ``denoiser_inputs`` and
        its branch's embeddings (the prompt's; the negative prompt's for the unconditional branch); with true CFG
        the branches combine by ``combine_cfg`` at the request's ``true_cfg_scale``."""
        latents: torch.Tensor = state["latents"]
        fixed = self.denoiser_inputs(request, state)
        scale = float(request.true_cfg_scale)

        def combine(cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
            return self.combine_cfg(cond, uncond, scale)

        def step_inputs(latents: torch.Tensor, t: torch.Tensor) -> dict[str, Any]:
            timestep = t.expand(latents.shape[0]).to(latents.dtype)
            return {"hidden_states": latents, "timestep": timestep / 1000, **fixed}

        def predict(branch: str, inputs: dict[str, Any], prefix: str) -> torch.Tensor:
            """The prompt's embeddings (``prefix`` ``negative_``: the negative prompt's) with this step's inputs."""
            text = {key: embeddings[f"{prefix}{key}"] for key in embeddings if not key.startswith(NEGATIVE)}
            return self.branch_call(branch, **inputs, **text)

        return self.euler_loop(request, latents, step_inputs, predict, combine)

    def denoiser_inputs(self, request: Any, state: dict[str, Any]) -> dict[str, Any]:
        """The transformer's inputs that stay the same over one call's steps and branches (position ids, a
        guidance embedding's scale), from ``prepare_latents``' state: none here."""
        return {}

    def combine_cfg(self, cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
        """One true-CFG step's guided prediction from its branches: ``uncond + scale * (cond - uncond)``
        (``FluxPipeline``'s formula and order of operations; a port whose reference differs overrides it)."""
        return uncond + scale * (cond - uncond)

    def decode(self, latents: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    # --- the denoising loop the native pipelines share -------------------------------------------------
    def euler_loop(
        self,
        request: Any,
        latents: torch.Tensor,
        step_inputs: Callable[[torch.Tensor, torch.Tensor], dict[str, Any]],
        predict: Callable[[str, dict[str, Any], str], torch.Tensor],
        combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """One scheduler step per timestep: the transformer's inputs from ``step_inputs(latents, t)``, then the
        conditional branch ``predict("cond", inputs, "")`` alone or, with true CFG, both branches through
        ``cfg_branches`` (the unconditional one ``predict("uncond", inputs, "negative_")``: the negative
        prompt's embeddings) combined by ``combine(cond, uncond)``. ``denoiser_calls`` counts the calls; the
        ``denoise_hooks`` run first, with the request."""
        scheduler: Any = self.scheduler
        self.denoiser_calls = 0
        for hook in self.denoise_hooks:
            hook(request)
        with self.progress_bar(total=len(scheduler.timesteps)) as bar:
            for t in scheduler.timesteps:
                inputs = step_inputs(latents, t)
                cond = functools.partial(predict, "cond", inputs, "")
                if runs_true_cfg(request):
                    uncond = functools.partial(predict, "uncond", inputs, NEGATIVE)
                    noise = self.cfg_branches.predict(cond, uncond, combine)
                else:
                    noise = cond()
                latents = scheduler.step(noise, t, latents, return_dict=False)[0]
                bar.update()
        return latents

    def branch_call(self, branch: str, **inputs: Any) -> torch.Tensor:
        """One transformer call, counted in ``denoiser_calls``, inside the cache context of its ``branch``
        (``cond`` / ``uncond``: the names diffusers' cache hooks keep separate state under)."""
        transformer: Any = self.transformer
        self.denoiser_calls += 1
        with transformer.cache_context(branch):
            noise: torch.Tensor = transformer(**inputs)
        return noise

    def reset_stateful_caches(self) -> None:
        """Reset the state diffusers' stateful hooks keep on every component (a cache's last residual, its step
        count), as diffusers' pipelines do at the end of each call (``maybe_free_model_hooks``): without it
        First Block Cache compares a call's first step with the previous call's last, and the same seed gives
        another image on the second call."""
        for component in self.components.values():
            reset = getattr(component, "_reset_stateful_cache", None)
            if reset is not None:
                reset()

    @torch.no_grad()
    def forward(self, request: Any) -> torch.Tensor:
        """Run the stages; ``stage_times`` holds each stage's synchronised seconds and the step times. Every
        call starts from the caches' reset state (``reset_stateful_caches`` after each, as diffusers does)."""
        try:
            return self._forward(request)
        finally:
            self.reset_stateful_caches()

    def _forward(self, request: Any) -> torch.Tensor:
        device = str(self.execution_device)
        marks = []

        def mark() -> None:
            synchronize(device)
            marks.append(time.perf_counter())

        mark()
        embeddings = self.encode_prompt(request)
        mark()
        state = self.prepare_latents(request)
        mark()
        latents = self.denoise(request, embeddings, state)
        mark()
        images = self.decode(latents, state)
        mark()
        output = images.cpu().numpy()
        mark()
        durations = [b - a for a, b in itertools.pairwise(marks)]
        self.stage_times.update(
            text_encoding=durations[0],
            prepare=durations[1],
            denoising=durations[2],
            decode_prep=0.0,  # decode() unpacks inside vae_decode: reported there
            vae_decode=durations[3],
            post_processing=durations[4],
        )
        return torch.from_numpy(output)
