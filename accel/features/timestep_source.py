"""The current timestep for diffusers' timestep-scheduled hooks (PAB, FasterCache), on any pipeline.

diffusers' ``apply_pyramid_attention_broadcast`` and ``apply_faster_cache`` hook any module; they ask for a
``current_timestep_callback``. ``DenoiserTimestep`` supplies one per denoiser: the pipeline's
``current_timestep`` where its class has one, else the scheduler's: ``scheduler.timesteps`` at the number of
``scheduler.step`` calls made since the pipeline's last ``set_timesteps`` (every denoiser call of a step comes
before that step's ``scheduler.step``), on the schedule's 0-1000 scale whatever the denoiser is called with
(Lumina 2 and Z-Image call theirs with ``1 - t/1000``, AuraFlow with ``t/1000``).

It also resets the hooks' state at each ``set_timesteps`` (a new generation) on denoisers without diffusers'
CacheMixin, whose pipelines do not reset it (``maybe_free_model_hooks`` resets CacheMixin models only), and
records the timesteps each denoiser's hooks saw: the evidence of a range that never covers a denoiser's steps
(Wan 2.2's high-noise expert runs at t >= 875, outside PAB's default (100, 800)).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def timestep_refusal(pipeline: Any) -> str | None:
    """Why no current timestep can be read on ``pipeline`` (None: it can)."""
    if hasattr(type(pipeline), "current_timestep"):
        return None
    scheduler = getattr(pipeline, "scheduler", None)
    if scheduler is None or not all(hasattr(scheduler, name) for name in ("set_timesteps", "step")):
        return (
            f"{type(pipeline).__name__} exposes no current_timestep and no scheduler with set_timesteps() and "
            "step() to read the timestep from"
        )
    return None


class DenoiserTimestep:
    """Per denoiser, a ``current_timestep_callback`` for diffusers' hooks, and the timesteps each one saw."""

    def __init__(self, pipeline: Any, reset: dict[str, Any]) -> None:
        """``reset``: the denoisers (by name) whose hooks' state is reset at each new generation."""
        self.pipeline = pipeline
        # Distinct timesteps per denoiser (a set: one entry per step however many hooks ask, and no growth with the
        # calls a long measurement makes: the evidence must not add to the memory it sits beside).
        self.seen: dict[str, set[float]] = {}
        self.steps_done = 0
        self._reset = reset
        self._from_pipeline = hasattr(type(pipeline), "current_timestep")
        self._scheduler: Any = getattr(pipeline, "scheduler", None)
        self._wrapped: list[str] = []
        if self._scheduler is not None:
            self._wrap("set_timesteps", self._new_generation)
            if not self._from_pipeline:
                self._wrap("step", self._stepped)

    def _wrap(self, name: str, before: Callable[[], None]) -> None:
        original = getattr(self._scheduler, name)

        @functools.wraps(original)  # keeps its signature: retrieve_timesteps inspects set_timesteps' parameters
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            before()
            return original(*args, **kwargs)

        setattr(self._scheduler, name, wrapped)
        self._wrapped.append(name)

    def _new_generation(self) -> None:
        from diffusers.hooks import HookRegistry

        self.steps_done = 0
        for model in self._reset.values():
            HookRegistry.check_if_exists_or_initialize(model).reset_stateful_hooks(recurse=True)

    def _stepped(self) -> None:
        self.steps_done += 1

    def current(self) -> float:
        """The timestep of the step being denoised (0-1000, high noise high)."""
        import torch

        if self._from_pipeline:
            value = self.pipeline.current_timestep
        else:
            timesteps = self._scheduler.timesteps
            begin = getattr(self._scheduler, "begin_index", None) or 0
            value = timesteps[min(begin + self.steps_done, len(timesteps) - 1)]
        return float(torch.as_tensor(value).flatten()[0])

    def callback(self, denoiser: str) -> Callable[[], float]:
        """The ``current_timestep_callback`` for ``denoiser``'s hooks (it records what it returns)."""

        def current_timestep() -> float:
            value = self.current()
            self.seen.setdefault(denoiser, set()).add(value)
            return value

        return current_timestep

    def remove(self) -> None:
        """Give the scheduler its own methods back."""
        for name in self._wrapped:
            if name in vars(self._scheduler):
                delattr(self._scheduler, name)
        self._wrapped.clear()

    def outside(self, denoiser: str, window: tuple[int, int]) -> str | None:
        """Where every timestep ``denoiser``'s hooks saw lies outside the open range ``window``, the sentence that
        says so (None: some step fell inside, or it saw none)."""
        seen = self.seen.get(denoiser)
        if not seen or any(window[0] < t < window[1] for t in seen):
            return None
        return (
            f"{denoiser} ran at t {min(seen):.0f}-{max(seen):.0f} only, outside its timestep_skip_range "
            f"{tuple(window)} (the hook reuses attention only at t strictly inside it)"
        )

    def span(self) -> dict[str, list[float]]:
        """Per denoiser, the least and the greatest timestep its hooks saw (the verdict's evidence)."""
        return {name: [round(min(seen), 1), round(max(seen), 1)] for name, seen in self.seen.items() if seen}
