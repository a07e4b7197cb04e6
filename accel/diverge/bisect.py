"""Block by block, then inside the block: both denoisers run once more on IDENTICAL inputs (side A's inputs of
the first divergent call), every module's output recorded, and the first unit (a top-level module, or one
block of a block list: ``transformer_blocks.N``, ``single_transformer_blocks.N``, a UNet's ``down_blocks.N``,
``mid_block``, ``up_blocks.N``) beyond tolerance named, then the first of its submodules to finish beyond
tolerance (norms, modulation, attention, MLP).

Module names correspond through a native port's own weight-name mapping (its ``map_name``, what
``load_weights`` uses: diffusers' tensor names to the port's), or are identical. A module with no counterpart
on the other side is not compared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from accel.diverge.capture import DenoiserCall
from accel.diverge.compare import Metrics, metrics_of, tensors_of, worst
from accel.diverge.operations import first_operation

WEIGHT = ".weight"


@dataclass(frozen=True)
class Place:
    """Where inside the denoiser two runs part: ``block`` (a unit), ``submodule`` (its direct child that first
    diverged), ``operation`` (the deepest module that first diverged, relative to the block)."""

    block: str | None
    submodule: str | None
    operation: str | None
    metrics: Metrics | None
    note: str = ""
    op: str | None = None  # the first differing ATen operation inside the submodule (or the block)


def canonical_names(
    a: torch.nn.Module, b: torch.nn.Module, mapping: dict[str, str] | None = None
) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """How each side's module names map to shared names (side B's): through ``mapping`` when the user gives one
    (side A's dotted names, or runs of name segments, to side B's: ``{"ff.net.2": "ff.fc2"}``), else through a
    port's ``map_name`` (the one whose class defines it; the other side's names are mapped), else unchanged."""

    def identity(name: str) -> str:
        return name

    if mapping:
        pairs = sorted(mapping.items(), key=lambda item: -len(item[0]))  # the longest run first

        def given(name: str) -> str:
            dotted = f".{name}."
            for source, target in pairs:
                dotted = dotted.replace(f".{source}.", f".{target}.")
            return dotted[1:-1]

        return given, identity

    def through(map_name: Callable[[str], str]) -> Callable[[str], str]:
        def mapped(name: str) -> str:
            target = map_name(name + WEIGHT)
            return target[: -len(WEIGHT)] if target.endswith(WEIGHT) else name

        return mapped

    map_a, map_b = getattr(a, "map_name", None), getattr(b, "map_name", None)
    if map_b is not None and map_a is None:
        return through(map_b), identity
    if map_a is not None and map_b is None:
        return identity, through(map_a)
    return identity, identity


def units(module: torch.nn.Module) -> list[str]:
    """The denoiser's units in declaration order: its top-level children, with each block list expanded."""
    names: list[str] = []
    for name, child in module.named_children():
        if isinstance(child, torch.nn.ModuleList):
            names.extend(f"{name}.{index}" for index in range(len(child)))
        else:
            names.append(name)
    return names


def record_modules(module: torch.nn.Module, call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Run ``call`` with a forward hook on every named submodule of ``module``; each (name, output) in the
    order the modules finished."""
    finished: list[tuple[str, Any]] = []
    handles = []
    for name, sub in module.named_modules():
        if not name:
            continue

        def hook(_: Any, __: Any, output: Any, name: str = name) -> None:
            finished.append((name, [t.detach().clone() for t in tensors_of(output)]))

        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            call()
    finally:
        for handle in handles:
            handle.remove()
    return finished


def call_fresh(denoiser: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """The denoiser called once more, inside a fresh cache context where it has one (diffusers' cache hooks
    refuse a call outside any): a cache's state is not what the bisection compares."""

    def call() -> Any:
        context = getattr(denoiser, "cache_context", None)
        if context is None:
            return denoiser(*args, **kwargs)
        with context("diverge-bisect"):
            return denoiser(*args, **kwargs)

    return call


def identical_inputs(a: DenoiserCall, b: DenoiserCall) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Side B's call with side A's tensors wherever they share a name (or position) and shape: B's own
    calling convention, A's values."""

    def pick(mine: Any, theirs: Any) -> Any:
        if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor) and mine.shape == theirs.shape:
            return theirs.to(mine.dtype)
        if isinstance(mine, tuple) and isinstance(theirs, tuple) and len(mine) == len(theirs):
            return tuple(pick(m, t) for m, t in zip(mine, theirs, strict=True))
        return mine

    args = tuple(pick(mine, a.args[i]) if i < len(a.args) else mine for i, mine in enumerate(b.args))
    kwargs = {key: pick(value, a.kwargs[key]) if key in a.kwargs else value for key, value in b.kwargs.items()}
    return args, kwargs


