"""Below the modules: the first differing operation inside a module, by torch's operator-level tracing.

Forward hooks see module outputs only; a fault in code between modules (a function such as ``gelu``, a
residual add, a gate) shows at the next module's output, or at the block's. ``first_operation`` runs both
denoisers once more on their (identical) inputs under a ``TorchDispatchMode`` that records every ATen operation
dispatched while the named module runs on each side, in order, with its floating-point outputs; the two
sequences are walked side by side and the first operation whose output is beyond tolerance (or whose name
differs from the other side's at that position) is named: ``aten.gelu.default (operation 3 of ff)``.

Operations that only alias their input (views, ``t``, an eval-mode dropout returning its input) are left out of
both sequences, so that two implementations that reshape differently still line up; where one side runs more
operations than the other, its first extra one is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from accel.diverge.compare import Metrics, metrics, tensors_of


@dataclass(frozen=True)
class Operation:
    """The first differing ATen operation inside ``module``: its name, its position (1-based) among the
    module's recorded operations on side B, and the metrics of its output (None: the names differ there)."""

    module: str
    name: str
    index: int
    metrics: Metrics | None
    other: str = ""  # side A's operation at that position, when the names differ

    def describe(self) -> str:
        """``aten.gelu.default (operation 3 of ff)``, or the two names where the sequences part."""
        if self.metrics is None:
            return f"{self.name} where the reference runs {self.other} (operation {self.index} of {self.module})"
        return f"{self.name} (operation {self.index} of {self.module})"


class _Recorder(TorchDispatchMode):
    """Every ATen operation dispatched while ``active``: (name, its new floating-point outputs)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode.__init__ is unannotated
        self.active = False
        self.calls: list[tuple[str, list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.active and not _aliases(func):
            inputs = {id(t) for t in tensors_of(list(args)) + tensors_of(dict(kwargs or {}))}
            fresh = [t.detach().clone() for t in tensors_of(out) if t.is_floating_point() and id(t) not in inputs]
            if fresh:
                self.calls.append((str(func), fresh))
        return out


def _aliases(func: Any) -> bool:
    """Whether the operation returns a view of its input (``view``, ``t``, ``expand``...; not an in-place
    write): below autograd the outputs carry no view mark, the schema says it."""
    returns = getattr(getattr(func, "_schema", None), "returns", None) or []
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def record_operations(denoiser: torch.nn.Module, module_name: str, call: Callable[[], Any]) -> list[Any]:
    """The ATen operations (name, outputs) dispatched inside ``denoiser``'s submodule ``module_name`` (its first
    call) while ``call`` runs."""
    module = denoiser.get_submodule(module_name)
    recorder = _Recorder()
    done = [False]

    def enter(*_: Any) -> None:
        recorder.active = not done[0]

    def leave(*_: Any) -> None:
        recorder.active, done[0] = False, True

    handles = [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        with torch.no_grad(), recorder:
            call()
    finally:
        for handle in handles:
            handle.remove()
    return recorder.calls


def first_operation(
    denoiser_a: torch.nn.Module,
    denoiser_b: torch.nn.Module,
    names: tuple[str, str],
    calls: tuple[Callable[[], Any], Callable[[], Any]],
    tolerance: float,
) -> Operation | None:
    """The first operation inside module ``names[1]`` of side B whose output is beyond ``tolerance`` from the
    one at the same position inside ``names[0]`` of side A (or whose name differs); None when every recorded
    operation agrees."""
    ops_a = record_operations(denoiser_a, names[0], calls[0])
    ops_b = record_operations(denoiser_b, names[1], calls[1])
    for index, ((name_a, out_a), (name_b, out_b)) in enumerate(zip(ops_a, ops_b, strict=False), start=1):
        if name_a != name_b:
            return Operation(names[1], name_b, index, None, other=name_a)
        if len(out_a) != len(out_b) or any(x.shape != y.shape for x, y in zip(out_a, out_b, strict=False)):
            return Operation(names[1], name_b, index, None, other=name_a)
        found = max((metrics(x, y) for x, y in zip(out_a, out_b, strict=True)), key=lambda m: m.rel_l2)
        if not found.within(tolerance):
            return Operation(names[1], name_b, index, found)
    shared = min(len(ops_a), len(ops_b))
    if len(ops_b) > shared:  # side B runs more: its first extra operation (a fault's multiply, a missing fusion)
        return Operation(names[1], ops_b[shared][0], shared + 1, None, other="nothing")
    if len(ops_a) > shared:
        return Operation(names[1], "nothing", shared + 1, None, other=ops_a[shared][0])
    return None
