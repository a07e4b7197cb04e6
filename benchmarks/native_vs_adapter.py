"""Warm latency of the native pipeline against the adapter (diffusers) at the same configuration.

Both load the same checkpoint in this one process and run the same request, interleaved call by call
so machine drift affects both alike; prints each median and the ratio native / adapter (below 1: the
native pipeline is faster). Runs unchanged on a GPU with a real checkpoint:

    python benchmarks/native_vs_adapter.py [--source tiny-flux|DIR] [--device auto] [--dtype float32]
        [--steps 8] [--size 64] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics

from accel.sweep.preload import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="tiny-flux", help="zoo name or FLUX checkpoint directory")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    quiet_libraries()

    from accel.measure.timing import timed
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget, Request
    from accel.targets.native import NativeTarget

    def spec(target: str) -> ModelSpec:
        return ModelSpec(name=target, source=args.source, target=target, device=args.device, dtype=args.dtype)

    adapter, native = AdapterTarget(spec("adapter")), NativeTarget(spec("native"))
    adapter.load()
    native.load()
    request = Request("a red fox in the snow", 0, args.steps, args.size, args.size, guidance_scale=3.5)
    samples: dict[str, list[float]] = {"adapter": [], "native": []}
    for _ in range(3):  # warm up both
        adapter.generate(request)
        native.generate(request)
    for _ in range(args.calls):
        for name, target in (("adapter", adapter), ("native", native)):
            with timed(target.device, samples[name]):
                target.generate(request)
    adapter_median = statistics.median(samples["adapter"])
    native_median = statistics.median(samples["native"])
    print(f"{args.source} on {adapter.device} ({args.dtype}), {args.steps} steps, {args.size}x{args.size}")
    print(f"adapter (diffusers) median: {adapter_median * 1e3:8.2f} ms")
    print(f"native median:              {native_median * 1e3:8.2f} ms")
    print(f"native / adapter:           {native_median / adapter_median:8.3f}")


if __name__ == "__main__":
    main()
