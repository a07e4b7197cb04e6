"""Step caching, what every cache shares: reuse of transformer work across denoising steps (lossy).

The pieces the cache features share: the roofline exemption (``SKIPS_WORK``), the engagement verdicts (cached
steps per run, ``cached_steps_verdict``; attention work skipped per run, ``verify_skipped_work`` over a
``WorkCounter``) and what a cache asks of a pipeline (``runs_cfg_as_separate_calls``). The caches themselves:

- ``cache_dit`` in ``cache_dit.py``: Cache-DiT's DBCache, with the TaylorSeer calibrator and SCM step masks.
- diffusers' hooks in ``diffusers_cache.py``: ``first_block_cache``, ``mag_cache``, ``taylorseer_cache``,
  ``pyramid_attention_broadcast``, ``faster_cache``.
- ``tea_cache`` in ``teacache.py`` (diffusers has none).

Evidence for the hooks is the work they skip: attention computations that reached the dispatcher per
transformer call, against the number of attention modules (what an uncached call computes). A cache
that computed everything on a run has not engaged, whatever it was configured to do.
"""

from __future__ import annotations

from typing import Any

from accel.features.base import Handle, Tally, Verdict
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

    def computed_total(self) -> int:
        """Attention computations dispatched so far (a running count: read it outside traced code, and compare
        two readings; ``accel.diverge.curve`` reads it around each denoiser call of an untimed call)."""
        if self.native_layers:
            return sum(sum(layer.calls.values()) for layer in self.native_layers)
        return self.computed.value

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
