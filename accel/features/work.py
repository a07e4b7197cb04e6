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

A full call computes every unit once, so the work skipped on a run is the units' calls short of one per denoiser
call. Where a call can compute part of its batch, work is counted in batch rows instead (``BlockWork(rows=True)``):
FasterCache skips the unconditional half of a [uncond, cond] batch by calling the denoiser on the conditional half
only, so every unit is still called once per denoiser call but computes half the rows (hidream-i1: counted by
calls, "0 cached" while the output changed). In rows, each counter keeps
the rows its unit computed (the leading dimension of the counted leaf's input) and the most rows one call has
computed (a full call's); one full call of the denoiser (its batch, the leading dimension of its latents, at its
most) computes each unit's most rows once. So a unit's work on a run is its rows over its most rows per call, and
a full run is the denoiser's rows over its most rows per call: both equal the calls wherever every call is
whole. A unit the model never called on any run (an unused branch) is left out of the count.

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


# Keyword names under which diffusers' denoisers take their latents (when not the first positional argument).
LATENT_KEYWORDS = ("hidden_states", "sample", "x", "latents", "img")


def _rows(value: Any) -> int:
    """The leading (batch) dimension of a tensor argument, 1 for anything else."""
    shape = getattr(value, "shape", None)
    return int(shape[0]) if shape else 1


def _count(module: Any, args: Any) -> None:
    """The pre-hook of a counted leaf: the rows its unit computes in this call (the same function for every leaf)."""
    rows, most = getattr(module, _TALLY_ATTRIBUTE)
    n = _rows(args[0]) if args else 1
    rows.add(n)
    most.at_least(n)


def _count_call(module: Any, args: Any) -> None:
    """The pre-hook of a counted leaf where calls suffice: one call of its unit (one tensor op, half ``_count``'s)."""
    getattr(module, _TALLY_ATTRIBUTE).add()


def latent_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The batch rows of a denoiser call: the leading dimension of its latents (first positional tensor, else the
    first of ``LATENT_KEYWORDS`` given), 1 when none is found."""
    for value in args:
        if hasattr(value, "shape"):
            return _rows(value)
    for key in LATENT_KEYWORDS:
        if hasattr(kwargs.get(key), "shape"):
            return _rows(kwargs[key])
    return 1


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
class _Rows:
    """Rows computed in total and the most rows one call computed."""

    rows: Tally
    most: Tally

    @classmethod
    def on(cls, device: str) -> _Rows:
        return cls(Tally(device), Tally(device))

    def count(self, n: int) -> None:
        self.rows.add(n)
        self.most.at_least(n)


@dataclass
class _Denoiser:
    calls: Tally
    rows: _Rows
    units: dict[str, _Rows] = field(default_factory=dict)

    def pre_hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.add()
        self.rows.count(latent_rows(args, kwargs))

    def call_hook(self, module: Any, args: tuple[Any, ...]) -> None:
        self.calls.add()


class BlockWork:
    """Counts, per denoiser, its calls and each work unit's calls; ``read`` gives the totals so far. With ``rows``,
    batch rows instead: the denoiser's latent rows and each unit's rows with the most one call had (what a cache
    that computes part of a batch needs: FasterCache's unconditional-batch skip). Rows cost a second tensor op per
    unit call, so a cache that skips whole calls counts calls (the overhead benchmark's cache variant: 1.011 of the
    bare call with calls, 1.017 with rows, on mini-flux)."""

    def __init__(self, models: dict[str, Any], device: str = "cpu", rows: bool = False) -> None:
        self.models = models
        self.rows = rows
        self.denoisers: dict[str, _Denoiser] = {}
        self.hooks: list[Any] = []
        self.leaves: list[Any] = []
        self.start: dict[str, dict[str, Any]] = {}
        for component, model in models.items():
            entry = _Denoiser(Tally(device), _Rows.on(device))
            if rows:
                self.hooks.append(model.register_forward_pre_hook(entry.pre_hook, with_kwargs=True))
            else:
                self.hooks.append(model.register_forward_pre_hook(entry.call_hook))
            for name, unit in work_units(model).items():
                leaf = _counted_leaf(unit)
                if hasattr(leaf, _TALLY_ATTRIBUTE):  # a leaf shared by two units counts for the first
                    continue
                counter = _Rows.on(device)
                setattr(leaf, _TALLY_ATTRIBUTE, (counter.rows, counter.most) if rows else counter.rows)
                self.leaves.append(leaf)
                self.hooks.append(leaf.register_forward_pre_hook(_count if rows else _count_call))
                entry.units[name] = counter
            self.denoisers[component] = entry

    @property
    def unit_count(self) -> int:
        return sum(len(entry.units) for entry in self.denoisers.values())

    def read(self) -> dict[str, dict[str, Any]]:
        """Per denoiser, totals since the counters were made: ``calls`` and ``units`` (calls per unit); with
        ``rows``, ``units`` holds rows per unit, beside ``rows`` (the denoiser's batch rows over its calls) and the
        most rows one call had (``most_rows``, ``unit_most_rows``)."""
        if not self.rows:  # calls: the units' tallies hold calls
            return {
                component: {"calls": entry.calls.value, "units": {n: c.rows.value for n, c in entry.units.items()}}
                for component, entry in self.denoisers.items()
            }
        return {
            component: {
                "calls": entry.calls.value,
                "rows": entry.rows.rows.value,
                "most_rows": entry.rows.most.value,
                "units": {name: c.rows.value for name, c in entry.units.items()},
                "unit_most_rows": {name: c.most.value for name, c in entry.units.items()},
            }
            for component, entry in self.denoisers.items()
        }

    def computed(self, component: str) -> float:
        """Full-call computations of ``component``'s units so far (rows over each unit's most rows per call)."""
        counts = self.read().get(component)
        return sum(_unit_calls(counts, name) for name in counts["units"]) if counts else 0.0

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
    """What one run added to the counters (``read`` before and after it); the most rows per call as after it."""
    delta: dict[str, dict[str, Any]] = {}
    for component, counts in after.items():
        start = before[component]
        delta[component] = {
            **counts,
            "calls": counts["calls"] - start["calls"],
            "units": {name: n - start["units"][name] for name, n in counts["units"].items()},
        }
        if "rows" in counts:
            delta[component]["rows"] = counts["rows"] - start["rows"]
    return delta


def _unit_calls(counts: dict[str, Any], name: str) -> float:
    """A unit's work in full calls: its rows over its most rows per call (its calls, in counts without rows)."""
    most = counts.get("unit_most_rows", {}).get(name, 1)
    return counts["units"].get(name, 0) / most if most else 0.0


def _full_calls(counts: dict[str, Any]) -> float:
    """A denoiser's calls in full calls: its rows over its most rows per call (its calls, in counts without rows)."""
    if "rows" not in counts:
        return float(counts["calls"])
    return counts["rows"] / counts["most_rows"] if counts["most_rows"] else 0.0


def _tidy(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def work_done(runs: list[dict[str, dict[str, Any]]]) -> list[dict[str, tuple[float, float]]]:
    """Per run, per denoiser: (unit computations made, unit computations a full run would make), in full calls.

    A full run computes every unit once per full denoiser call (rows over the most rows per call: a call on half
    the batch is half a call, for the denoiser and for each unit). Units never called since the counters were made
    (``used``; else: by no run) are not the model's work here (left out); a unit called more often than its
    denoiser (twice per forward) counts as fully computed. A unit a cache skipped on every timed call still counts:
    the first call after the cache was applied (a warm-up) computed it.
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
                _tidy(sum(min(_unit_calls(run[c], name), _full_calls(run[c])) for name in used[c])),
                _tidy(_full_calls(run[c]) * len(used[c])),
            )
            for c in components
            if c in run
        }
        for run in runs
    ]
