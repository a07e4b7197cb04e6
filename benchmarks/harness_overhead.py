"""Harness overhead: a truly bare ``pipe(...)`` loop against the harness path, and the stage recorder's cost.

Three configurations of one loaded pipeline, interleaved in this one process (each round runs all three,
in a rotating order, so drift and background load hit them alike):

- ``bare``: ``pipe(**kwargs)`` between two clock reads; nothing of omni-accel is installed on the pipeline
  (checked before every bare call: no forward hooks on its modules, ``vae.decode`` and ``scheduler.step``
  unwrapped).
- ``harness``: what a sweep times around a call without stage timing: ``timed(...)`` around
  ``AdapterTarget.generate`` (request mapping, output normalisation).
- ``recorder``: the same with the stage recorder installed and ``start``/``stop`` inside the timed region
  (its hooks synchronise the device at every component boundary).

Prints each configuration's median, then the per-round paired ratios harness / bare (the harness's own
overhead), recorder / harness (the stage recorder's cost) and recorder / bare, each as a median with a 95%
bootstrap interval over rounds, with the machine and its load average before and after.

    python benchmarks/harness_overhead.py [--source tiny-flux|DIR] [--device auto] [--dtype float32]
        [--rounds 30] [--steps 4] [--size 64]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from typing import Any

from accel.sweep.preload import quiet_libraries

CONFIGS = ("bare", "harness", "recorder")
RATIOS = (("harness", "bare"), ("recorder", "harness"), ("recorder", "bare"))


def installed_hooks(pipeline: Any) -> int:
    """Forward hooks on the pipeline's modules plus instance-level wrappers of ``vae.decode`` and
    ``scheduler.step``: what the stage recorder installs; 0 on a pipeline as diffusers loaded it."""
    import torch

    count = 0
    for component in pipeline.components.values():
        if isinstance(component, torch.nn.Module):
            for module in component.modules():
                count += len(module._forward_hooks) + len(module._forward_pre_hooks)
    for owner, method in (("vae", "decode"), ("scheduler", "step")):
        count += method in vars(getattr(pipeline, owner, None) or object())
    return count


def bootstrap_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the median of ``values``."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def measure(target: Any, request: Any, rounds: int, warmup: int = 2) -> dict[str, Any]:
    """Samples per configuration (interleaved, rotating order), the hook count seen before each bare call,
    and each paired ratio's median and bootstrap interval."""
    from accel.measure.stages import StageRecorder
    from accel.measure.timing import synchronize, timed

    pipeline = target.pipeline
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    bare_hooks: list[int] = []
    stage_reports: list[dict[str, Any]] = []

    def bare(sink: list[float]) -> None:
        bare_hooks.append(installed_hooks(pipeline))
        kwargs = target.call_kwargs(request)  # outside the clock: a fresh seeded generator
        synchronize(target.device)
        start = time.perf_counter()
        pipeline(**kwargs)
        synchronize(target.device)
        sink.append(time.perf_counter() - start)

    def harness(sink: list[float]) -> None:
        with timed(target.device, sink):
            target.generate(request)

    def recorder(sink: list[float]) -> None:
        stages = StageRecorder(pipeline, target.device)  # installed outside the clock, as a sweep does
        try:
            with timed(target.device, sink):
                stages.start()
                target.generate(request)
                stage_reports.append(stages.stop())
        finally:
            stages.remove()

    run = {"bare": bare, "harness": harness, "recorder": recorder}
    for _ in range(warmup):
        for name in CONFIGS:
            run[name]([])
    bare_hooks.clear()
    stage_reports.clear()
    for index in range(rounds):
        for offset in range(len(CONFIGS)):
            name = CONFIGS[(index + offset) % len(CONFIGS)]
            run[name](samples[name])
    ratios = {}
    for top, bottom in RATIOS:
        paired = [a / b for a, b in zip(samples[top], samples[bottom], strict=True)]
        low, high = bootstrap_interval(paired)
        ratios[f"{top}/{bottom}"] = {"median": statistics.median(paired), "low": low, "high": high}
    return {"samples": samples, "bare_hooks": bare_hooks, "stage_reports": stage_reports, "ratios": ratios}


def machine() -> str:
    """CPU model, core count and torch threads (and the GPU when there is one)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads{gpu}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", "--model", default="tiny-flux", help="zoo name, checkpoint directory or hub id")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of the three configurations")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    quiet_libraries()

    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget, Request

    target = AdapterTarget(ModelSpec(name="overhead", source=args.source, device=args.device, dtype=args.dtype))
    target.load()
    request = Request(
        prompt="a red fox in the snow", seed=0, steps=args.steps, height=args.size, width=args.size, guidance_scale=3.5
    )
    load_before = os.getloadavg()
    result = measure(target, request, args.rounds)
    load_after = os.getloadavg()
    if any(result["bare_hooks"]):
        raise SystemExit(f"the bare loop ran with omni-accel hooks installed: {result['bare_hooks']}")
    print(f"machine: {machine()}")
    print(f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print(f"load average (1, 5, 15 min) after:  {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(
        f"{args.source} on {target.device} ({args.dtype}), {args.steps} steps, {args.size}x{args.size}, "
        f"{args.rounds} interleaved rounds (rotating order)"
    )
    for name in CONFIGS:
        values = result["samples"][name]
        low, _, high = (q * 1e3 for q in statistics.quantiles(values, n=4))
        print(f"{name:9s} median {statistics.median(values) * 1e3:8.2f} ms  (IQR {low:.2f}-{high:.2f})")
    for key, ratio in result["ratios"].items():
        print(f"{key:18s} {ratio['median']:.3f}  (95% bootstrap interval {ratio['low']:.3f}-{ratio['high']:.3f})")


if __name__ == "__main__":
    main()
