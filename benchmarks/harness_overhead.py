"""Harness overhead: the same configuration through the harness and through a bare ``pipe(...)`` loop.

Both run in this one process on the same loaded pipeline, interleaved call by call so that machine
drift affects both alike. The harness path is what a sweep times: ``AdapterTarget.generate`` (request
mapping, output normalisation) with the stage-timing hooks installed and the synchronised timer around
it. Prints each median and the ratio; the goal is an overhead of at most 2% of warm latency.

    python benchmarks/harness_overhead.py [--model tiny-flux] [--calls 30] [--steps 4] [--size 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

from accel.sweep.preload import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-flux", help="zoo name, checkpoint directory or hub id")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    quiet_libraries()

    from accel.measure.stages import StageRecorder
    from accel.measure.timing import synchronize, timed
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget, Request

    target = AdapterTarget(ModelSpec(name=args.model, source=args.model))
    pipeline = target.load()
    request = Request(
        prompt="a red fox in the snow", seed=0, steps=args.steps, height=args.size, width=args.size, guidance_scale=3.5
    )
    bare_kwargs = target.call_kwargs(request)

    def bare() -> float:
        bare_kwargs["generator"] = target.call_kwargs(request)["generator"]  # a fresh seeded generator
        synchronize(target.device)
        start = time.perf_counter()
        pipeline(**bare_kwargs)
        synchronize(target.device)
        return time.perf_counter() - start

    recorder = StageRecorder(pipeline, target.device)
    harness_samples: list[float] = []

    def harness() -> None:
        with timed(target.device, harness_samples):
            recorder.start()
            target.generate(request)
            recorder.stop()

    for _ in range(3):  # warm both paths
        bare()
        harness()
    harness_samples.clear()
    bare_samples = []
    for _ in range(args.calls):
        bare_samples.append(bare())
        harness()
    recorder.remove()

    bare_median = statistics.median(bare_samples)
    harness_median = statistics.median(harness_samples)
    print(f"model {args.model}, {args.steps} steps, {args.size}x{args.size}, {args.calls} interleaved calls each")
    print(f"bare pipe(...) median:  {bare_median * 1e3:8.2f} ms")
    print(f"harness median:         {harness_median * 1e3:8.2f} ms")
    ratio = harness_median / bare_median
    print(f"harness / bare:         {ratio:8.3f}  (overhead {ratio - 1:+.1%})")


if __name__ == "__main__":
    main()
