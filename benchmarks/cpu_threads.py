"""How many torch threads a CPU cell should run with: call time and the spread of identical adjacent calls.

For each thread count, in alternating order per round, two bare ``pipe(...)`` calls back to back (an identical
pair, as an ABBA pair of identical configurations is): their ratio should be 1.0, and how far it strays is
the noise a speed verdict must see through. Prints, per thread count, the median call, the calls' CV and the
pair ratios' quartiles and extremes, then the ratio of the medians (thread counts side by side in one run).
A call bound by dispatch rather than by GEMMs (mini-flux at 64x64) is as fast on one thread as on two, and on a
shared 2-core VM a second thread makes every operator wait for the slower core: the pairs spread wider.
The quickstart's ``measure.threads`` comes from this.

    python benchmarks/cpu_threads.py [--source mini-flux] [--threads 1 2] [--rounds 14] [--steps 20]
        [--size 64] [--images 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from accel.sweep.preload import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="mini-flux", help="zoo name or checkpoint directory")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=14, help="identical pairs per thread count")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--images", type=int, default=2, help="images per prompt")
    args = parser.parse_args()
    if args.rounds < 4:
        raise SystemExit("--rounds: at least 4 (the quartiles need them)")
    quiet_libraries()

    import torch

    from accel.measure.timing import torch_threads
    from accel.profile import ModelSpec, Workload
    from accel.sweep.spec import build_requests
    from accel.targets.build import make_target

    workload = Workload(
        prompts=["a white circle on the left, on a cyan background"], negative_prompt="blurry", seeds=[0],
        steps=args.steps, height=args.size, width=args.size, guidance_scale=3.5, num_images_per_prompt=args.images,
    )  # fmt: skip
    target = make_target(ModelSpec(name="threads", source=args.source, device="cpu"))
    target.load({})
    request = build_requests(workload)[0]

    def call() -> float:
        kwargs = target.call_kwargs(request)  # outside the clock: a fresh seeded generator
        start = time.perf_counter()
        target.pipeline(**kwargs)
        return time.perf_counter() - start

    for threads in args.threads * 2:  # warm every thread count's pools and caches
        with torch_threads(threads):
            call()
    pairs: dict[int, list[tuple[float, float]]] = {n: [] for n in args.threads}
    load_before = os.getloadavg()
    for index in range(args.rounds):
        order = args.threads if index % 2 == 0 else args.threads[::-1]
        for threads in order:
            with torch_threads(threads):
                pairs[threads].append((call(), call()))
    load_after = os.getloadavg()

    print(f"{args.source} on the CPU ({os.cpu_count()} cores, torch {torch.__version__}), {args.steps} steps, "
          f"{args.size}x{args.size}, {args.images} image(s) per prompt, {args.rounds} identical pairs per thread "
          f"count; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")  # fmt: skip
    medians = {}
    for threads, drawn in pairs.items():
        calls = [seconds for pair in drawn for seconds in pair]
        ratios = [first / second for first, second in drawn]
        low, _, high = statistics.quantiles(ratios, n=4)
        medians[threads] = statistics.median(calls)
        cv = statistics.pstdev(calls) / statistics.mean(calls)
        print(f"{threads} thread(s): median call {medians[threads] * 1e3:7.1f} ms, CV {cv:.3f}, "
              f"identical-pair ratio IQR {low:.3f}-{high:.3f} (width {high - low:.3f}), min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}")  # fmt: skip
    first = args.threads[0]
    for threads in args.threads[1:]:
        print(f"median call, {threads} / {first} thread(s): {medians[threads] / medians[first]:.3f}")


if __name__ == "__main__":
    main()
