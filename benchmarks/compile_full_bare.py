"""Full compile, bare against the harness: does ``transformer.compile()`` recompile on its own, or only in our cell?

For each model of a profile (default ``profiles/coverage.yaml``) with the profile's own workload and request:

- ``bare``: the pipeline loaded as the sweep loads it, every denoiser compiled whole (``module.compile()``, as
  ``compile: full`` does), then plain calls: a cold one, ``--calls`` more. Counted from dynamo's own counters:
  frames converted after the cold call (a recompile: guards failed), graphs, graph breaks. Nothing of omni-accel
  is installed on the pipeline.
- ``harness``: the sweep's own cell path (``accel.sweep.cell.run_cell``, inline) with ``compile: full`` and the
  same backend: its verdict and the frames converted per timed run (the stage pass is one of them).

The harness must agree with the bare loop: compile-full supported wherever the bare loop does not recompile.
A family where they disagree is printed as ``DISAGREE`` and the script exits 1. ``--backend eager`` (default)
traces with dynamo and guards exactly as inductor does (a recompile is a guard failure, whatever the backend)
without generating kernels, so a family takes seconds.

    python benchmarks/compile_full_bare.py [--profile profiles/coverage.yaml] [--models flux.1 ...]
        [--backend eager] [--calls 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from accel.sweep.preload import quiet_libraries


def dynamo_counts() -> dict[str, int]:
    """Dynamo's process-wide counters: frames converted, graphs, graph breaks."""
    from torch._dynamo.utils import counters

    return {
        "frames": int(counters["frames"]["total"]),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": int(sum(counters["graph_break"].values())),
    }


def bare_loop(spec: Any, backend: str, calls: int) -> dict[str, Any]:
    """The pipeline as loaded for the cell, every denoiser compiled whole, called ``calls`` + 1 times."""
    import torch

    from accel.features.base import denoisers
    from accel.sweep.spec import build_requests
    from accel.targets.build import make_target

    torch._dynamo.reset()
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)  # as compile's apply
    target = make_target(spec.model)
    pipeline = target.load({})
    for module in denoisers(pipeline).values():
        module.compile(backend=backend)
    request = build_requests(spec.workload)[0]
    start = dynamo_counts()
    target.generate(request)  # the cold call compiles
    after_cold = dynamo_counts()
    for _ in range(calls):
        target.generate(request)
    end = dynamo_counts()
    torch._dynamo.reset()
    return {
        "graphs": after_cold["graphs"] - start["graphs"],
        "breaks": after_cold["breaks"] - start["breaks"],
        "recompiled_frames": end["frames"] - after_cold["frames"],
    }


def harness_cell(spec: Any, backend: str) -> dict[str, Any]:
    """The sweep's own cell path with ``compile: full`` on this backend."""
    import dataclasses

    from accel.sweep.cell import run_cell

    features = {"compile": {"granularity": "full", "backend": backend}}
    cell = dataclasses.replace(spec, variant="compile-full-bare-check", features=features, configs={})
    record = run_cell(cell)
    evidence = (record.get("evidence") or {}).get("compile") or {}
    return {
        "status": record["status"],
        "engaged": evidence.get("engaged"),
        "summary": evidence.get("summary") or record.get("error"),
        "frames_per_run": evidence.get("frames_converted_per_run"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="profiles/coverage.yaml")
    parser.add_argument("--models", nargs="*", help="model names of the profile (default: every one)")
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--calls", type=int, default=3, help="calls after the cold one in the bare loop")
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    quiet_libraries()
    from accel.errors import AccelError
    from accel.profile import load_profile
    from accel.sweep.runner import plan

    profile = load_profile(args.profile)
    baselines = [cell for cell in plan(profile, Path(tempfile.mkdtemp())) if cell.variant == "baseline"]
    if args.models:
        baselines = [cell for cell in baselines if cell.model.name in args.models]
    rows = [
        f"Full compile, bare loop against the sweep's cell path ({args.profile}, backend {args.backend}, "
        f"{args.calls} calls after the cold one)",
        "",
        "| model | bare: graphs · breaks · frames recompiled after the cold call | harness verdict | agree |",
        "|---|---|---|:-:|",
    ]
    disagree = 0
    for spec in baselines:
        started = time.perf_counter()
        try:
            bare = bare_loop(spec, args.backend, args.calls)
        except (AccelError, Exception) as error:  # a family that does not build or run here: said, not judged
            rows.append(f"| {spec.model.name} | could not run: {type(error).__name__}: {str(error)[:80]} | – | – |")
            print(rows[-1], flush=True)
            continue
        cell = harness_cell(spec, args.backend)
        bare_ok = bare["recompiled_frames"] == 0
        agree = bool(cell["engaged"]) == bare_ok and cell["status"] == "ok"
        disagree += not agree
        verdict = f"{'engaged' if cell['engaged'] else 'not engaged'}: {cell['summary']}"
        rows.append(
            f"| {spec.model.name} | {bare['graphs']} · {bare['breaks']} · {bare['recompiled_frames']} | "
            f"{verdict.replace('|', '/')} | {'yes' if agree else '**DISAGREE**'} |"
        )
        print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    rows += ["", f"{len(baselines)} models, {disagree} disagreements"]
    print(rows[-1])
    if args.out:
        Path(args.out).write_text("\n".join(rows) + "\n")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
