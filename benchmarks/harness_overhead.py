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
has it (``MECHANISMS``: compile call counters, cache work counters, attention dispatch tallies, collective
wrappers), its harness call (``timed.measure_alone``, as above) against the same variant's bare call:
``pipe(**kwargs)`` on the same pipeline with the features in place but every evidence mechanism suspended around
it (``evidence_suspended``: the harness's forward hooks detached, the counting wrappers of the attention
backends, compiled entries and collectives swapped for what they wrap), checked after every bare call: no
evidence counter moved. A variant that did not engage (or, a cache, engaged and skipped no work:
``NEEDS_EFFECT``) is an ERROR, not a row: its mechanism never ran as a cell's does. The collective wrappers'
variant is a two-rank Ulysses cell (``context_parallel``: a collective on one rank is not what a cell times):
the script starts itself once per rank (``--rank-job``, joined by a ``torch.distributed`` file store: gloo on
the CPU, NCCL on CUDA with rank r on GPU r), every rank runs the same calls (their collectives meet), and rank
0's samples are the ones printed. Every timed call of several ranks starts at a barrier outside its clock
(``accel.measure.timing.align_ranks``, in the sweep's own ``timed._generate`` and before the bare call here):
without it rank 0's clock ran while it waited at its first collective for the other rank to finish the harness's
meters (they walk /proc), and the harness arm paid for that.

**The identical control and the order.** Every round of a variant runs two pairs: the mechanism's (bare,
harness) and the identical control's (two bare calls, ``control-a`` where the bare call is, ``control-b`` where
the harness call is), in ``round_order``: ABBA within each pair (the bare call first on even rounds, second on
odd ones) and the two pairs swapping places every two rounds, so over four rounds every arm takes every
position once and the control's arms take exactly the mechanism's positions. The control's ratio
(control-b / control-a) is what the order and position alone do to a ratio on this host (an earlier design
that placed the control elsewhere read 1.011 for two identical calls: half the margin).

