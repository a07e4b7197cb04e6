"""Re-judge a finished run's speed claims with the current rules, measuring nothing.

A run's records keep every interleaved pair's timings (``paired.reference_s`` / ``variant_s``), so when the rule
that turns an interval into a published verdict changes, an old run can be judged again from its own numbers.
Prints, per model and variant, the verdict the run published and the one the current code gives, with the
current reason. The run directory is read only. Where its float32 outputs are gone (``outputs/`` is not
committed), the reference check is not redone: the verdict keeps the reference problem the run recorded.

    python benchmarks/rejudge_claims.py RUN_DIR
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import yaml

from accel.measure.speedup import format_speedup
from accel.profile import parse_profile
from accel.sweep import compare
from accel.sweep.spec import BASELINE, NOISE_FLOOR, sample_keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args()
    profile = parse_profile(yaml.safe_load((args.run_dir / "profile.resolved.yaml").read_text()))
    records = [json.loads(line) for line in (args.run_dir / "results.jsonl").read_text().splitlines() if line]
    by_model = {(r["model"], r["variant"]): r for r in records}
    models = {model.name: model for model in profile.models}
    for record in records:
        if record["variant"] == BASELINE or record.get("status") != "ok":
            continue
        model = record["model"]
        before = record.get("speedup_ci") or {}
        again = copy.deepcopy(record)
        keys = sample_keys(profile.workload_for(models[model]))
        baseline, floor = by_model.get((model, BASELINE)), by_model.get((model, NOISE_FLOOR))
        if not (args.run_dir / "outputs").is_dir():
            recorded = before.get("reference_problem")  # the reference check is not redone without outputs
            compare._reference_problem = lambda *_, found=recorded: found  # as the run found it
        compare.attach_speedup(again, baseline, floor, args.run_dir, keys, profile.measure)
        after = again.get("speedup_ci") or {}
        print(
            f"{model}/{record['variant']}: published {before.get('verdict')} {format_speedup(before)}; "
            f"now {after.get('verdict')} {format_speedup(after)} ({after.get('n')} pairs): {after.get('reason')}"
        )


if __name__ == "__main__":
    main()
