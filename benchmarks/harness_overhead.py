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

Then, per evidence mechanism, a variant with a feature applied through ``accel.features.apply`` as its cell
has it (``MECHANISMS``: compile call counters, cache work counters, attention dispatch tallies), its harness
call (``timed.measure_alone``, as above) against the same variant's bare call: ``pipe(**kwargs)`` on the same
pipeline with the features in place but every evidence mechanism suspended around it (``evidence_suspended``:
the harness's forward hooks detached, the counting wrappers of the attention backends, compiled entries and
collectives swapped for what they wrap), checked after every bare call: no evidence counter moved. The
collective wrappers' variant is a two-rank Ulysses cell (``context_parallel``: a collective on one rank is not
what a cell times): the script starts itself once per rank (``--rank-job``, joined by a ``torch.distributed``
file store: gloo on the CPU, NCCL on CUDA with rank r on GPU r), every rank runs the same alternating bare and
harness calls (their collectives meet), and rank 0's samples are the ones printed.

Each round runs every configuration once, in a rotating order, so drift and background load hit them alike.
Prints each configuration's median, then per-round paired ratios (headline / bare is the one the README
quotes: the harness's own cost on the headline number), each as a median with a 95% bootstrap interval over
rounds, with the machine and its load average before and after. The default is the quickstart's mini-flux
call (20 steps, 64x64, 2 images per prompt, ``max_sequence_length`` 32).

    python benchmarks/harness_overhead.py [--source mini-flux|tiny-flux|DIR] [--device auto] [--rounds 15]
        [--steps 20] [--size 64] [--images 2] [--threads 1] [--mechanisms all|none|NAME ...]
        [--compile-backend inductor] [--rank-timeout 600]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from accel.sweep.preload import quiet_libraries

CONFIGS = ("bare", "headline", "interleaved", "recorder")
RATIOS = (("headline", "bare"), ("interleaved", "bare"), ("recorder", "headline"))
# One variant per evidence mechanism a variant's timed calls run and its bare call does not: name -> features.
MECHANISMS: dict[str, dict[str, Any]] = {
    "compile-counters": {"compile": {"granularity": "regional"}},  # counted compiled entries, dynamo counters
    "cache-work-counters": {"first_block_cache": {"threshold": 0.05}},  # WorkCounter: hooks inside the blocks
    "attention-tallies": {"attention_backend": {"backend": "native"}},  # every backend function tallied
    "collective-wrappers": {"context_parallel": {"ulysses": 2}},  # counted collectives, per-denoiser attribution
}
# What a mechanism's harness call may cost over its bare call (median of the paired ratios, issue 40).
LIMIT = 1.02


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


def _interval(paired: list[float]) -> dict[str, float]:
    """The median of paired ratios with its distribution-free 95% interval (``accel.measure.speedup``)."""
    from accel.measure.speedup import median_interval

    low, high, coverage = median_interval(paired, 0.95)
    return {"median": statistics.median(paired), "low": low, "high": high, "coverage": coverage}


