"""The search: cheap screen, k-section along each threshold axis, survivors at full fidelity, held-out validation.

1. ``screen`` (cheap fidelity: the first search prompts, a share of the steps): every fixed candidate (a
   lossless one is admitted only if the gate's lossless verdict passes it) and ``points`` thresholds evenly
   inside each axis's range. A threshold a calibration shows inert is named, never timed.
2. ``refine`` (cheap): each axis narrowed to the bracket between its highest passing threshold and the lowest
   failing one above it (the axis is monotone: a higher threshold reuses more steps), ``points`` more inside.
3. ``full`` (the search prompts, every step): each axis's ``survivors`` highest passing thresholds, the
   admitted candidates, and the pairs of an axis's best threshold with an admitted candidate that gained
   (compatible pairs only). Where a survivor fails at full fidelity (the cheap screen flattered it), the
   axis is k-sectioned again at full fidelity between its highest full-fidelity pass (or the range's low
   end) and that failure, ``refine_rounds`` times (at least once).
4. ``validate``: the two best full-fidelity candidates on prompts and seeds the search never ran; the first
   that holds there is the recommendation, its claim that round's interval.

Everything is ordered by the seed (``random.Random(seed)``: which prompts are held out, the validation seeds,
the order of the axes), so the same seed and the same measurements give the same recommendation. The budget
counts variant cells (``cells``) or wall time (``seconds``; a round is started only when the time its cells
took so far says it fits, the validation's share kept back). A round read back on ``--resume`` is charged the
time it took when it ran (``RoundClock``), so a resumed search decides as the first run did, and a finished tune
resumed measures nothing and writes its report again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from accel.errors import ConfigError
from accel.profile import Workload
from accel.tune.axes import Axis
from accel.tune.candidates import LOSSLESS, Candidate, Space, combine
from accel.tune.constraints import Judgement
from accel.tune.rounds import Round
from accel.tune.spec import TuneSpec

SCREEN, REFINE, FULL, VALIDATE = "screen", "refine", "full", "validate"
VALIDATED = 2  # candidates the validation round measures


@dataclass
class Outcome:
    """One evaluated candidate: where it ran, its objective value and interval, and its judgement."""

    candidate: Candidate
    round: str
    stage: str
    judgement: Judgement
    value: float | None
    interval: tuple[float, float] | None
    record: dict[str, Any] = field(default_factory=dict)
    axis: str | None = None
    threshold: float | None = None

    @property
    def usable(self) -> bool:
        """Holds the constraints, skips something, and is not slower than its baseline."""
        return self.judgement.passed and not self.judgement.inert and not self.judgement.harmful

    @property
    def gains(self) -> bool:
        """Gains on the objective: its value above 1 and, where it has an interval, the whole interval above 1
        (a point estimate above 1 whose interval reaches 1 is not shown faster)."""
        if self.value is None or self.value <= 1.0:
            return False
        return self.interval is None or self.interval[0] > 1.0


@dataclass
class Budget:
    """Variant cells or seconds the search may spend (None: no limit)."""

    cells: int | None = None
    seconds: float | None = None
    started: float = field(default_factory=lambda: time.monotonic())
    spent: int = 0
    cell_seconds: list[float] = field(default_factory=list)  # per round: its wall seconds per cell

    def allowed(self, wanted: int, reserve: int = 0, cost: float = 1.0, reserve_cost: float = 1.0) -> int:
        """How many of ``wanted`` cells the budget lets a round run, keeping ``reserve`` cells back for later
        rounds. For the time budget each cell costs ``cost`` cheap cells (a full-fidelity cell runs more prompts
        and steps) and each reserved one ``reserve_cost``; the time of a cheap cell is the dearest so far."""
        if self.cells is not None:
            wanted = min(wanted, max(0, self.cells - self.spent - reserve))
        if self.seconds is not None and self.cell_seconds:
            per_cell = max(*self.cell_seconds, 1e-6)  # a round read back in no measurable time
            left = self.seconds - (time.monotonic() - self.started)
            kept = per_cell * (reserve * reserve_cost + 2 * cost)  # later rounds, and this round's two references
            wanted = min(wanted, max(0, int((left - kept) / (per_cell * cost))))
        return wanted


# (round) -> the outcomes of its candidates, in the round's order.
RoundRunner = Callable[[Round], list[Outcome]]


class RoundClock(Protocol):
    """Where a search keeps each round's time: read back for a round measured earlier (``--resume``)."""

    def read(self, item: Round) -> tuple[float, float] | None:
        """``(seconds per cell, the search's elapsed seconds when the round ended)`` as recorded, or None."""

    def finished(self, item: Round) -> bool:
        """Whether the round's cells were all measured before this run (it will be read back, not measured)."""

    def write(self, item: Round, per_cell: float, elapsed: float) -> None:
        """Record a round just measured."""


