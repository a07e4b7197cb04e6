"""Work done, counted where it is done: the evidence every cache and skip feature is judged by.

A cache's own report of cached steps says what it decided, not what it saved: Cache-DiT "caches" a step of a
model whose block list holds only the blocks it always computes, and skips nothing. And counting at a block's
call is no better: diffusers' cache hooks replace a block's ``forward``, so a pre-hook on the block fires even
when its work is skipped (FirstBlockCache 0.5 on tiny-cogvideox, 12 steps: block 1 called 12 times, its
``attn1`` twice). So the harness counts the work itself, below every hook a cache installs: per *work unit*
(an attention or feed-forward submodule inside a block list, e.g. ``blocks.0.attn1``, ``blocks.0.ff``) the calls
of its first weighted leaf (``to_q``, ``net.0.proj``), which run only when the unit computes. Diffusers' hooks
replace the forward of a block (FirstBlockCache, MagCache) or of an attention module (PAB, FasterCache,
TaylorSeer), never of a leaf inside it.

A full call computes every unit once, so the work skipped on a run is the units' calls short of one per
denoiser call. A unit the model never called on any run (an unused branch) is left out of the count.

The counters are ``Tally`` tensors bumped by a module-level hook from an attribute of the counted leaf: an
in-place add that torch.compile traces as an ordinary op, with no Python value to guard on, so a regionally
compiled block neither breaks nor recompiles for them (the same graph serves every block instance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from accel.features.base import Tally

# Names of feed-forward submodules in diffusers' and omni-accel's blocks (beside diffusers' FeedForward classes).
FEED_FORWARD_NAMES = ("ff", "ff_context", "mlp", "ffn", "feed_forward", "img_mlp", "txt_mlp", "proj_mlp")
# Preferred counted leaf of an attention unit: its query (or fused) projection, computed on every call.
QUERY_LEAVES = ("to_q", "to_qkv", "qkv", "to_out.0")
_TALLY_ATTRIBUTE = "_accel_work_tally"
_IN_BLOCK_LIST = re.compile(r"(^|\.)\d+\.")


def _count(module: Any, args: Any) -> None:
    """The pre-hook of a counted leaf: one call of its unit (the same function for every leaf)."""
    getattr(module, _TALLY_ATTRIBUTE).add()


def _is_unit(name: str, module: Any) -> bool:
    from diffusers.hooks._common import _ATTENTION_CLASSES, _FEEDFORWARD_CLASSES

    from accel.native.attention import Attention

    if not _IN_BLOCK_LIST.search(name + "."):
        return False
    if isinstance(module, _ATTENTION_CLASSES + _FEEDFORWARD_CLASSES) or hasattr(module, "processor"):
        return True
    return name.rsplit(".", 1)[-1] in FEED_FORWARD_NAMES or isinstance(module, Attention)


def _counted_leaf(unit: Any) -> Any:
    """The submodule whose calls stand for the unit's: its query projection, else its first weighted leaf,
    else the unit itself (a leaf, or a native attention layer without weights)."""
    named = dict(unit.named_modules())
    for name in QUERY_LEAVES:
        if name in named:
            return named[name]
    for module in unit.modules():
        if module is not unit and not list(module.children()) and list(module.parameters(recurse=False)):
            return module
    return unit


def work_units(model: Any) -> dict[str, Any]:
    """The attention and feed-forward submodules inside ``model``'s block lists (outermost only), by name."""
    units: dict[str, Any] = {}
    for name, module in model.named_modules():
        if any(name.startswith(outer + ".") for outer in units):
            continue
        if name and _is_unit(name, module):
            units[name] = module
    return units


@dataclass
class _Denoiser:
    calls: Tally
    units: dict[str, Tally] = field(default_factory=dict)


class BlockWork:
    """Counts, per denoiser, its calls and each work unit's calls; ``read`` gives the totals so far."""

    def __init__(self, models: dict[str, Any], device: str = "cpu") -> None:
        self.models = models
        self.denoisers: dict[str, _Denoiser] = {}
        self.hooks: list[Any] = []
        self.leaves: list[Any] = []
        self.start: dict[str, dict[str, Any]] = {}
        for component, model in models.items():
            entry = _Denoiser(Tally(device))
            self.hooks.append(model.register_forward_pre_hook(lambda *_, tally=entry.calls: tally.add()))
            for name, unit in work_units(model).items():
                leaf = _counted_leaf(unit)
                if hasattr(leaf, _TALLY_ATTRIBUTE):  # a leaf shared by two units counts for the first
                    continue
                tally = Tally(device)
                setattr(leaf, _TALLY_ATTRIBUTE, tally)
                self.leaves.append(leaf)
                self.hooks.append(leaf.register_forward_pre_hook(_count))
                entry.units[name] = tally
            self.denoisers[component] = entry

    @property
    def unit_count(self) -> int:
        return sum(len(entry.units) for entry in self.denoisers.values())

    def read(self) -> dict[str, dict[str, Any]]:
        """Per denoiser: ``calls`` and ``units`` (calls per unit), totals since the counters were made."""
        return {
            component: {"calls": entry.calls.value, "units": {name: t.value for name, t in entry.units.items()}}
            for component, entry in self.denoisers.items()
        }

    def begin(self) -> None:
        """Start a run's count."""
        self.start = self.read()

    def end(self) -> dict[str, dict[str, Any]]:
        """The run's counts since ``begin``, and per denoiser the units called at least once since the counters were
        made (``used``: warm-up calls included, whose first computes every unit the model uses)."""
        now = self.read()
        delta = run_delta(self.start, now)
        for component, counts in now.items():
            delta[component]["used"] = [name for name, n in counts["units"].items() if n]
        return delta

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        for leaf in self.leaves:
            if hasattr(leaf, _TALLY_ATTRIBUTE):
                delattr(leaf, _TALLY_ATTRIBUTE)
        self.hooks, self.leaves = [], []


def run_delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What one run added to the counters (``read`` before and after it)."""
    return {
        component: {
            "calls": counts["calls"] - before[component]["calls"],
            "units": {name: n - before[component]["units"][name] for name, n in counts["units"].items()},
        }
        for component, counts in after.items()
    }


def work_done(runs: list[dict[str, dict[str, Any]]]) -> list[dict[str, tuple[int, int]]]:
    """Per run, per denoiser: (unit computations made, unit computations a full run would make).

    A full run computes every unit once per denoiser call. Units never called since the counters were made (``used``;
    else: by no run) are not the model's work here (left out); a unit called more often than its denoiser (twice
    per forward) counts as fully computed. A unit a cache skipped on every timed call still counts: the first call
    after the cache was applied (a warm-up) computed it.
    """
    components = list(runs[0]) if runs else []
    used = {
        c: [
            name
            for name in runs[0][c]["units"]
            if any(name in run.get(c, {}).get("used", ()) or run.get(c, {}).get("units", {}).get(name) for run in runs)
        ]
        for c in components
    }
    return [
        {
            c: (
                sum(min(run[c]["units"].get(name, 0), run[c]["calls"]) for name in used[c]),
                run[c]["calls"] * len(used[c]),
            )
            for c in components
            if c in run
        }
        for run in runs
    ]