@contextlib.contextmanager
def evidence_suspended(applied: Any) -> Iterator[None]:
    """Every evidence mechanism of ``applied``'s handles out of the call path inside the block, the features
    themselves left in place; restored on leaving. The harness's forward hooks (a cache's work counters inside
    the blocks, denoiser call counters, the parallel split recorder) are detached from their modules; diffusers'
    attention backend registry gets back the functions the first handle found there (before any tally wrapped
    them); a counted compiled entry is swapped for the compiled callable it wraps (``__wrapped__``); the native
    attention layers stop counting; collective wrappers give back the originals."""
    from torch.utils.hooks import RemovableHandle

    undo: list[Callable[[], None]] = []
    registry_done = False
    try:
        for handle in applied.handles:
            work = getattr(handle, "work", None)  # a cache's BlockWork: hooks on the blocks' inner submodules
            hooks = [getattr(handle, "hook", None), *getattr(handle, "hooks", []), *getattr(work, "hooks", [])]
            for hook in hooks:
                table = hook.hooks_dict_ref() if isinstance(hook, RemovableHandle) else None
                if table is not None and hook.id in table:
                    saved = dict(table)
                    del table[hook.id]
                    undo.append(lambda table=table, saved=saved: (table.clear(), table.update(saved)))
            originals = getattr(handle, "originals", None)
            registry = getattr(handle, "registry", None)
            if isinstance(originals, dict) and registry is not None and not registry_done:
                registry_done = True  # the first handle's originals are the functions before every wrapper
                wrapped = dict(registry._backends)
                registry._backends.update(originals)
                undo.append(lambda registry=registry, wrapped=wrapped: registry._backends.update(wrapped))
            for module in getattr(handle, "modules", None) or []:
                entry = getattr(module, "_compiled_call_impl", None)
                if entry is not None and hasattr(entry, "__wrapped__"):
                    module._compiled_call_impl = entry.__wrapped__
                    undo.append(lambda module=module, entry=entry: setattr(module, "_compiled_call_impl", entry))
            for layer in getattr(handle, "native_layers", None) or []:
                if layer.count_calls:
                    layer.count_calls = False
                    undo.append(lambda layer=layer: setattr(layer, "count_calls", True))
            collectives = getattr(handle, "collectives", None)
            for owner, name, original in getattr(collectives, "originals", None) or []:
                counted = getattr(owner, name)
                setattr(owner, name, original)
                undo.append(lambda owner=owner, name=name, counted=counted: setattr(owner, name, counted))
        yield
    finally:
        for step in reversed(undo):
            step()


def evidence_state(applied: Any) -> str:
    """Everything an evidence mechanism of ``applied`` counts into (each handle's runs, every ``Tally``, the
    native layers' call counts), as text: equal before and after a call that ran none of them."""
    from accel.features.base import Tally

    parts: list[Any] = []
    for handle in applied.handles:
        parts.append(repr(handle.runs))
        for value in vars(handle).values():
            for item in value.values() if isinstance(value, dict) else [value]:
                if isinstance(item, Tally):
                    parts.append(item.value)
        for layer in getattr(handle, "native_layers", None) or []:
            parts.append(repr(getattr(layer, "calls", None)))
        collectives = getattr(handle, "collectives", None)
        if collectives is not None:
            parts.append(repr(collectives.calls))
    return repr(parts)


def measure_variant(spec: Any, target: Any, applied: Any, request: Any, rounds: int, warmup: int = 2) -> dict[str, Any]:
    """A variant's harness call (``timed.measure_alone``, as its cell times it) against its bare call
    (``pipe(**kwargs)`` inside ``evidence_suspended``), in alternating order; whether evidence moved in each
    bare call (it must not) and in each harness call (it must), and the harness/bare ratio with its interval."""
    from accel.measure.timing import synchronize
    from accel.sweep import timed

    pipeline = target.pipeline
    single = one_call_spec(spec)
    samples: dict[str, list[float]] = {"bare": [], "harness": []}
    moved: dict[str, list[bool]] = {"bare": [], "harness": []}

    def bare(sink: list[float]) -> None:
        kwargs = target.call_kwargs(request)  # outside the clock: a fresh seeded generator
        before = evidence_state(applied)
        with evidence_suspended(applied):
            synchronize(target.device)
            start = time.perf_counter()
            pipeline(**kwargs)
            synchronize(target.device)
            sink.append(time.perf_counter() - start)
        moved["bare"].append(evidence_state(applied) != before)

    def harness(sink: list[float]) -> None:
        before = evidence_state(applied)
        sink.extend(timed.measure_alone(single, target, applied, [request])["samples"])
        moved["harness"].append(evidence_state(applied) != before)

    def control(sink: list[float]) -> None:  # the bare call again: the identical variant
        bare(sink)
        moved["control"].append(moved["bare"].pop())

    run = {"bare": bare, "harness": harness, "control": control}
    samples["control"] = []
    moved["control"] = []
    for _ in range(warmup):  # compilation (both arms' graphs) and warm caches before anything is timed
        for name in run:
            run[name]([])
    moved = {name: [] for name in run}
    for index in range(rounds):
        for offset in range(len(run)):  # rotating order, so drift hits the three arms alike
            name = ARMS[(index + offset) % len(ARMS)]
            run[name](samples[name])
    paired = [a / b for a, b in zip(samples["harness"], samples["bare"], strict=True)]
    identical = [a / b for a, b in zip(samples["control"], samples["bare"], strict=True)]
    moved["bare"] += moved.pop("control")  # the control is a bare call: evidence must not move in it either
    return {
        "samples": samples, "evidence_moved": moved, "ratio": _interval(paired), "control": _interval(identical),
        "per_call": _per_call_cost(applied, target, request),
    }  # fmt: skip


