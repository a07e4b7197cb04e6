"""Stage timing of a black-box diffusers pipeline, from synchronised hooks on its components.

Boundaries come from the components the pipeline calls, each timestamp taken after synchronising the
device: the text encoders' forwards, the first denoiser call, each ``scheduler.step`` (one per step),
``vae.decode``. Stages are the intervals between boundaries, so they tile the call:

- ``text_encoding``: call start -> end of the last text-encoder forward before denoising (tokenising too)
- ``prepare``: -> start of the first transformer call (latents, timesteps)
- ``denoising``: -> end of the last scheduler step; ``steps`` keeps each step's duration
- ``decode_prep``: -> start of ``vae.decode`` (unpacking, de-normalising latents)
- ``vae_decode``: ``vae.decode`` itself
- ``post_processing``: -> call end (image processor, numpy conversion)

Component time (the sum of the encoder, transformer and VAE forwards) is kept beside them: its share
of the end-to-end time says how much of the call the hooks actually saw.
"""

from __future__ import annotations

import time
from typing import Any

from accel.measure.timing import synchronize

_NOTHING = object()  # the instance had no attribute of its own under that name
STAGES = ("text_encoding", "prepare", "denoising", "decode_prep", "vae_decode", "post_processing")


class StageRecorder:
    """Installs timing hooks on a pipeline's components; ``start``/``stop`` bracket one call."""

    def __init__(self, pipeline: Any, device: str) -> None:
        import torch

        self.device = device
        self.pipeline = pipeline
        self.handles: list[Any] = []
        self.wrapped: list[tuple[Any, str, Any]] = []
        self.events: list[tuple[str, float]] = []
        for name, module in pipeline.components.items():
            if not isinstance(module, torch.nn.Module):
                continue
            if name.startswith("text_encoder"):
                self._hook_module(module, "encoder")
            elif name.startswith("transformer") or name == "unet":
                self._hook_module(module, "denoiser")
        vae = getattr(pipeline, "vae", None)
        if vae is not None and hasattr(vae, "decode"):
            self._wrap(vae, "decode", "vae")
        scheduler = getattr(pipeline, "scheduler", None)
        if scheduler is not None and hasattr(scheduler, "step"):
            self._wrap(scheduler, "step", "step", start=False)

    def _now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def _hook_module(self, module: Any, kind: str) -> None:
        # A module compiled whole (``module.compile()``) runs its hooks inside the compiled frame: a hook added
        # now changes what dynamo guarded, so the next call recompiles (and traces our timer in). Its compiled
        # entry, called by ``nn.Module.__call__`` outside that frame, is timed instead: the graph stays as built.
        if getattr(module, "_compiled_call_impl", None) is not None:
            self._wrap(module, "_compiled_call_impl", kind)
            return
        self.handles.append(module.register_forward_pre_hook(lambda *_: self.events.append((f"{kind}+", self._now()))))
        self.handles.append(module.register_forward_hook(lambda *_: self.events.append((f"{kind}-", self._now()))))

    def _wrap(self, obj: Any, method: str, kind: str, start: bool = True) -> None:
        original = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if start:
                self.events.append((f"{kind}+", self._now()))
            result = original(*args, **kwargs)
            self.events.append((f"{kind}-", self._now()))
            return result

        # What the instance held itself (another wrapper, e.g. a feature's evidence counter) comes back on removal.
        own = obj.__dict__.get(method, _NOTHING)
        setattr(obj, method, timed)
        self.wrapped.append((obj, method, own))

    def start(self) -> None:
        self.events = [("call+", self._now())]

    def stop(self) -> dict[str, Any]:
        """Stage durations (s), per-step durations and component time of the call just bracketed."""
        self.events.append(("call-", self._now()))
        return stages_from_events(self.events)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        for obj, method, own in reversed(self.wrapped):
            if own is _NOTHING:
                obj.__dict__.pop(method, None)
            else:
                setattr(obj, method, own)
        self.handles, self.wrapped = [], []


def stages_from_events(events: list[tuple[str, float]]) -> dict[str, Any]:
    """Turn ordered (kind, timestamp) events into stages; missing boundaries collapse their stage."""
    start, end = events[0][1], events[-1][1]
    first_denoiser = next((t for k, t in events if k == "denoiser+"), None)
    step_ends = [t for k, t in events if k == "step-"]
    encoder_ends = [t for k, t in events if k == "encoder-" and (first_denoiser is None or t <= first_denoiser)]
    vae_start = next((t for k, t in events if k == "vae+"), None)
    vae_end = next((t for k, t in reversed(events) if k == "vae-"), None)

    enc_end = encoder_ends[-1] if encoder_ends else start
    den_start = first_denoiser if first_denoiser is not None else enc_end
    den_end = step_ends[-1] if step_ends else den_start
    dec_start = vae_start if vae_start is not None else den_end
    dec_end = vae_end if vae_end is not None else dec_start
    boundaries = [start, enc_end, den_start, den_end, dec_start, dec_end, end]
    stages = {name: boundaries[i + 1] - boundaries[i] for i, name in enumerate(STAGES)}
    steps = [b - a for a, b in zip([den_start, *step_ends[:-1]], step_ends, strict=True)]
    component_s = _paired_time(events, "encoder") + _paired_time(events, "denoiser") + _paired_time(events, "vae")
    return {
        "stages": stages,
        "steps": steps,
        "denoiser_calls": sum(1 for k, _ in events if k == "denoiser+"),
        "end_to_end_s": end - start,
        "component_s": component_s,
    }


def _paired_time(events: list[tuple[str, float]], kind: str) -> float:
    total, opened = 0.0, []
    for k, t in events:
        if k == f"{kind}+":
            opened.append(t)
        elif k == f"{kind}-" and opened:
            begun = opened.pop()
            if not opened:  # count only the outermost call (nested forwards share the interval)
                total += t - begun
    return total
