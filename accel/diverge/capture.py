"""Capturing one designated pipeline call: hooks on the denoiser(s) and text encoders, a wrapper of
``scheduler.step`` and of ``vae.decode``.

``Capture(pipeline)`` is a context manager: hooks are installed on entry and removed on exit, so a warm-up
call made before entering (compile, caches) is never recorded, and a profiling pass after leaving is not
either. It finds the components by the names diffusers pipelines and native pipelines share
(``transformer``/``transformer_2``/``unet``, ``scheduler``, ``vae``, ``text_encoder*``).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from accel.diverge.compare import tensors_of
from accel.features.base import denoisers as denoisers  # the harness's one list of denoiser components

_NOTHING = object()  # an attribute the instance did not hold itself


def _detached(value: Any) -> Any:
    """A copy of ``value`` whose tensors are detached clones (a later in-place update cannot change it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        items = [_detached(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


@dataclass
class DenoiserCall:
    """One denoiser call: the step it belongs to (scheduler steps taken before it), its inputs and output."""

    step: int
    denoiser: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: torch.Tensor


@dataclass
class SchedulerStep:
    """One ``scheduler.step``: its inputs (the guided prediction, the timestep, the latents), the latents it
    returned, and the scheduler's attributes just before it (to replay the step in isolation)."""

    timestep: torch.Tensor
    sample: torch.Tensor
    model_output: torch.Tensor
    prev_sample: torch.Tensor
    state: dict[str, Any]


@dataclass
class Trace:
    """Everything one side's designated call went through, in order."""

    calls: list[DenoiserCall] = field(default_factory=list)
    steps: list[SchedulerStep] = field(default_factory=list)
    encoders: dict[str, list[Any]] = field(default_factory=dict)
    decodes: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    timesteps: torch.Tensor | None = None
    sigmas: torch.Tensor | None = None
    images: list[Any] = field(default_factory=list)

    def calls_at(self, step: int) -> list[DenoiserCall]:
        """The denoiser calls of denoising step ``step`` (one, or one per CFG branch)."""
        return [call for call in self.calls if call.step == step]


def text_encoders(pipeline: Any) -> dict[str, torch.nn.Module]:
    """The pipeline's text encoders (``text_encoder``, ``text_encoder_2``, ...) by name."""
    components = getattr(pipeline, "components", {}) or {}
    return {
        name: module
        for name, module in sorted(components.items())
        if name.startswith("text_encoder") and isinstance(module, torch.nn.Module)
    }


def scheduler_state(scheduler: Any) -> dict[str, Any]:
    """A shallow copy of the scheduler's attributes (lists copied): enough to replay one step later."""
    return {k: (list(v) if isinstance(v, list) else v) for k, v in vars(scheduler).items() if k != "step"}


def replay_step(
    scheduler: Any, step: Any, state: dict[str, Any], model_output: torch.Tensor, timestep: Any, sample: torch.Tensor
) -> torch.Tensor:
    """``step`` (a ``scheduler.step`` as it was during the call) from the scheduler's saved ``state`` with the
    given inputs; the scheduler's attributes are put back afterwards."""
    saved = scheduler_state(scheduler)
    vars(scheduler).update(copy.copy(state))
    try:
        out = step(model_output, timestep, sample, return_dict=False)
    finally:
        for key in [k for k in vars(scheduler) if k != "step"]:
            del vars(scheduler)[key]
        vars(scheduler).update(saved)
    return tensors_of(out)[0]


class Capture:
    """Hooks that record one pipeline call into ``trace``; use as ``with Capture(pipeline) as trace:``."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.trace = Trace()
        self._handles: list[Any] = []
        # (owner, attribute, what the instance held itself before, or _NOTHING): put back on exit.
        self._patched: list[tuple[Any, str, Any]] = []
        self.scheduler_step: Any = None  # the step the call ran (for replay)
        self.vae_decode: Any = None

    def __enter__(self) -> Trace:
        for name, module in denoisers(self.pipeline).items():
            self._hook_denoiser(name, module)
        for name, module in text_encoders(self.pipeline).items():
            self.trace.encoders[name] = []
            self._handles.append(module.register_forward_hook(self._encoder_hook(name)))
        scheduler = getattr(self.pipeline, "scheduler", None)
        if scheduler is not None:
            self._wrap_step(scheduler)
        vae = getattr(self.pipeline, "vae", None)
        if vae is not None and hasattr(vae, "decode"):
            self._wrap_decode(vae)
        return self.trace

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        for owner, attribute, own in reversed(self._patched):
            if own is _NOTHING:
                delattr(owner, attribute)  # the instance attribute goes; the class's method shows again
            else:  # a fault or a feature had set it on the instance already: it comes back
                setattr(owner, attribute, own)
        scheduler = getattr(self.pipeline, "scheduler", None)
        if scheduler is not None:
            self.trace.timesteps = _detached(getattr(scheduler, "timesteps", None))
            self.trace.sigmas = _detached(getattr(scheduler, "sigmas", None))

    def _hook_denoiser(self, name: str, module: torch.nn.Module) -> None:
        pending: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

        def before(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            pending.append((_detached(args), _detached(kwargs)))

        def after(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            inputs = pending.pop()
            call = DenoiserCall(len(self.trace.steps), name, inputs[0], inputs[1], _detached(tensors_of(output)[0]))
            self.trace.calls.append(call)

        self._handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        self._handles.append(module.register_forward_hook(after, with_kwargs=True))

    def _encoder_hook(self, name: str) -> Any:
        def hook(_: Any, __: Any, output: Any) -> None:
            self.trace.encoders[name].append(_detached(tensors_of(output)))

        return hook

    def _patch(self, owner: Any, attribute: str, replacement: Any) -> Any:
        """Set ``replacement`` on the instance (over what it held itself, if anything: a fault's or a feature's
        wrapper, which the replacement is expected to call); returns what was called before."""
        original = getattr(owner, attribute)
        self._patched.append((owner, attribute, vars(owner).get(attribute, _NOTHING)))
        setattr(owner, attribute, replacement)
        return original

    def _wrap_step(self, scheduler: Any) -> None:
        original = scheduler.step
        # The class's signature names the arguments (a wrapper set on the instance may take ``*args``).
        signature = inspect.signature(type(scheduler).step)
        self.scheduler_step = original

        def step(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(scheduler, *args, **kwargs)
            state = scheduler_state(scheduler)
            out = original(*args, **kwargs)
            self.trace.steps.append(
                SchedulerStep(
                    timestep=_detached(torch.as_tensor(bound.arguments["timestep"])),
                    sample=_detached(bound.arguments["sample"]),
                    model_output=_detached(bound.arguments["model_output"]),
                    prev_sample=_detached(tensors_of(out)[0]),
                    state=state,
                )
            )
            return out

        self._patch(scheduler, "step", step)  # over a fault's or a feature's own wrapper, put back on exit

    def _wrap_decode(self, vae: Any) -> None:
        original = vae.decode
        self.vae_decode = original

        def decode(*args: Any, **kwargs: Any) -> Any:
            z = args[0] if args else kwargs["z"]
            out = original(*args, **kwargs)
            self.trace.decodes.append((_detached(z), _detached(tensors_of(out)[0])))
            return out

        self._patch(vae, "decode", decode)
