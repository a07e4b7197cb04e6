"""Harness overhead: a truly bare ``pipe(...)`` loop against the calls a sweep actually times.

The harness configurations call the sweep's own measurement functions (``accel.sweep.timed``), not a copy of
them, so whatever a cell runs around its timed calls (every context manager, evidence window and meter) is
what is measured here:

- ``bare``: ``pipe(**kwargs)`` between two clock reads; nothing of omni-accel is installed on the pipeline
  (checked before every bare call: no forward hooks on its modules, ``vae.decode`` and ``scheduler.step``
  unwrapped).
- ``headline``: one call through ``timed.measure_alone`` (the warm latency a report headlines: its meters from
  ``timed.headline_meters``, the features' evidence window, the timer), on the pipeline with ``apply()`` entered
  as a baseline cell has it.
- ``interleaved``: one ABBA pair through ``timed.pair_drawer`` inside ``timed.interleaved_meters`` (the calls
  a speedup comes from); both of its calls are harness calls (the reference path pauses global state, the
  variant path opens evidence windows), here on the same pipeline.
- ``recorder``: one call of ``timed.stage_pass`` (the stage hooks synchronise at every component boundary).

Each round runs every configuration once, in a rotating order, so drift and background load hit them alike.
Prints each configuration's median, then per-round paired ratios (headline / bare is the one the README
quotes: the harness's own cost on the headline number), each as a median with a 95% bootstrap interval over
rounds, with the machine and its load average before and after. The default is the quickstart's mini-flux
call (20 steps, 64x64, 2 images per prompt, ``max_sequence_length`` 32).

    python benchmarks/harness_overhead.py [--source mini-flux|tiny-flux|DIR] [--device auto] [--rounds 15]
        [--steps 20] [--size 64] [--images 2] [--threads 1]
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

CONFIGS = ("bare", "headline", "interleaved", "recorder")
RATIOS = (("headline", "bare"), ("interleaved", "bare"), ("recorder", "headline"))


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


def one_call_spec(spec: Any) -> Any:
    """``spec`` with one timed pass (``measure_alone`` then times exactly one call per request)."""
    from dataclasses import replace

    return replace(spec, measure=spec.measure.model_copy(update={"repeats": 1, "warmup": 0}))


def measure(spec: Any, target: Any, applied: Any, request: Any, rounds: int, warmup: int = 2) -> dict[str, Any]:
    """Samples per configuration (interleaved, rotating order), the hook count seen before each bare call,
    and each paired ratio's median and bootstrap interval. ``applied`` must be entered (the cell's state)."""
    import contextlib

    from accel.measure.timing import synchronize
    from accel.sweep import timed

    pipeline = target.pipeline
    single = one_call_spec(spec)
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    bare_hooks: list[int] = []
    pairs: list[tuple[float, float]] = []

    def bare(sink: list[float]) -> None:
        bare_hooks.append(installed_hooks(pipeline))
        kwargs = target.call_kwargs(request)  # outside the clock: a fresh seeded generator
        synchronize(target.device)
        start = time.perf_counter()
        pipeline(**kwargs)
        synchronize(target.device)
        sink.append(time.perf_counter() - start)

    def headline(sink: list[float]) -> None:
        sink.extend(timed.measure_alone(single, target, applied, [request])["samples"])

    def interleaved(sink: list[float]) -> None:
        draw = timed.pair_drawer(target, target, applied, [request])
        with contextlib.ExitStack() as stack:
            for meter in timed.interleaved_meters():
                stack.enter_context(meter)
            reference_s, variant_s = draw(len(pairs))
        pairs.append((reference_s, variant_s))
        sink.append(variant_s)

    def recorder(sink: list[float]) -> None:
        report = timed.stage_pass(target, applied, [request])
        sink.extend(report["outer_s"] if report else [])

    run = {"bare": bare, "headline": headline, "interleaved": interleaved, "recorder": recorder}
    for _ in range(warmup):
        for name in CONFIGS:
            run[name]([])
    bare_hooks.clear()
    pairs.clear()
    for index in range(rounds):
        for offset in range(len(CONFIGS)):
            name = CONFIGS[(index + offset) % len(CONFIGS)]
            run[name](samples[name])
    ratios = {}
    for top, bottom in RATIOS:
        if len(samples[top]) != len(samples[bottom]):
            continue  # native pipelines have no stage pass of the harness's own
        paired = [a / b for a, b in zip(samples[top], samples[bottom], strict=True)]
        low, high = bootstrap_interval(paired)
        ratios[f"{top}/{bottom}"] = {"median": statistics.median(paired), "low": low, "high": high}
    return {"samples": samples, "bare_hooks": bare_hooks, "pairs": pairs, "ratios": ratios}


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


def baseline_cell(source: str, device: str, steps: int, size: int, images: int) -> Any:
    """The quickstart's mini-flux workload (its first prompt) as a baseline cell's spec."""
    from accel.profile import Measure, ModelSpec, Workload
    from accel.sweep.spec import BASELINE, CellSpec

    workload = Workload(
        prompts=["a white circle on the left, on a cyan background"], negative_prompt="blurry", seeds=[0],
        steps=steps, height=size, width=size, guidance_scale=3.5, num_images_per_prompt=images,
    )  # fmt: skip
    return CellSpec(ModelSpec(name="overhead", source=source, device=device), workload, Measure(), BASELINE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", "--model", default="mini-flux", help="zoo name, checkpoint directory or hub id")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the configurations")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--images", type=int, default=2, help="images per prompt")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1, the quickstart's measure.threads; 0: torch's default, one per core)",
    )
    args = parser.parse_args()
    quiet_libraries()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from accel.features import apply
    from accel.sweep.spec import build_requests
    from accel.targets.build import make_target

    spec = baseline_cell(args.source, args.device, args.steps, args.size, args.images)
    target = make_target(spec.model)
    target.load({})
    request = build_requests(spec.workload)[0]
    applied = apply(target.pipeline, num_inference_steps=args.steps, device=target.device, windows_on_calls=False)
    load_before = os.getloadavg()
    with applied:
        result = measure(spec, target, applied, request, args.rounds)
    load_after = os.getloadavg()
    if any(result["bare_hooks"]):
        raise SystemExit(f"the bare loop ran with omni-accel hooks installed: {result['bare_hooks']}")
    print(f"machine: {machine()}")
    print(f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print(f"load average (1, 5, 15 min) after:  {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(
        f"{args.source} on {target.device}, {args.steps} steps, {args.size}x{args.size}, {args.images} image(s) per "
        f"prompt, {args.rounds} rounds (rotating order)"
    )
    for name in CONFIGS:
        values = result["samples"][name]
        if not values:
            continue
        low, _, high = (q * 1e3 for q in statistics.quantiles(values, n=4))
        print(f"{name:11s} median {statistics.median(values) * 1e3:8.2f} ms  (IQR {low:.2f}-{high:.2f})")
    for key, ratio in result["ratios"].items():
        print(f"{key:20s} {ratio['median']:.3f}  (95% bootstrap interval {ratio['low']:.3f}-{ratio['high']:.3f})")


if __name__ == "__main__":
    main()
