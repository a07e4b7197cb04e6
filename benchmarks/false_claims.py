"""False-claim rate: identical variants swept beside a drifting CPU load must give no speed claim.

Every variant of the profile this script writes is the baseline itself (no features), so any speedup or
slowdown the harness publishes is false. A load generator beside the sweep busies CPU cores in bursts of
random length and intensity (the drift that made cell-after-cell timing publish 5x "speedups" on a busy
machine). The sweep runs ``--repeats`` times with the process executor, as a user runs it; the script prints,
per repetition and in total, how many variants the harness claimed faster or slower (the false claims),
and, for comparison, how many the old cell-against-cell ratio (baseline warm median / variant warm median)
would have put outside 1 ± min_effect.

    python benchmarks/false_claims.py [--model tiny-flux] [--variants 4] [--repeats 3] [--load-cores 1]
                                      [--out runs/false-claims]

Exit code 0 when there is no false claim, 1 otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import sys
import time
from pathlib import Path


def _burn(stop: multiprocessing.synchronize.Event, seed: int) -> None:
    """Busy-loop in bursts: on for 0.2-3 s at a random duty cycle, then off for 0-2 s."""
    rng = random.Random(seed)
    while not stop.is_set():
        burst_end = time.monotonic() + rng.uniform(0.2, 3.0)
        duty = rng.uniform(0.3, 1.0)
        while time.monotonic() < burst_end and not stop.is_set():
            busy_until = time.monotonic() + 0.01 * duty
            while time.monotonic() < busy_until:
                pass
            time.sleep(0.01 * (1 - duty))
        stop.wait(rng.uniform(0.0, 2.0))


def _profile(model: str, variants: int, steps: int, pairs: int, max_pairs: int) -> dict:
    return {
        "name": "false-claims",
        "description": "Identical variants: every published speedup or slowdown is false.",
        "models": [{"name": model, "source": model}],
        "workload": {"prompts": ["a red fox in the snow"], "seeds": [0, 1], "steps": steps, "height": 64, "width": 64},
        "variants": [{"name": f"same-{i + 1}", "features": {}} for i in range(variants)],
        "measure": {"warmup": 1, "repeats": 2, "pairs": pairs, "max_pairs": max_pairs, "executor": "process"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-flux", help="zoo name or checkpoint directory")
    parser.add_argument("--variants", type=int, default=4, help="identical variants per sweep")
    parser.add_argument("--repeats", type=int, default=3, help="sweeps")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=10, help="measure.pairs (before the first look)")
    parser.add_argument("--max-pairs", type=int, default=60, help="measure.max_pairs (sequential sampling)")
    parser.add_argument("--load-cores", type=int, default=1, help="CPU load generator processes (0: none)")
    parser.add_argument("--out", default="runs/false-claims")
    args = parser.parse_args()

    import yaml

    from accel.measure.speedup import format_speedup
    from accel.profile import parse_profile
    from accel.sweep.preload import quiet_libraries
    from accel.sweep.runner import run_sweep

    quiet_libraries()
    raw = _profile(args.model, args.variants, args.steps, args.pairs, args.max_pairs)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "profile.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    min_effect = parse_profile(raw).measure.min_effect

    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop, i), daemon=True) for i in range(args.load_cores)]
    for burner in burners:
        burner.start()
    print(
        f"{args.model}: {args.variants} identical variants x {args.repeats} sweeps, {args.load_cores} load "
        f"generator(s) beside, {os.cpu_count()} CPUs, host load average {os.getloadavg()[0]:.1f}"
    )
    claims = naive_claims = total = shown_same = 0
    try:
        for repeat in range(args.repeats):
            result = run_sweep(parse_profile(raw), "false-claims", out / f"run-{repeat + 1}", show_progress=False)
            by_variant = {r["variant"]: r for r in result.records}
            baseline = by_variant["baseline"]
            for record in result.records:
                if not record["variant"].startswith("same-"):
                    continue
                total += 1
                claim = record.get("speedup_ci") or {}
                naive = baseline["warm"]["median"] / record["warm"]["median"]
                wrong = claim.get("verdict") in ("faster", "slower")
                naive_wrong = not (1 / (1 + min_effect) <= naive <= 1 + min_effect)
                claims += wrong
                naive_claims += naive_wrong
                shown = format_speedup(claim)
                shown_same += shown.startswith("≈1.0x")
                drawn = (record.get("paired") or {}).get("pairs_drawn")
                beside = record["timing"].get("interleaved", {}).get("other_cores", float("nan"))
                print(
                    f"  sweep {repeat + 1} {record['variant']}: {claim.get('ratio', float('nan')):.3f}x "
                    f"[{claim.get('low', float('nan')):.3f}, {claim.get('high', float('nan')):.3f}] -> "
                    f"{claim.get('verdict')} (shown {shown}, {drawn} pairs){'  FALSE CLAIM' if wrong else ''}; "
                    f"cell-against-cell {naive:.3f}x"
                    f"{' (would be claimed)' if naive_wrong else ''}; {beside:.2f} cores busy beside"
                )
    finally:
        stop.set()
        for burner in burners:
            burner.join(timeout=5)
    print(f"false claims (interleaved, noise band): {claims} / {total} ({claims / max(total, 1):.1%})")
    print(f"shown as ≈1.0x (equivalent) or ≈1.0x? (noise): {shown_same} / {total}")
    share = naive_claims / max(total, 1)
    print(f"cell-against-cell ratios outside 1 ± {min_effect}: {naive_claims} / {total} ({share:.1%})")
    return 0 if claims == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