# A variant's arms: its harness call, its bare call, and the bare call again (the identical control).
ARMS = ("bare", "harness", "control")


def _per_call_cost(applied: Any, target: Any, request: Any) -> dict[str, float]:
    """What the variant's collective wrappers add to one call, counted instead of timed: the collectives one
    pipeline call makes times one wrapper call's cost over the function it wraps (measured here on a no-op with
    the same tensors). Zero collectives for a variant of one process. A two-rank call on a 2-core host spreads
    more than 2% between identical calls (the control), so this bound is what resolves the wrappers' cost."""
    collectives = next((h.collectives for h in applied.handles if getattr(h, "collectives", None)), None)
    if collectives is None:
        return {"collectives": 0, "wrapper_s": 0.0}
    collectives.take()
    collectives.take_attention()
    collectives.take_attention_by_denoiser()
    target.pipeline(**target.call_kwargs(request))
    calls = sum(tally["calls"] for tally in collectives.take().values())
    collectives.take_attention()
    collectives.take_attention_by_denoiser()
    return {"collectives": calls, "wrapper_s": _wrapper_cost(collectives)}


def _wrapper_cost(collectives: Any, calls: int = 20000) -> float:
    """Seconds one counting wrapper (``_Collectives._counted``) adds to a call, over the bare function: both
    timed on a no-op taking two tensors (its bookkeeping sizes them), best of 5."""
    import torch

    tensors = (torch.zeros(64, 64), [torch.zeros(64, 64)])

    def noop(*args: Any) -> None:
        return None

    counted = collectives._counted("overhead-probe", noop)
    costs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            noop(*tensors)
        bare_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(calls):
            counted(*tensors)
        costs.append((time.perf_counter() - start - bare_s) / calls)
    collectives.calls.pop("overhead-probe", None)
    return max(0.0, min(costs))


def run_mechanism(
    spec: Any, features: dict[str, Any], rounds: int, warmup: int = 2, rank_timeout_s: float = 600.0
) -> dict[str, Any]:
    """``measure_variant`` on a freshly loaded pipeline with ``features`` applied as a cell applies them (the
    evidence windows opened by the harness calls, not on every pipeline call); removed after. A parallel
    feature's variant runs in its ranks (``run_in_ranks``): rank 0's result."""
    from accel.features import validate_variant_features
    from accel.features.parallel import variant_world_size

    configs = validate_variant_features(features, "harness_overhead.MECHANISMS")
    world = variant_world_size(configs)
    if world > 1:
        return run_in_ranks(spec, features, world, rounds, warmup, rank_timeout_s)
    return _run_here(spec, features, rounds, warmup)


def _run_here(spec: Any, features: dict[str, Any], rounds: int, warmup: int) -> dict[str, Any]:
    """``run_mechanism`` in this process (one rank of a parallel variant, or a variant of one process)."""
    from accel.features import apply, validate_variant_features
    from accel.sweep.spec import build_requests
    from accel.targets.build import make_target

    configs = validate_variant_features(features, "harness_overhead.MECHANISMS")
    target = make_target(spec.model)
    target.load({})
    request = build_requests(spec.workload)[0]
    steps = spec.workload.steps
    applied = apply(
        target.pipeline, *configs.values(), num_inference_steps=steps, device=target.device, windows_on_calls=False
    )
    with applied:
        result = measure_variant(spec, target, applied, request, rounds, warmup)
        result["engaged"] = {name: verdict.engaged for name, verdict in applied.verdicts().items()}
    result["hooks_after_remove"] = installed_hooks(target.pipeline)
    return result


