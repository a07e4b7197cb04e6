"""A cell's timed calls, with its features applied: warm-up, headline passes, stage pass, interleaved pairs.

``warm_up`` makes the cold call and the untimed warm-up calls; ``measure_alone`` the headline passes, the
pipeline alone in its process inside ``headline_meters``; ``stage_pass`` one pass with the stage recorder,
run between the headline passes (``measure_alone``'s ``midway``) so that drift cancels between the two;
``measure_interleaved`` the ABBA pairs against a freshly loaded, unaccelerated reference inside
``interleaved_meters``. ``benchmarks/harness_overhead.py`` times its calls through these very functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from accel.sweep.spec import BASELINE, NOISE_FLOOR, CellSpec
from accel.targets.registry import Target


def _generate(target: Target, applied: Any, request: Any, sink: list[float] | None = None) -> list[np.ndarray]:
    """One call with every feature's evidence window around it; with ``sink``, the call alone is timed (the
    evidence reads stay outside the timer)."""
    from accel.measure import timing

    with applied.window():
        if sink is None:
            return target.generate(request)
        timing.align_ranks()  # every rank starts the timed call together (a no-op in one process)
        with timing.timed(target.device, sink):
            return target.generate(request)


def warm_up(spec: CellSpec, target: Any, applied: Any, requests: list[Any]) -> float:
    """The cold call (compilation, cache warm-up) and ``measure.warmup`` untimed calls; evidence is reset after."""

    first_call: list[float] = []
    _generate(target, applied, requests[0], first_call)
    for _ in range(spec.measure.warmup):
        _generate(target, applied, requests[0])
    applied.reset_evidence()  # evidence counts only the measured runs
    return first_call[0]


def headline_meters(device: str, memory_in_region: bool) -> list[Any]:
    """The context managers around a cell's headline (timed) calls, in order: what runs beside the pipeline
    while it is timed. Each reads counters at the region's two ends only (no thread, no sampling):
    ``PeakMemory`` with the kernel's high-water mark (only when ``memory_in_region``: without a kernel
    high-water mark the memory is taken in an untimed call instead) and ``ContentionMeter``.
    ``benchmarks/harness_overhead.py`` times calls inside exactly these (it calls ``measure_alone``)."""
    from accel.measure.contention import ContentionMeter
    from accel.measure.memory import PeakMemory

    return [PeakMemory(device), ContentionMeter()] if memory_in_region else [ContentionMeter()]


def measure_alone(
    spec: CellSpec, target: Any, applied: Any, requests: list[Any], midway: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """``measure.repeats`` passes over every request, the pipeline alone in its process: the headline latency
    (no stage hooks synchronising inside the call, nothing sampling beside it), peak memory and the outputs.

    ``midway`` (the cell's stage pass) runs after the first half of the passes (``midway_after``), its result
    under ``"midway"``: on a host whose speed drifts, calls timed on both sides of it centre the headline
    median on the moment it ran, so its end-to-end time and the headline agree (timed after the headline, it
    missed by 9.5% in one of three quickstart runs). Its calls are not headline samples."""
    from accel.measure.memory import PeakMemory, process_pss, region_peak_available

    samples: list[float] = []
    passes: list[list[np.ndarray]] = []
    midway_result: Any = None
    native_calls: list[dict[str, Any]] = []
    explicit = getattr(target, "explicit_stages", False)  # native pipelines time their own stages
    meters = headline_meters(target.device, memory_in_region=region_peak_available())
    with contextlib.ExitStack() as stack:
        for meter in meters:
            stack.enter_context(meter)
        for index in range(spec.measure.repeats):
            outputs: list[np.ndarray] = []
            for request in requests:
                outputs.extend(_generate(target, applied, request, samples))
                if explicit:
                    native_calls.append(target.stage_report())
            passes.append(outputs)
            if midway is not None and index + 1 == midway_after(spec.measure.repeats):
                with _outside_memory(meters):  # the stage pass's hooks are the harness's, not the cell's
                    midway_result = midway()
    memory = next((m for m in meters if isinstance(m, PeakMemory)), None)
    if memory is None:  # no kernel high-water mark here: a sampled, untimed call of its own gives the peak
        with PeakMemory(target.device, sample=True) as memory:
            _generate(target, applied, requests[0])
    contention = next(m for m in meters if not isinstance(m, PeakMemory))
    return {
        "samples": samples,
        "passes": passes,
        "native_calls": native_calls,
        "memory": memory.peaks,
        "pss": process_pss(),
        "contention": contention.result,
        "midway": midway_result,
    }


def _outside_memory(meters: list[Any]) -> contextlib.AbstractContextManager[None]:
    """The stretch of ``measure_alone``'s region whose host peak is not the cell's (``PeakMemory.excluded``)."""
    from accel.measure.memory import PeakMemory

    memory = next((m for m in meters if isinstance(m, PeakMemory)), None)
    return memory.excluded() if memory is not None else contextlib.nullcontext()


def midway_after(repeats: int) -> int:
    """After how many headline passes ``measure_alone`` runs its ``midway`` call: half of them (at least one:
    with a single pass it runs after it)."""
    return max(1, repeats // 2)


def stage_pass_requests(spec: CellSpec, requests: list[Any]) -> list[Any]:
    """The requests the stage pass runs: every one for the baseline (its per-stage medians are what the
    report's stage breakdown and the roofline compare against, and its end-to-end time is checked against the
    headline), the first one for a variant (a variant's stages are read beside the baseline's; three more
    synchronised calls per cell were a tenth of the quickstart's time)."""
    return requests if spec.variant == BASELINE else requests[:1]


def stage_pass(target: Any, applied: Any, requests: list[Any]) -> dict[str, Any] | None:
    """One pass over the requests with the stage recorder (adapter): its hooks synchronise the device at every
    component boundary, so these calls are timed apart from the headline ones. Native pipelines time their
    stages themselves (None here)."""
    from accel.measure.stages import StageRecorder
    from accel.measure.timing import align_ranks, timed

    if getattr(target, "explicit_stages", False):
        return None
    recorder = StageRecorder(target.pipeline, target.device)
    calls: list[dict[str, Any]] = []
    outer: list[float] = []
    try:
        for request in requests:
            align_ranks()  # as a headline call: no other rank's harness work inside this rank's clock
            with timed(target.device, outer):
                recorder.start()
                _generate(target, applied, request)
                calls.append(recorder.stop())
    finally:
        recorder.remove()
    return {"calls": calls, "outer_s": outer}


def draw_pair(index: int, reference_call: Any, variant_call: Any) -> tuple[float, float]:
    """Pair ``index`` of an interleaved comparison in ABBA order (reference first on even pairs): each call
    appends its seconds to the list it is given. Returns (reference seconds, variant seconds)."""
    reference_s: list[float] = []
    variant_s: list[float] = []
    if index % 2 == 0:
        reference_call(reference_s)
    variant_call(variant_s)
    if index % 2 == 1:
        reference_call(reference_s)
    return reference_s[0], variant_s[0]


def run_reference(reference: Target, applied: Any, request: Any, sink: list[float] | None) -> list[np.ndarray]:
    """One call of the unaccelerated reference, with the variant's process-global state paused around it;
    with ``sink``, the call is timed into it."""
    from accel.measure.timing import timed

    with applied.global_state_paused():
        if sink is None:
            return reference.generate(request)
        with timed(reference.device, sink):
            return reference.generate(request)


def pair_drawer(target: Any, reference: Any, applied: Any, requests: list[Any]) -> Any:
    """``draw(index)`` for ``SequentialPairs``: pair ``index`` of the reference and the variant on the
    ``index``-th request (cycling), in ABBA order. ``benchmarks/harness_overhead.py`` times these very calls."""

    def draw(index: int) -> tuple[float, float]:
        request = requests[index % len(requests)]
        return draw_pair(
            index,
            lambda sink: run_reference(reference, applied, request, sink),
            lambda sink: _generate(target, applied, request, sink),
        )

    return draw


def interleaved_meters() -> list[Any]:
    """The context managers around the interleaved pairs (read at the two ends only): ``ContentionMeter``."""
    from accel.measure.contention import ContentionMeter

    return [ContentionMeter()]


def measure_interleaved(spec: CellSpec, target: Any, applied: Any, requests: list[Any]) -> dict[str, Any]:
    """The variant's speedup measured side by side with a freshly loaded, unaccelerated reference pipeline in
    this process: pairs of calls in ABBA order (``draw_pair``), so drift and background load hit both alike,
    drawn until the comparison is decided against the noise threshold or its budget is spent
    (``accel.measure.speedup.SequentialPairs``: ``measure.pairs`` first, at most ``measure.max_pairs``, within
    ``measure.pair_budget_s``). The variant's calls keep their evidence windows (a cache resets its per-call
    state in ``begin_run``: without it TeaCache computed every step); features that set process-global state
    pause it around reference calls."""
    import gc

    from accel.measure.speedup import SequentialPairs, floor_first_look, noise_band, variant_first_look
    from accel.measure.timing import timed
    from accel.targets.build import make_target

    reference = make_target(spec.model)
    load: list[float] = []
    # The reference's load and warm-up see no accelerated global state either.
    with applied.global_state_paused(), timed(target.device, load):
        reference.load({})
    reference_output = run_reference(reference, applied, requests[0], None)[0]
    for _ in range(spec.measure.warmup):
        run_reference(reference, applied, requests[0], None)
    measure = spec.measure
    first = measure.pairs
    if spec.variant == NOISE_FLOOR:  # enough pairs to bound the arms' bias for the claims beside it
        first = floor_first_look(first, measure.max_pairs, measure.confidence)
    elif measure.noise_floor:  # enough pairs that a claim decided at the first look can be held beyond that bias
        first = variant_first_look(first, measure.max_pairs, measure.confidence)
    sampler = SequentialPairs(
        noise_band(measure.min_effect), measure.confidence, first, measure.max_pairs, measure.pair_budget_s
    )
    meters = interleaved_meters()
    with contextlib.ExitStack() as stack:
        for meter in meters:
            stack.enter_context(meter)
        estimate = sampler.run(pair_drawer(target, reference, applied, requests))
    reference.pipeline = None  # free the reference's weights before the cell returns
    gc.collect()
    return {
        "reference_s": sampler.reference_s,
        "variant_s": sampler.variant_s,
        "estimate": estimate,
        "reference_load_s": load[0],
        "reference_output": reference_output,
        "contention": meters[0].result,
    }