@dataclass
class Split:
    """The search's prompts and the validation's unseen prompts and seeds."""

    search: list[str]
    validation: list[str]
    validation_seeds: list[int]


def split_prompts(workload: Workload, spec: TuneSpec, rng: random.Random) -> Split:
    """Hold out prompts (``spec.holdout``, default half) and draw unseen seeds for validation."""
    prompts = list(workload.prompts)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    if spec.validation_prompts:
        search, validation = prompts, list(spec.validation_prompts)
    else:
        holdout = spec.holdout or max(1, len(prompts) // 2)
        if holdout >= len(prompts):
            raise ConfigError(
                f"tune: the workload has {len(prompts)} prompt(s) and {holdout} would be held out for validation; "
                "give more prompts, a smaller tune.holdout, or tune.validation_prompts"
            )
        held = set(order[:holdout])
        search = [p for i, p in enumerate(prompts) if i not in held]
        validation = [p for i, p in enumerate(prompts) if i in held]
    seeds = spec.validation_seeds
    if seeds is None:
        pool = [s for s in range(10_000) if s not in set(workload.seeds)]
        seeds = sorted(rng.sample(pool, len(workload.seeds)))
    return Split(search, validation, list(seeds))


def fidelities(workload: Workload, spec: TuneSpec, split: Split) -> dict[str, Workload]:
    """The workload of each stage: cheap (``screen``/``refine``), ``full`` and ``validate``."""
    steps = workload.steps if workload.steps <= 2 else max(2, round(workload.steps * spec.cheap.steps))
    cheap = workload.model_copy(update={"prompts": split.search[: spec.cheap.prompts], "steps": steps})
    full = workload.model_copy(update={"prompts": split.search})
    validate = workload.model_copy(update={"prompts": split.validation, "seeds": split.validation_seeds})
    return {SCREEN: cheap, REFINE: cheap, FULL: full, VALIDATE: validate}


@dataclass
class SearchResult:
    """Every outcome in order, the recommendation (None: nothing held), and what was said without timing."""

    outcomes: list[Outcome]
    recommended: Outcome | None
    untimed_inert: list[str] = field(default_factory=list)
    split: Split | None = None
    notes: list[str] = field(default_factory=list)


class Search:
    """One deterministic search over ``space``; ``run_round`` measures a round and judges its cells."""

    def __init__(
        self,
        space: Space,
        spec: TuneSpec,
        workload: Workload,
        seed: int,
        budget: Budget,
        run_round: RoundRunner,
        clock: RoundClock | None = None,
    ) -> None:
        self.space, self.spec, self.budget, self.run_round, self.clock = space, spec, budget, run_round, clock
        self.rng = random.Random(seed)
        self.split = split_prompts(workload, spec, self.rng)
        self.workloads = fidelities(workload, spec, self.split)
        self.axes = list(space.axes)
        self.rng.shuffle(self.axes)
        self.outcomes: list[Outcome] = []
        self.untimed_inert: list[str] = []
        self.notes: list[str] = []
        self.index = 0
        self.measured: set[tuple[str, str]] = set()  # (stage fidelity, variant) already evaluated

    # --- rounds -------------------------------------------------------------------------------------------
    def _cost(self, stage: str) -> float:
        """What a cell of ``stage`` costs in cheap cells: its prompts x seeds x steps over the cheap workload's."""

        def size(w: Workload) -> int:
            return len(w.prompts) * len(w.seeds) * w.steps

        return size(self.workloads[stage]) / size(self.workloads[SCREEN])

    def _reserve(self, stage: str) -> int:
        """Cells kept back for the rounds after ``stage``: the validation, and after the cheap rounds the full
        round's survivors and fixed candidates (counted at full-fidelity cost by ``allowed``)."""
        if stage == VALIDATE:
            return 0
        if stage == FULL:
            return VALIDATED
        return VALIDATED + len(self.axes) * self.spec.survivors + len(self.space.fixed)

    def _round(self, stage: str, wanted: list[tuple[Candidate, Axis | None, float | None]]) -> None:
        fidelity = FULL if stage in (FULL, VALIDATE) else SCREEN
        fresh, seen = [], set()
        for candidate, axis, value in wanted:
            key = (stage if stage == VALIDATE else fidelity, candidate.name)
            if key in self.measured or candidate.name in seen:
                continue
            seen.add(candidate.name)
            fresh.append((candidate, axis, value))
        if stage == VALIDATE:  # kept back by every earlier round: only the cell budget applies
            fresh = fresh[: self.budget.allowed(len(fresh)) if self.budget.seconds is None else len(fresh)]
        else:
            cost = self._cost(stage)
            fresh = fresh[: self.budget.allowed(len(fresh), self._reserve(stage), cost, self._cost(FULL))]
        if not fresh:
            return
        self.index += 1
        item = Round(self.index, stage, self.workloads[stage], [c for c, _, _ in fresh])
        read_back = self.clock is not None and self.clock.finished(item)
        recorded = self.clock.read(item) if read_back and self.clock is not None else None
        started = time.monotonic()
        outcomes = self.run_round(item)
        if recorded is not None:  # measured by an earlier run and read back: charged what it cost then
            per_cell, elapsed = recorded
            self.budget.started = time.monotonic() - elapsed
        else:
            # The round's wall time over its cells (the baseline and noise floor too): loading, the workers'
            # start and the report are part of what the next round costs.
            per_cell = (time.monotonic() - started) / ((len(fresh) + 2) * self._cost(stage))
            if read_back:  # its time is not known: never record the read's milliseconds as what it cost
                self.notes.append(
                    f"{item.name} was read back without a readable recorded time (a tune from before wave 14, or "
                    "a damaged round-time.json): it was charged the time its read took, so under --budget-min this "
                    "resumed search may have run rounds the first run did not"
                )
            elif self.clock is not None:
                self.clock.write(item, per_cell, time.monotonic() - self.budget.started)
        self.budget.cell_seconds.append(per_cell)
        for outcome, (candidate, axis, value) in zip(outcomes, fresh, strict=True):
            outcome.axis, outcome.threshold = (axis.label, value) if axis is not None else (None, None)
            self.measured.add((stage if stage == VALIDATE else fidelity, candidate.name))
        self.budget.spent += len(fresh)
        self.outcomes += outcomes

    def _points(
        self, axis: Axis, low: float, high: float, rungs: tuple[float, ...] = ()
    ) -> list[tuple[Candidate, Axis | None, float | None]]:
        wanted: list[tuple[Candidate, Axis | None, float | None]] = []
        for value in axis.points(low, high, self.spec.points, rungs):
            name = axis.variant_name(value)
            if axis.inert(value):
                self.untimed_inert.append(f"{name}: under the calibrated signal range {axis.observed}: skips nothing")
                continue
            wanted.append((Candidate(name, axis.features(value), "threshold"), axis, value))
        return wanted

    def _on_axis(self, axis: Axis, stages: tuple[str, ...]) -> list[Outcome]:
        return [o for o in self.outcomes if o.axis == axis.label and o.stage in stages and o.threshold is not None]

    def bracket(self, axis: Axis, stages: tuple[str, ...] = (SCREEN, REFINE)) -> tuple[float, float]:
        """The part of the axis still undecided: from its highest threshold that held (below every one that
        failed) to the lowest that failed."""
        tried = self._on_axis(axis, stages)
        # An inert threshold (it skipped nothing) fails for being too low, not too lossy: it bounds from below.
        failed = [o.threshold for o in tried if too_lossy(o) and o.threshold is not None]
        lowest_fail = min(failed) if failed else None
        held = [
            o.threshold
            for o in tried
            if not too_lossy(o) and o.threshold is not None and (lowest_fail is None or o.threshold < lowest_fail)
        ]
        return (max(held) if held else axis.low, lowest_fail if lowest_fail is not None else axis.high)

    def _interleaved(self, lists: list[list[Any]]) -> list[Any]:
        out = []
        for i in range(max((len(x) for x in lists), default=0)):
            out += [x[i] for x in lists if i < len(x)]
        return out

    # --- stages -------------------------------------------------------------------------------------------
    def screen(self) -> None:
        fixed = [(c, None, None) for c in self.space.fixed]
        # The profile's own rungs beside the evenly spaced points: the search starts from every rung the user runs.
        axes = self._interleaved([self._points(a, a.low, a.high, a.rungs) for a in self.axes])
        self._round(SCREEN, [*fixed, *axes])

    def refine(self) -> None:
        for _ in range(self.spec.refine_rounds):
            wanted = []
            for axis in self.axes:
                low, high = self.bracket(axis)
                if high - low > 0.02 * (axis.high - axis.low):
                    wanted.append(self._points(axis, low, high))
            if not wanted:
                return
            self._round(REFINE, self._interleaved(wanted))

    def _admitted(self) -> list[Outcome]:
        """Fixed candidates that held at cheap fidelity (a lossless one: the gate's lossless verdict)."""
        names = {c.name for c in self.space.fixed}
        return [o for o in self.outcomes if o.stage == SCREEN and o.candidate.name in names and o.usable]

    def full(self) -> None:
        wanted: list[tuple[Candidate, Axis | None, float | None]] = []
        later: list[tuple[Candidate, Axis | None, float | None]] = []  # after the fixed candidates and the pairs
        best_per_axis: list[Candidate] = []
        for axis in self.axes:
            held = sorted(
                (o for o in self._on_axis(axis, (SCREEN, REFINE)) if o.usable),
                key=lambda o: -(o.threshold or 0.0),
            )
            survivors = held[: self.spec.survivors]
            wanted += [(o.candidate, axis, o.threshold) for o in survivors[:1]]
            later += [(o.candidate, axis, o.threshold) for o in survivors[1:]]
            if survivors and survivors[0].threshold is not None:
                best_per_axis.append(survivors[0].candidate)
            # The cheap screen errs both ways: fewer steps make each reused step cost more, so a threshold that
            # failed there may hold at full fidelity. The lowest one that failed above the survivors is re-run,
            # so an axis the screen failed everywhere (mini-flux's TeaCache at half the steps) is still tried.
            cheap = self._on_axis(axis, (SCREEN, REFINE))
            below = [*survivors, *(o for o in cheap if o.judgement.inert)]  # held, or too low to act
            floor = max([o.threshold or 0.0 for o in below], default=0.0)
            above = [o for o in cheap if too_lossy(o) and (o.threshold or 0.0) > floor]
            if above:
                first = min(above, key=lambda o: o.threshold or 0.0)
                later.append((first.candidate, axis, first.threshold))
        admitted = self._admitted()
        wanted += [(o.candidate, None, None) for o in admitted]
        gained = [o.candidate for o in admitted if o.gains]
        for candidate in best_per_axis:
            for other in gained:
                pair = combine(candidate, other)
                if pair is not None:
                    wanted.append((pair, None, None))
        # A budget cuts a round's tail: each axis's best, the admitted candidates and the pairs come first.
        self._round(FULL, wanted + later)
        # k-section each axis at full fidelity inside what the full rounds left undecided. The cheap screen errs
        # both ways: below a threshold it flattered (it fails here), and above its survivors where it was too
        # strict (fewer steps make each reused step cost more: a survivor holding here opens the axis above it).
        for _ in range(self.spec.full_rounds):
            narrowed = []
            for axis in self.axes:
                tried = self._on_axis(axis, (FULL,))
                if not tried:
                    continue  # not run at full fidelity
                low, high = self.bracket(axis, (FULL,))
                if not any(o.usable for o in tried) or high - low > 0.02 * (axis.high - axis.low):
                    narrowed.append(self._points(axis, low, high))
            if not narrowed:
                return
            self._round(FULL, self._interleaved(narrowed))

    def ranked(self, stage: str) -> list[Outcome]:
        """Usable outcomes of ``stage`` that gain on the objective (value above 1), best first (ties: by name, so
        the order is fixed). A configuration that changes nothing is never recommended."""
        usable = [o for o in self.outcomes if o.stage == stage and o.usable and o.gains]
        return sorted(usable, key=lambda o: (-(o.value or 0.0), o.candidate.name))

    def validate(self) -> Outcome | None:
        best = self.ranked(FULL)[:VALIDATED]
        if not best:
            held = [o for o in self.outcomes if o.stage == FULL and o.usable]
            self.notes.append(
                f"{len(held)} configuration(s) held the constraints at full fidelity but none was shown faster "
                "(its whole interval above 1): nothing to validate"
                if held
                else "no candidate held the constraints at full fidelity: nothing to validate"
            )
            return None
        self._round(VALIDATE, [(o.candidate, None, o.threshold) for o in best])
        validated = {o.candidate.name: o for o in self.outcomes if o.stage == VALIDATE}
        for candidate in best:
            outcome = validated.get(candidate.candidate.name)
            if outcome is not None and outcome.usable and outcome.gains:
                return outcome
        self.notes.append("no validated candidate held the constraints on the held-out prompts and seeds")
        return None

    def run(self) -> SearchResult:
        """Every stage in order; the recommendation is the best candidate that held at validation."""
        self.screen()
        self.refine()
        self.full()
        recommended = self.validate()
        return SearchResult(self.outcomes, recommended, self.untimed_inert, self.split, self.notes)


def too_lossy(outcome: Outcome) -> bool:
    """Whether a threshold failed above the axis's boundary: it failed and was not inert (an inert one skipped
    nothing: it failed below the part of the axis that acts)."""
    return not outcome.judgement.passed and not outcome.judgement.inert


def lossless_rejected(outcomes: list[Outcome]) -> list[Outcome]:
    """Lossless candidates the gate's lossless verdict did not admit."""
    return [o for o in outcomes if o.candidate.kind == LOSSLESS and not o.judgement.passed]
