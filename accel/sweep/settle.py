"""A process settled for a cell's memory: the one-time costs of a pipeline family paid before the cell starts.

The first cell of a family in a process pays what later cells of it do not: the modules its pipeline imports
on first use, the allocator's arenas, the caches its kernels fill once per shape. Counted from the cell's
start they were its memory: the same tiny-flux baseline read 27 MiB as a worker's first cell and 2 MiB as its
second. ``settle(spec, device)`` pays them once per process, model and workload, before the cell's start
(``accel.measure.memory.resident_at_start``): it loads the model unaccelerated, makes one call of the cell's
first request, and frees it. A cell's memory then counts the same things wherever it runs in a process: the
first cell of a worker, a later cell of an inline run, each rank of a parallel cell.

Only where the host's RSS is the measure (off CUDA): the device's allocated bytes count nothing of the sort.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

from accel.sweep.spec import CellSpec, build_requests

# What ``settle`` already settled in this process: (model, workload) as JSON.
_SETTLED: set[str] = set()
# The record's ``memory_settled`` values.
SETTLED = "settled: one unaccelerated load and call of this model and workload ran in this process first"
ON_DEVICE = "not needed: device memory is the measure"
UNSETTLED = "not settled: the unaccelerated settling call failed"


def settle_key(spec: CellSpec) -> str:
    """What one settling covers: the model (source, target, dtype, call options) and the workload's shapes."""
    model = spec.model.model_dump(mode="json", exclude={"name"})  # two names for one build settle once
    return json.dumps([model, spec.workload.model_dump(mode="json")], sort_keys=True)


def settle(spec: CellSpec, device: str, note: Callable[[str], Any] | None = None) -> str:
    """Pay this model's one-time costs in this process before the cell's memory start (see the module's
    docstring); once per process, model and workload. ``note`` is told the phase when a settling call runs (the
    cell's ``note_phase``). Returns what the record's ``memory_settled`` says."""
    if device.startswith("cuda"):
        return ON_DEVICE
    _settle_compiler(spec)
    key = settle_key(spec)
    if key in _SETTLED:
        return SETTLED
    from accel.targets.build import make_target

    if note is not None:
        note("settling the process (one unaccelerated load and call, for the memory's start)")
    target = make_target(spec.model)
    try:  # a model that cannot load or call here fails the cell's own load or call, with its own error
        target.load({})
        target.generate(build_requests(spec.workload)[0])
    except Exception:
        return UNSETTLED
    finally:
        target.pipeline = None
        del target
        gc.collect()
    _SETTLED.add(key)
    return SETTLED


def _settle_compiler(spec: CellSpec) -> None:
    """A compiling cell's process-wide first use of torch.compile paid once per process before the cell's start:
    inductor's modules (dynamo, AOT autograd, the lowerings and the C++ code generator: about 40 MiB of the first
    compiling cell's memory on a CPU) and one compile of a two-op function with the cell's backend (its code
    caches and the toolchain's first use). What the cell's own graphs cost stays the cell's."""
    if "compile" not in spec.features or "compile" in _SETTLED:
        return
    import torch

    options = spec.features.get("compile")
    backend = options.get("backend", "inductor") if isinstance(options, dict) else "inductor"
    _SETTLED.add("compile")
    try:
        import torch._inductor.codegen.cpp
        import torch._inductor.compile_fx
        import torch._inductor.lowering

        torch.compile(_two_ops, backend=backend)(torch.ones(8, 8))
    except Exception:  # the cell's own compile reports what fails
        return
    finally:
        torch._dynamo.reset()
        gc.collect()


def _two_ops(x: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(x @ x) + 1
