"""A tune's evaluations as sweeps: each round of the search is a sweep run directory, and the tune's own
directory gathers every round's cells into one results file the gate and the tables read.

Round ``rNN-<stage>`` runs the tuned model under the label ``<model>+rNN-<stage>`` (its own baseline and
noise floor, on the round's workload) in ``DIR/rounds/rNN-<stage>/``, a run directory like any sweep's. After
each round ``DIR/results.jsonl`` is rewritten from every round's records (one model label per round, so each
variant is judged against the baseline it ran beside), ``DIR/cells.planned.json`` lists every round's cells
(an unfinished round's missing cells fail the gate, as an interrupted sweep's do) and the round's outputs,
images and step files are linked under ``DIR``'s own folders. A round whose cells are all recorded is read
back, never run again; a round cut short is continued (``run_sweep(resume=True)``): that is ``--resume``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.profile import ModelSpec, Profile, Workload, parse_profile
from accel.results import RESULTS_FILE
from accel.sweep.resume import PLANNED_CELLS_FILE, RESOLVED_PROFILE_FILE, measured_records
from accel.tune.candidates import Candidate

ROUNDS_DIR = "rounds"
# A round's time as the search charged it (``RoundFiles``): what ``--resume`` charges again when it reads it back.
ROUND_TIME_FILE = "round-time.json"
LINKED = ("outputs", "images", "steps")
# (the round's profile, its run directory, resume) -> the round's records, as ``run_sweep`` returns them.
Evaluator = Callable[[Profile, Path, bool], list[dict[str, Any]]]


@dataclass(frozen=True)
class Round:
    """One sweep of the search: its place, its stage (``screen``, ``refine``, ``full``, ``validate``), the
    workload it runs and the candidates it measures."""

    index: int
    stage: str
    workload: Workload
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"r{self.index:02d}-{self.stage}"


def model_label(model: str, round_name: str) -> str:
    """The model's name in a round's cells: the round's baseline is its own."""
    return f"{model}+{round_name}"


def round_profile(base: Profile, model: ModelSpec, item: Round) -> Profile:
    """The sweep profile of a round: ``model`` under its round label, the round's workload and candidates, the
    base profile's measurement settings."""
    spec = model.model_dump(mode="json", exclude={"workload"})
    data = {
        "name": f"{base.name}-{item.name}",
        "description": f"omni-accel tune: round {item.name} of {base.name}",
        "models": [{**spec, "name": model_label(model.name, item.name)}],
        "workload": item.workload.model_dump(mode="json", exclude_unset=True),
        "variants": [{"name": c.name, "features": c.features} for c in item.candidates],
        # One model per round: no reference model to compare baselines with.
        "measure": base.measure.model_dump(mode="json", exclude_unset=True, exclude={"reference_model"}),
    }
    return parse_profile(data, f"tune round {item.name}")


def round_dir(out: Path, item: Round) -> Path:
    """Where a round's sweep runs."""
    return out / ROUNDS_DIR / item.name


def _planned(run_dir: Path) -> list[list[str]]:
    path = run_dir / PLANNED_CELLS_FILE
    try:
        planned = json.loads(path.read_text()) if path.is_file() else []
    except ValueError:
        return []
    return planned if isinstance(planned, list) else []


def finished(run_dir: Path) -> list[dict[str, Any]] | None:
    """The records of a round whose every planned cell is recorded; None when it has not run or was cut short."""
    if not (run_dir / RESOLVED_PROFILE_FILE).is_file():
        return None
    records = measured_records(run_dir)
    measured = {(r["model"], r["variant"]) for r in records}
    planned = _planned(run_dir)
    if not planned or any(tuple(cell) not in measured for cell in planned):
        return None
    return records


def run_round(base: Profile, model: ModelSpec, item: Round, out: Path, evaluate: Evaluator) -> list[dict[str, Any]]:
    """The records of ``item``: read back when finished earlier, else measured (continued when cut short)."""
    where = round_dir(out, item)
    done = finished(where)
    if done is not None:
        return done
    started = (where / RESOLVED_PROFILE_FILE).is_file()
    records = evaluate(round_profile(base, model, item), where, started)
    gather(out)
    return records


@dataclass(frozen=True)
class RoundFiles:
    """``accel.tune.search.RoundClock`` on a tune directory: each round's time in its own run directory, written
    once the round is measured and judged, read back only while that round's every cell is still recorded."""

    out: Path

    def read(self, item: Round) -> tuple[float, float] | None:
        """The recorded ``(seconds per cell, elapsed)`` of a round (the search asks only for a finished one, see
        ``finished``); None when it has none, or an
        unreadable or impossible one (not finite, negative): the round is then charged the time its read takes, and
        the search says so in its notes."""
        path = round_dir(self.out, item) / ROUND_TIME_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            per_cell, elapsed = float(data["seconds_per_cell"]), float(data["elapsed_s"])
        except (ValueError, KeyError, TypeError):
            return None
        if not (math.isfinite(per_cell) and math.isfinite(elapsed)) or per_cell <= 0 or elapsed < 0:
            return None  # not a time a round can have taken
        return per_cell, elapsed

    def finished(self, item: Round) -> bool:
        """Whether the round's every planned cell is recorded (``run_round`` will read it back)."""
        return finished(round_dir(self.out, item)) is not None

    def write(self, item: Round, per_cell: float, elapsed: float) -> None:
        """Record a round just measured."""
        path = round_dir(self.out, item) / ROUND_TIME_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, json.dumps({"seconds_per_cell": per_cell, "elapsed_s": elapsed}) + "\n")


def gather(out: Path) -> None:
    """Rewrite ``out``'s results file and planned cells from every round, and link each round's files."""
    rounds = sorted(p for p in (out / ROUNDS_DIR).iterdir() if p.is_dir()) if (out / ROUNDS_DIR).is_dir() else []
    lines: list[str] = []
    planned: list[list[str]] = []
    for where in rounds:
        results = where / RESULTS_FILE
        if results.is_file():
            lines += [json.dumps(r) + "\n" for r in measured_records(where)]
        planned += _planned(where)
        for folder in LINKED:
            for model_dir in sorted((where / folder).glob("*")) if (where / folder).is_dir() else []:
                link = out / folder / model_dir.name
                if not link.exists() and not link.is_symlink():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(os.path.relpath(model_dir, link.parent), link)
    _write_atomically(out / RESULTS_FILE, "".join(lines))
    _write_atomically(out / PLANNED_CELLS_FILE, json.dumps(planned) + "\n")


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def sweep_evaluator(source: str, executor: str | None = None, show_progress: bool = True) -> Evaluator:
    """The evaluator that measures: each round is an ``omni-accel sweep`` of its profile."""

    def evaluate(profile: Profile, run_dir: Path, resume: bool) -> list[dict[str, Any]]:
        from accel.sweep.runner import run_sweep

        result = run_sweep(profile, source, run_dir, executor=executor, show_progress=show_progress, resume=resume)
        return result.records

    return evaluate