def run_in_ranks(
    spec: Any, features: dict[str, Any], world: int, rounds: int, warmup: int, timeout_s: float
) -> dict[str, Any]:
    """``features`` (a parallel variant) measured in ``world`` ranks, each this script started with ``--rank-job``
    (a JSON file: the cell, the features, its rank and the process group's file store); rank 0's result, with
    every rank's evidence flags (a bare call of any rank that moved evidence shows). A rank that fails or
    outlives ``timeout_s`` ends the others and raises with its output."""
    import torch

    from accel.targets.adapter import resolve_source

    resolve_source(spec.model)  # a zoo checkpoint built here once, not by every rank at the same time
    with tempfile.TemporaryDirectory(prefix="overhead-ranks-") as scratch:
        job = {
            "source": spec.model.source, "device": spec.model.device, "steps": spec.workload.steps,
            "size": spec.workload.height, "images": spec.workload.num_images_per_prompt, "features": features,
            "rounds": rounds, "warmup": warmup, "world": world, "store": os.path.join(scratch, "store"),
            "threads": torch.get_num_threads(), "timeout_s": timeout_s,
        }  # fmt: skip
        ranks = []
        for rank in range(world):
            path = os.path.join(scratch, f"rank{rank}.json")
            with open(path, "w") as handle:
                json.dump({**job, "rank": rank, "result": path + ".out"}, handle)
            command = [sys.executable, os.path.abspath(__file__), "--rank-job", path]
            log = open(os.path.join(scratch, f"rank{rank}.log"), "w")  # noqa: SIM115 (closed below)
            ranks.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log, path))
        deadline = time.monotonic() + timeout_s
        try:
            while any(process.poll() is None for process, _, _ in ranks):
                failed = [r for r, (process, _, _) in enumerate(ranks) if process.poll() not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            for process, log, _ in ranks:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                log.close()
        results = []
        for rank, (process, _, path) in enumerate(ranks):
            if process.returncode != 0 or not os.path.exists(path + ".out"):
                with open(os.path.join(scratch, f"rank{rank}.log")) as handle:
                    tail = handle.read()[-3000:]
                raise SystemExit(
                    f"{json.dumps(features)}: rank {rank} of {world} exited {process.returncode} (a rank still "
                    f"running after {timeout_s:.0f} s is ended: raise --rank-timeout); its output:\n{tail}"
                )
            with open(path + ".out") as handle:
                results.append(json.load(handle))
    head = results[0]
    head["evidence_moved_per_rank"] = [r["evidence_moved"] for r in results]
    # A bare call moved evidence if it did on any rank; a harness call moved it only if it did on every rank.
    head["evidence_moved"] = {
        "bare": [any(moved) for moved in zip(*(r["evidence_moved"]["bare"] for r in results), strict=True)],
        "harness": [all(moved) for moved in zip(*(r["evidence_moved"]["harness"] for r in results), strict=True)],
    }
    return head


def rank_job(path: str) -> None:
    """One rank of ``run_in_ranks``: join the process group, run the variant here, write the result (JSON)."""
    import datetime

    import torch

    with open(path) as handle:
        job = json.load(handle)
    quiet_libraries()
    torch.set_num_threads(job["threads"])
    backend = "gloo" if job["device"] == "cpu" or not torch.cuda.is_available() else "nccl"
    if backend == "nccl":
        torch.cuda.set_device(job["rank"])
    store = torch.distributed.FileStore(job["store"], job["world"])  # type: ignore[attr-defined]
    torch.distributed.init_process_group(
        backend, store=store, rank=job["rank"], world_size=job["world"],
        timeout=datetime.timedelta(seconds=job["timeout_s"]),
    )  # fmt: skip
    try:
        spec = baseline_cell(job["source"], job["device"], job["steps"], job["size"], job["images"])
        result = _run_here(spec, job["features"], job["rounds"], job["warmup"])
    finally:
        torch.distributed.destroy_process_group()
    with open(job["result"], "w") as handle:
        json.dump(result, handle)


def counted_bound(found: dict[str, Any], bare_ms: float) -> float | None:
    """The collective wrappers' counted cost as a fraction of the bare call, or None (no collectives)."""
    per_call = found.get("per_call") or {}
    if not per_call.get("collectives"):
        return None
    return per_call["collectives"] * per_call["wrapper_s"] / (bare_ms / 1e3)


def unresolved(ratio: dict[str, float], control: dict[str, float]) -> bool:
    """Whether the harness arm's interval overlaps the identical control's: timing cannot tell them apart."""
    return ratio["low"] <= control["high"] and control["low"] <= ratio["high"]


def bounded_by_count(ratio: dict[str, float], control: dict[str, float], bound: float | None) -> bool:
    """A median above ``LIMIT`` still holds the limit when timing cannot tell the harness arm from the identical
    control (``unresolved``) and the counted cost (``counted_bound``) is within it; never without a count."""
    return bound is not None and unresolved(ratio, control) and 1 + bound <= LIMIT


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
    parser.add_argument(
        "--mechanisms",
        nargs="+",
        default=["all"],
        help=f"evidence mechanisms to time against their bare calls: all, none, or some of {', '.join(MECHANISMS)}",
    )
    parser.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend of the compile-counters variant"
    )
    parser.add_argument(
        "--rank-timeout", type=float, default=600.0, help="seconds the ranks of a parallel variant may run (600)"
    )
    parser.add_argument("--rank-job", help=argparse.SUPPRESS)  # one rank of a parallel variant (run_in_ranks)
    args = parser.parse_args()
    if args.rank_job:
        rank_job(args.rank_job)
        return
    mechanisms = list(MECHANISMS) if args.mechanisms == ["all"] else [m for m in args.mechanisms if m != "none"]
    unknown = sorted(set(mechanisms) - set(MECHANISMS))
    if unknown:
        parser.error(f"--mechanisms: unknown {', '.join(unknown)}; allowed: all, none, {', '.join(MECHANISMS)}")
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
    failed = []
    for name in mechanisms:
        features = MECHANISMS[name]
        if "compile" in features:
            features = {**features, "compile": {**features["compile"], "backend": args.compile_backend}}
        found = run_mechanism(spec, features, args.rounds, rank_timeout_s=args.rank_timeout)
        if any(found["evidence_moved"]["bare"]) or not all(found["evidence_moved"]["harness"]):
            raise SystemExit(
                f"{name}: evidence moved in a bare call or not in a harness call: {found['evidence_moved']}"
            )
        ratio, control = found["ratio"], found["control"]
        bare_ms, harness_ms = (statistics.median(found["samples"][arm]) * 1e3 for arm in ("bare", "harness"))
        within = ratio["median"] <= LIMIT
        verdict = f"{'<=' if within else '>'} {LIMIT}"
        print(
            f"{name:20s} harness/bare {ratio['median']:.3f}  ({ratio['coverage']:.0%} interval {ratio['low']:.3f}-"
            f"{ratio['high']:.3f}; bare {bare_ms:.2f} ms, harness {harness_ms:.2f} ms; {json.dumps(features)}; "
            f"engaged {found['engaged']}) {verdict}"
        )
        print(
            f"{'':20s} identical control (bare/bare) {control['median']:.3f}  ({control['coverage']:.0%} interval "
            f"{control['low']:.3f}-{control['high']:.3f})"
        )
        bound = counted_bound(found, bare_ms)
        if bound is not None:
            print(
                f"{'':20s} counted: {found['per_call']['collectives']} collectives per call x "
                f"{found['per_call']['wrapper_s'] * 1e6:.2f} us per wrapper = {bound:.4f} of the bare call"
            )
        if not within and bounded_by_count(ratio, control, bound):
            within = True  # the timing cannot tell the arms apart; the counted cost is what bounds the wrapper
            print(
                f"{'':20s} not resolved by timing on this host (the harness interval overlaps the identical "
                f"control's): bounded by the counted cost, 1 + {bound:.4f} <= {LIMIT}"
            )
        failed += [] if within else [name]
    if failed:
        raise SystemExit(f"harness/bare above {LIMIT} for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