**The verdict reads the interval.** Per round: harness/bare, the control's ratio, and the *corrected* ratio
(harness/bare divided by the same round's control ratio: the order's measured effect divided out, the
control's noise added to the interval). Each is printed as a median with its distribution-free interval
(``accel.measure.speedup.median_interval``, 95% or the nearest order statistics above). A mechanism PASSES only
when the upper bounds of both the harness/bare and the corrected intervals are within ``LIMIT`` (1.02): the
direct ratio alone would assume the order cancels, the corrected one alone would let a control that happened to
read high excuse a cost; FAILS when both lower bounds are above it; otherwise it is INCONCLUSIVE (the noise
allows more than the limit: run more rounds), never a pass, whatever its median. Exit status: 0 every mechanism
passed, 1 one failed, 2 an ERROR, 3 one was inconclusive (``exit_code``). The collective wrappers' cost is also
counted (collectives per call x one wrapper's cost over the function it wraps) and printed for information.

Rounds are a multiple of 4 (default 40; ``--rank-rounds`` for the two-rank variant alone, default the same).
``--mechanisms none`` runs the four configurations above only.

    python benchmarks/harness_overhead.py [--source mini-flux|tiny-flux|DIR] [--device auto] [--rounds 40]
        [--steps 20] [--size 64] [--images 2] [--threads 1] [--mechanisms all|none|NAME ...]
        [--compile-backend inductor] [--rank-timeout 600] [--rank-rounds N]
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
    # WorkCounter: hooks inside the blocks. 0.2 skips 43% of mini-flux's block work at 20 steps (0.05 skipped
    # none: the counters ran on every block and the skip path was never timed); engagement is checked.
    "cache-work-counters": {"first_block_cache": {"threshold": 0.2}},
    "attention-tallies": {"attention_backend": {"backend": "native"}},  # every backend function tallied
    "collective-wrappers": {"context_parallel": {"ulysses": 2}},  # counted collectives, per-denoiser attribution
}
# What a mechanism's harness call may cost over its bare call (issue 40): the upper bound of the interval.
LIMIT = 1.02
# The confidence of every interval the verdict reads; one covering the median with less decides nothing.
CONFIDENCE = 0.95
PASS, FAIL, INCONCLUSIVE, ERROR = "PASS", "FAIL", "INCONCLUSIVE", "ERROR"
# Mechanisms whose variant must also act, not only engage: a cache that skipped no work never ran its skip path
# (the attention tallies count the backend already in use: "no effect" on the output, every tally still runs).
NEEDS_EFFECT = frozenset({"cache-work-counters"})


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

    low, high, coverage = median_interval(paired, CONFIDENCE)
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


# A variant's arms, run as two pairs every round: the mechanism's (its bare call, its harness call) and the identical
# control's (two bare calls, "control-a" in the bare call's place and "control-b" in the harness call's).
PAIRS = (("bare", "harness"), ("control-a", "control-b"))
ARMS = tuple(arm for pair in PAIRS for arm in pair)


def round_order(index: int) -> tuple[str, ...]:
    """The arms' order in round ``index``: within each pair the first arm leads on even rounds and follows on odd
    ones (ABBA), and the two pairs swap places every two rounds. Over any four consecutive rounds every arm takes
    every position once, and the control's two arms take exactly the positions the mechanism's two take, so an
    order or position effect moves the control's ratio as it moves the mechanism's."""
    pairs = [pair if index % 2 == 0 else pair[::-1] for pair in PAIRS]
    if (index // 2) % 2:
        pairs.reverse()
    return tuple(arm for pair in pairs for arm in pair)


def paired_ratios(samples: dict[str, list[float]]) -> dict[str, list[float]]:
    """Per round: ``harness/bare`` (the mechanism's pair), ``control`` (control-b / control-a: identical calls
    placed as the mechanism's two are) and ``corrected`` (the first divided by the second, same round)."""
    direct = [h / b for h, b in zip(samples["harness"], samples["bare"], strict=True)]
    control = [b2 / b1 for b2, b1 in zip(samples["control-b"], samples["control-a"], strict=True)]
    corrected = [d / c for d, c in zip(direct, control, strict=True)]
    return {"harness/bare": direct, "control": control, "corrected": corrected}


def interval_verdict(interval: dict[str, float], limit: float = LIMIT) -> str:
    """PASS when the whole interval is within ``limit`` (its upper bound), FAIL when the whole of it is above,
    INCONCLUSIVE when it straddles the limit (a median under it is not enough: the noise allows more), or when
    it covers the median with less than 95% (``--rounds 4``: the widest interval, min to max, covers it with
    87.5%; 8 rounds reach 99%): too few rounds decide nothing."""
    if interval.get("coverage", CONFIDENCE) < CONFIDENCE:
        return INCONCLUSIVE
    if interval["high"] <= limit:
        return PASS
    if interval["low"] > limit:
        return FAIL
    return INCONCLUSIVE


def mechanism_verdict(direct: dict[str, float], corrected: dict[str, float], limit: float = LIMIT) -> str:
    """A mechanism's verdict from its two intervals: harness/bare, and harness/bare over the identical control's
    ratio of the same round (``paired_ratios``). PASS only when both are within ``limit``, FAIL only when both are
    above it, else INCONCLUSIVE. The direct ratio alone assumes the round's order cancels; the corrected one
    divides out what the control measured in that round (its interval carries the control's noise too). Each
    answers the other's objection, so a pass needs both."""
    verdicts = {interval_verdict(direct, limit), interval_verdict(corrected, limit)}
    return verdicts.pop() if len(verdicts) == 1 and verdicts != {INCONCLUSIVE} else INCONCLUSIVE


def engagement_error(name: str, verdicts: dict[str, dict[str, Any]]) -> str | None:
    """Why mechanism ``name``'s variant cannot be a row (a feature of it did not engage, or, for a mechanism in
    ``NEEDS_EFFECT``, engaged with no effect: its evidence code did not run as an acting feature's does), or
    None. ``verdicts``: feature -> ``engaged``, ``summary`` and ``no_effect`` (None when it had an effect)."""
    strict = name in NEEDS_EFFECT
    idle = {f: v for f, v in verdicts.items() if not v["engaged"] or (strict and v.get("no_effect"))}
    if not verdicts or idle:
        said = "; ".join(f"{feature}: {v['summary']}" for feature, v in idle.items()) or "no feature applied"
        return (
            f"{name}: the variant did not engage ({said}); its evidence mechanism was not exercised, so its ratio "
            f"says nothing: change MECHANISMS[{name!r}] to options that engage on this workload"
        )
    return None


def exit_code(verdicts: list[str]) -> int:
    """The script's exit status: 2 when a variant was an ERROR, else 1 when any FAILed, else 3 when any was
    INCONCLUSIVE, else 0."""
    for verdict, code in ((ERROR, 2), (FAIL, 1), (INCONCLUSIVE, 3)):
        if verdict in verdicts:
            return code
    return 0


def measure_variant(spec: Any, target: Any, applied: Any, request: Any, rounds: int, warmup: int = 2) -> dict[str, Any]:
    """A variant's harness call (``timed.measure_alone``, as its cell times it) against its bare call
    (``pipe(**kwargs)`` inside ``evidence_suspended``), and the identical control (two more bare calls), every
    round in ``round_order``; whether evidence moved in each bare call (it must not) and in each harness call (it
    must); the per-round ratios (``paired_ratios``) each with its interval; on several ranks, how long this rank
    waited at the barrier that starts each timed call (``waits_ms``: the other rank's lateness, kept out of the
    clock). Balanced over every four rounds."""
    from accel.measure import timing
    from accel.sweep import timed

    pipeline = target.pipeline
    single = one_call_spec(spec)
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    moved: dict[str, list[bool]] = {"bare": [], "harness": []}
    waits: dict[str, list[float]] = {"bare": [], "harness": []}
    align = timing.align_ranks

    def aligned(kind: str) -> Callable[[], None]:
        def wait() -> None:
            start = time.perf_counter()
            align()
            waits[kind].append((time.perf_counter() - start) * 1e3)

        return wait

    def bare(sink: list[float]) -> None:
        kwargs = target.call_kwargs(request)  # outside the clock: a fresh seeded generator
        before = evidence_state(applied)
        with evidence_suspended(applied):
            aligned("bare")()  # as the harness call's own (timed._generate): every rank starts together
            timing.synchronize(target.device)
            start = time.perf_counter()
            pipeline(**kwargs)
            timing.synchronize(target.device)
            sink.append(time.perf_counter() - start)
        moved["bare"].append(evidence_state(applied) != before)

    def harness(sink: list[float]) -> None:
        before = evidence_state(applied)
        timing.align_ranks = aligned("harness")  # the same barrier timed._generate calls, its wait recorded
        try:
            sink.extend(timed.measure_alone(single, target, applied, [request])["samples"])
        finally:
            timing.align_ranks = align
        moved["harness"].append(evidence_state(applied) != before)

    run = {"bare": bare, "harness": harness, "control-a": bare, "control-b": bare}
    for index in range(warmup):  # compilation (both arms' graphs) and warm caches before anything is timed
        for arm in round_order(index):
            run[arm]([])
    moved = {"bare": [], "harness": []}
    waits = {"bare": [], "harness": []}
    for index in range(rounds):
        for arm in round_order(index):
            run[arm](samples[arm])
    ratios = {key: _interval(values) for key, values in paired_ratios(samples).items()}
    distributed = torch_distributed_world() > 1
    return {
        "samples": samples, "evidence_moved": moved, "ratios": ratios, "waits_ms": waits if distributed else None,
        "per_call": _per_call_cost(applied, target, request),
    }  # fmt: skip


def torch_distributed_world() -> int:
    """The default process group's size (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


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
        result["verdicts"] = {
            name: {"engaged": v.engaged, "summary": v.summary, "no_effect": v.evidence.get("no_effect")}
            for name, v in applied.verdicts().items()
        }
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
    head["waits_ms_per_rank"] = [r["waits_ms"] for r in results]
    # A feature engaged only where it engaged on every rank (each rank's summary kept where one did not).
    head["verdicts"] = {
        name: next((r["verdicts"][name] for r in results if not r["verdicts"][name]["engaged"]), verdict)
        for name, verdict in head["verdicts"].items()
    }
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
    parser.add_argument(
        "--rounds", type=int, default=40, help="rounds of the configurations, a multiple of 4 (balanced orders)"
    )
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
    parser.add_argument(
        "--rank-rounds",
        type=int,
        default=0,
        help="rounds of a multi-rank variant (collective-wrappers), a multiple of 4 (default: --rounds); two ranks "
        "on two cores spread more than one process: raise it where that row alone is INCONCLUSIVE",
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
    for option, rounds in (("--rounds", args.rounds), ("--rank-rounds", args.rank_rounds or args.rounds)):
        if rounds < 4 or rounds % 4:
            parser.error(f"{option} {rounds}: use a multiple of 4 (each arm takes every position once per 4 rounds)")
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
        f"prompt, {args.rounds} rounds (rotating order; each mechanism below: its pair and the identical control's "
        "pair every round, ABBA within each pair, the pairs swapping places every 2 rounds)"
    )
    for name in CONFIGS:
        values = result["samples"][name]
        if not values:
            continue
        low, _, high = (q * 1e3 for q in statistics.quantiles(values, n=4))
        print(f"{name:11s} median {statistics.median(values) * 1e3:8.2f} ms  (IQR {low:.2f}-{high:.2f})")
    for key, ratio in result["ratios"].items():
        print(f"{key:20s} {ratio['median']:.3f}  (95% bootstrap interval {ratio['low']:.3f}-{ratio['high']:.3f})")
    verdicts = [report_mechanism(name, MECHANISMS[name], spec, args) for name in mechanisms]
    if mechanisms:
        code = exit_code(verdicts)
        print(
            f"verdict: {PASS} where the upper bounds of both harness/bare's and the corrected ratio's intervals are "
            f"<= {LIMIT}, {FAIL} where both lower bounds are above it, else {INCONCLUSIVE} (noise: run more --rounds); "
            f"{ERROR}: the variant did not engage or its evidence did not behave. Exit status {code} (0 all pass, "
            "1 a fail, 2 an error, 3 inconclusive)"
        )
        raise SystemExit(code)


def report_mechanism(name: str, features: dict[str, Any], spec: Any, args: argparse.Namespace) -> str:
    """Measure mechanism ``name``'s variant (``run_mechanism``), print its lines and return its verdict: ERROR (and
    no ratios) where the variant did not engage or its evidence moved in a bare call or not in a harness call."""
    if "compile" in features:
        features = {**features, "compile": {**features["compile"], "backend": args.compile_backend}}
    from accel.features import validate_variant_features
    from accel.features.parallel import variant_world_size

    parallel = variant_world_size(validate_variant_features(features, "harness_overhead.MECHANISMS")) > 1
    rounds = args.rank_rounds if parallel and args.rank_rounds else args.rounds
    found = run_mechanism(spec, features, rounds, rank_timeout_s=args.rank_timeout)
    error = engagement_error(name, found["verdicts"])
    moved = found["evidence_moved"]
    if error is None and (any(moved["bare"]) or not all(moved["harness"])):
        error = f"{name}: evidence moved in a bare call or not in a harness call (a bug of evidence_suspended): {moved}"
    if error is not None:
        print(f"{name:20s} {ERROR}: {error}")
        return ERROR
    ratios = found["ratios"]
    verdict = mechanism_verdict(ratios["harness/bare"], ratios["corrected"])
    engaged = "; ".join(f"{feature}: {v['summary']}" for feature, v in found["verdicts"].items())
    print(f"{name:20s} {verdict}  {json.dumps(features)}; {rounds} rounds; {engaged}")
    medians = {arm: statistics.median(found["samples"][arm]) * 1e3 for arm in ARMS}
    notes = {
        "harness/bare": f"bare {medians['bare']:.2f} ms, harness {medians['harness']:.2f} ms",
        "control": f"identical bare calls placed as the pair above ({medians['control-a']:.2f}, "
        f"{medians['control-b']:.2f} ms): the order's own effect",
        "corrected": "harness/bare over the control, round by round",
    }
    for key, note in notes.items():
        ratio = ratios[key]
        print(
            f"{'':20s} {key:13s} {ratio['median']:.3f}  ({ratio['coverage']:.0%} interval {ratio['low']:.3f}-"
            f"{ratio['high']:.3f})  {note}"
        )
    waits = found.get("waits_ms")
    if waits:
        print(
            f"{'':20s} rank 0 waited for the other rank at the barrier before each timed call (outside the clock): "
            f"median {statistics.median(waits['bare']):.2f} ms before a bare call, "
            f"{statistics.median(waits['harness']):.2f} ms before a harness call"
        )
    bound = counted_bound(found, medians["bare"])
    if bound is not None:
        print(
            f"{'':20s} counted: {found['per_call']['collectives']} collectives per call x "
            f"{found['per_call']['wrapper_s'] * 1e6:.2f} us per wrapper = {bound:.4f} of the bare call (information: "
            "the verdict reads the timed intervals only)"
        )
    return verdict


if __name__ == "__main__":
    main()
