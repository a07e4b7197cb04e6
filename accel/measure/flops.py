"""FLOPs, peak throughput, the roofline floor and MFU.

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on one denoiser forward with the
exact inputs the pipeline gave it (captured by a hook during a real call), once per model and
workload. Peaks are dense (no sparsity) datasheet numbers for known accelerators, matched from the
device name; on a CPU the peak is measured with a GEMM once per host and sweep (recorded in
``environment.json``). A step measured
faster than FLOPs / peak is physically impossible: it is flagged as an invalid measurement.
"""

from __future__ import annotations

import time
from typing import Any

# Dense tensor-core peaks in FLOP/s, from the vendors' datasheets (without structured sparsity).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "B200": {"bfloat16": 2.25e15, "float16": 2.25e15, "float8": 4.5e15},
    "H200": {"bfloat16": 989e12, "float16": 989e12, "float8": 1979e12},
    "H100": {"bfloat16": 989e12, "float16": 989e12, "float8": 1979e12},
    "H20": {"bfloat16": 148e12, "float16": 148e12, "float8": 296e12},
    "A100": {"bfloat16": 312e12, "float16": 312e12, "float32": 156e12},
    "L40S": {"bfloat16": 362e12, "float16": 362e12, "float8": 733e12},
    "L20": {"bfloat16": 119.5e12, "float16": 119.5e12, "float8": 239e12},
    "4090": {"bfloat16": 165.2e12, "float16": 165.2e12, "float8": 330.3e12},
}


def _cpu_attention_mapping() -> dict[Any, Any]:
    """FLOP formulas FlopCounterMode lacks: SDPA on a CPU runs ``_scaled_dot_product_flash_attention_for_cpu``,
    which torch 2.13 does not count (attention would silently count as zero FLOPs)."""
    import torch
    from torch.utils.flop_counter import sdpa_flop_count

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None:
        return {}

    def cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    return {op: cpu_sdpa_flop}


def count_flops(module: Any, args: tuple, kwargs: dict[str, Any]) -> int:
    """FLOPs of one ``module(*args, **kwargs)`` call, without autograd."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=_cpu_attention_mapping()) as counter:
        module(*args, **kwargs)
    return int(counter.get_total_flops())


class InputCapture:
    """Records the first call's inputs to a module (a forward pre-hook), to count its FLOPs later."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.args: tuple | None = None
        self.kwargs: dict[str, Any] | None = None
        self.handle = module.register_forward_pre_hook(self._capture, with_kwargs=True)

    def _capture(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if self.args is None:
            self.args, self.kwargs = args, dict(kwargs)
        self.handle.remove()

    def flops(self) -> int | None:
        if self.args is None:
            return None
        return count_flops(self.module, self.args, self.kwargs or {})


def device_peak(device: str, dtype: str, recorded: float | None = None) -> tuple[float | None, str]:
    """Peak FLOP/s for ``dtype`` on ``device`` and where the number comes from.

    On a CPU, ``recorded`` is the peak the sweep measured once for this host (``environment.json``):
    measuring it again in every cell made the floor of one model vary 3x between cells on a loaded
    machine. Without it the peak is measured here, and the source says so."""
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name()
        for key, peaks in PEAK_FLOPS.items():
            if key in name:
                peak = peaks.get(dtype) or peaks.get("bfloat16")
                return peak, f"datasheet {key} {dtype} dense"
        return None, f"no peak known for {name}"
    if recorded:
        return recorded, f"{dtype} GEMM measured once per sweep on this CPU (environment.json)"
    return measure_cpu_peak(dtype), f"{dtype} GEMM measured in this cell on this CPU (no per-sweep value)"


def measure_cpu_peak(dtype: str = "float32", size: int = 1024, repeats: int = 5) -> float:
    """Best FLOP/s of a square GEMM on the CPU (a few runs; the fastest is the closest to peak)."""
    import torch

    torch_dtype = getattr(torch, dtype) if dtype in ("float32", "bfloat16", "float16") else torch.float32
    a = torch.randn(size, size, dtype=torch_dtype)
    b = torch.randn(size, size, dtype=torch_dtype)
    torch.mm(a, b)  # warm up the kernel selection
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def roofline(flops_per_step: float, peak: float | None, step_times: list[float]) -> dict[str, Any]:
    """Floor time per step, MFU of the median step, and whether any step beat the floor."""
    if not peak or not flops_per_step or not step_times:
        return {"floor_step_s": None, "mfu": None, "below_floor": False}
    import statistics

    floor = flops_per_step / peak
    median = statistics.median(step_times)
    fastest = min(step_times)
    return {
        "floor_step_s": floor,
        "mfu": flops_per_step / median / peak if median > 0 else None,
        "fastest_step_s": fastest,
        "below_floor": fastest < floor,
    }
