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

# Dense peaks in FLOP/s from the vendors' datasheets (without structured sparsity; datasheets print
# sparse tensor-core numbers at twice these). Keys: "bfloat16"/"float16"/"float8" (tensor cores),
# "tfloat32" (float32 matmuls on tensor cores, used when torch allows TF32) and "float32" (CUDA
# cores: what a float32 matmul gets with torch's default, TF32 off). A dtype missing here has no
# known peak: no floor is claimed rather than another dtype's.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    # NVIDIA B200 datasheet (HGX B200, per GPU): FP8 4.5 PF, BF16 2.25 PF, TF32 1.1 PF dense.
    "B200": {"bfloat16": 2.25e15, "float16": 2.25e15, "float8": 4.5e15, "tfloat32": 1.1e15},
    # H100/H200 SXM datasheets: FP8 1979, BF16/FP16 989, TF32 494.5 (dense), FP32 67 TFLOP/s.
    "H200": {"bfloat16": 989e12, "float16": 989e12, "float8": 1979e12, "tfloat32": 494.5e12, "float32": 67e12},
    "H100": {"bfloat16": 989e12, "float16": 989e12, "float8": 1979e12, "tfloat32": 494.5e12, "float32": 67e12},
    # H20 datasheet: FP8 296, BF16 148, TF32 74, FP32 44 TFLOP/s.
    "H20": {"bfloat16": 148e12, "float16": 148e12, "float8": 296e12, "tfloat32": 74e12, "float32": 44e12},
    # A100 SXM datasheet: BF16/FP16 312, TF32 156 (dense), FP32 19.5 TFLOP/s; no FP8.
    "A100": {"bfloat16": 312e12, "float16": 312e12, "tfloat32": 156e12, "float32": 19.5e12},
    # L40S datasheet: FP8 733, BF16 362, TF32 183 (dense), FP32 91.6 TFLOP/s.
    "L40S": {"bfloat16": 362e12, "float16": 362e12, "float8": 733e12, "tfloat32": 183e12, "float32": 91.6e12},
    # L20 datasheet: FP8 239, BF16 119.5 TFLOP/s dense.
    "L20": {"bfloat16": 119.5e12, "float16": 119.5e12, "float8": 239e12},
    # RTX 4090 (Ada whitepaper, FP32 accumulate): FP8 330.3, BF16 165.2, TF32 82.6, FP32 82.6 TFLOP/s.
    "4090": {"bfloat16": 165.2e12, "float16": 165.2e12, "float8": 330.3e12, "tfloat32": 82.6e12, "float32": 82.6e12},
}


def _tf32_enabled() -> bool:
    """Whether torch runs float32 matmuls on tensor cores (TF32); torch leaves it off by default."""
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"


def peak_for(device_name: str, dtype: str, tf32: bool = False) -> tuple[float | None, str]:
    """Datasheet peak of a named accelerator for ``dtype`` and the label saying which peak it is.

    float32 maps to the TF32 tensor-core peak when ``tf32`` (torch's matmul precision allows it), else to
    the float32 CUDA-core peak; a dtype the table lacks gives no peak rather than another dtype's.
    """
    for key, peaks in PEAK_FLOPS.items():
        if key in device_name:
            entry = "tfloat32" if dtype == "float32" and tf32 else dtype
            peak = peaks.get(entry)
            if peak is None:
                return None, f"no datasheet {entry} peak known for {key}"
            return peak, f"datasheet {key} {entry} dense"
    return None, f"no peak known for {device_name}"


def _cpu_attention_mapping() -> dict[Any, Any]:
    """FLOP formulas FlopCounterMode lacks: SDPA on a CPU runs ``_scaled_dot_product_flash_attention_for_cpu``,
    which torch 2.13 does not count (attention would silently count as zero FLOPs)."""
    import torch
    from torch.utils.flop_counter import sdpa_flop_count

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None:
        return {}

    def cpu_sdpa_flop(
        query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any
    ) -> int:
        return int(sdpa_flop_count(query_shape, key_shape, value_shape))

    return {op: cpu_sdpa_flop}


def count_flops(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
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
        self.args: tuple[Any, ...] | None = None
        self.kwargs: dict[str, Any] | None = None
        self.handle = module.register_forward_pre_hook(self._capture, with_kwargs=True)

    def _capture(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
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

        return peak_for(torch.cuda.get_device_name(), dtype, tf32=_tf32_enabled())
    if recorded:
        return recorded, f"{dtype} GEMM measured once per sweep on this CPU (environment.json)"
    return measure_cpu_peak(dtype), f"{dtype} GEMM measured in this cell on this CPU (no per-sweep value)"


def measure_cpu_peak(
    dtype: str = "float32", size: int = 1024, repeats: int = 10, warmup_s: float = 0.3, min_s: float = 0.5
) -> float:
    """Best FLOP/s of a square GEMM on the CPU: GEMMs for ``warmup_s`` first (the thread pool and the clock
    ramp up: one warm-up GEMM left a fresh process at 50-60 GFLOP/s where the same 2 threads reach 190, and the
    coverage run's floor was then beaten by 4 cells), then the fastest of at least ``repeats`` runs over at
    least ``min_s`` (the fastest is the closest to peak). About a second."""
    import torch

    torch_dtype = getattr(torch, dtype) if dtype in ("float32", "bfloat16", "float16") else torch.float32
    a = torch.randn(size, size, dtype=torch_dtype)
    b = torch.randn(size, size, dtype=torch_dtype)
    started = time.perf_counter()
    torch.mm(a, b)  # the kernel selection, at least once
    while time.perf_counter() - started < warmup_s:
        torch.mm(a, b)
    best = float("inf")
    runs = 0
    started = time.perf_counter()
    while runs < repeats or time.perf_counter() - started < min_s:
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
        runs += 1
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