def _first_beyond(
    order: list[tuple[str, Any]], theirs: dict[str, list[Any]], keep: Callable[[str], bool], tolerance: float
) -> tuple[str, Metrics] | None:
    seen: dict[str, int] = {}
    for name, outputs in order:
        if not keep(name) or name not in theirs:
            continue
        index = seen.get(name, 0)
        seen[name] = index + 1
        if index >= len(theirs[name]):
            continue
        found = worst(metrics_of(outputs, theirs[name][index]))
        if found.comparable and not found.within(tolerance):
            return name, found
    return None


def locate(
    denoiser_a: torch.nn.Module,
    denoiser_b: torch.nn.Module,
    call_a: DenoiserCall,
    call_b: DenoiserCall,
    tolerance: float,
    mapping: dict[str, str] | None = None,
) -> Place:
    """Run both denoisers on side A's inputs of ``call_a`` and name the first unit and submodule beyond
    ``tolerance``, then the first ATen operation beyond it inside that submodule (or inside the block when no
    submodule is: ``accel.diverge.operations``). ``mapping``: module correspondence given by the user."""
    canon_a, canon_b = canonical_names(denoiser_a, denoiser_b, mapping)
    args_b, kwargs_b = identical_inputs(call_a, call_b)
    run_a, run_b = call_fresh(denoiser_a, call_a.args, call_a.kwargs), call_fresh(denoiser_b, args_b, kwargs_b)
    order_a = [(canon_a(n), o) for n, o in record_modules(denoiser_a, run_a)]
    order_b = [(canon_b(n), o) for n, o in record_modules(denoiser_b, run_b)]
    theirs: dict[str, list[Any]] = {}
    for name, outputs in order_b:
        theirs.setdefault(name, []).append(outputs)
    shared_units = {canon_a(u) for u in units(denoiser_a)}
    block = _first_beyond(order_a, theirs, lambda n: n in shared_units, tolerance)
    if block is None:
        return Place(
            None,
            None,
            None,
            None,
            "with identical inputs every block agrees: the divergence comes with "
            "the inputs or the denoiser's state (a cache), not its computation",
        )
    name, found = block
    real_a = {canon_a(n): n for n, _ in denoiser_a.named_modules()}
    real_b = {canon_b(n): n for n, _ in denoiser_b.named_modules()}

    def op_inside(module: str) -> str | None:
        if module not in real_a or module not in real_b:
            return None
        found_op = first_operation(denoiser_a, denoiser_b, (real_a[module], real_b[module]), (run_a, run_b), tolerance)
        return found_op.describe() if found_op is not None else None

    prefix = name + "."
    inner = _first_beyond(order_a, theirs, lambda n: n.startswith(prefix), tolerance)
    if inner is None and not any(n.startswith(prefix) for n, _ in order_a):
        note = f"{name} is one module, with no submodules: its own computation (its weights, e.g. quantized)"
        return Place(name, None, None, found, note, op_inside(name))
    if inner is None:
        return Place(
            name,
            None,
            None,
            found,
            "no submodule of the block is beyond tolerance: the block's own "
            "code (residual adds, gates) between its submodules",
            op_inside(name),
        )
    relative = inner[0][len(prefix) :]
    submodule = relative.split(".")[0]
    return Place(name, submodule, relative, inner[1], op=op_inside(prefix + submodule))
