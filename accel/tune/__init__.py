"""``omni-accel tune``: which configuration to ship for a model, searched under quality constraints.

``tune(profile, out)`` searches the features the profile's variants name (``accel.tune.candidates``) for the
model's fastest configuration (or the one using the least memory) that holds the constraints
(``accel.tune.constraints``: the gate's limits by default, or the profile's ``tune:`` section,
``accel.tune.spec``), cheap fidelity first (``accel.tune.search``), every evaluation a sweep cell in a run
directory (``accel.tune.rounds``: ``--resume``, ``omni-accel gate DIR`` and ``table DIR`` work on it), and
hands back ``recommended.yaml``, ``tune.md``, ``pareto.png`` and ``tune.json`` (``accel.tune.report``,
``accel.tune.export``). Threshold ranges come through ``accel.tune.axes.threshold_axis``: a calibration's
observed signal ranges (``observed``) when given, else each feature's documented default range.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from accel.errors import ConfigError
from accel.profile import ModelSpec, Profile, load_profile
from accel.results import RESULTS_FILE
from accel.sweep.resume import RESOLVED_PROFILE_FILE
from accel.tune.rounds import Evaluator, Round, RoundFiles, round_dir, run_round, sweep_evaluator
from accel.tune.search import Budget, Outcome, Search, SearchResult
from accel.tune.spec import TuneSpec, parse_tune_section

__all__ = ["OBJECTIVES", "SETTINGS_FILE", "TuneResult", "tune"]

OBJECTIVES = ("latency", "memory")
SETTINGS_FILE = "tune.settings.json"


@dataclass
class TuneResult:
    """Where a tune wrote its files, and what it found."""

    out: Path
    search: SearchResult
    report_path: Path
    recommended_path: Path | None

    @property
    def recommended(self) -> Outcome | None:
        return self.search.recommended


def _model(profile: Profile, name: str | None, source: str) -> ModelSpec:
    names = [m.name for m in profile.models]
    if name is None:
        if len(names) > 1:
            shown = ", ".join(names)
            raise ConfigError(f"{source}: the profile has {len(names)} models ({shown}): name one with --model")
        return profile.models[0]
    for model in profile.models:
        if model.name == name:
            return model
    raise ConfigError(f"--model: '{name}' is not a model of {source} ({', '.join(names)})")


def _check_settings(out: Path, settings: dict[str, Any], resume: bool) -> None:
    """A new tune needs an empty directory; a resumed one the same profile, model, seed and objective."""
    path = out / SETTINGS_FILE
    if not resume:
        if path.is_file() or ((out / RESULTS_FILE).is_file() and (out / RESULTS_FILE).stat().st_size):
            raise ConfigError(f"{out}: already holds a tune; continue it with --resume or choose another --out")
        return
    if not path.is_file():
        raise ConfigError(f"{out}: not a tune directory (no {SETTINGS_FILE}); nothing to resume")
    before = json.loads(path.read_text())
    kept = ("fingerprint", "tune", "model", "seed", "objective")
    changed = [key for key in kept if before.get(key) != settings.get(key)]
    if changed:
        raise ConfigError(
            f"{out}: {', '.join(changed)} changed since this tune started; resume with the same profile and options, "
            "or start a new --out"
        )


def _objective_value(record: dict[str, Any], objective: str) -> tuple[float | None, tuple[float, float] | None]:
    if objective == "memory":
        value = record.get("memory_reduction")
        return (float(value) if isinstance(value, (int, float)) else None), None
    claim = record.get("speedup_ci") or {}
    low, high = claim.get("low"), claim.get("high")
    value = record.get("speedup")
    interval = (float(low), float(high)) if low is not None and high is not None else None
    return (float(value) if isinstance(value, (int, float)) else None), interval


def _judge_round(
    item: Round, records: list[dict[str, Any]], where: Path, spec: TuneSpec, objective: str
) -> list[Outcome]:
    """Each candidate of the round against the constraints, through the gate's verdict on the round."""
    from accel.gate import load_gate_data
    from accel.gate.judge import judge_records
    from accel.sweep.runner import run_measure
    from accel.sweep.spec import sample_keys
    from accel.tune.constraints import Judgement, judge
    from accel.tune.quality import attach_ssim_interval

    keys = sample_keys(item.workload)
    for each in records:
        attach_ssim_interval(each, where, keys)
    verdicts = {v.variant: v for v in judge_records(records, load_gate_data(), run=run_measure(where)).verdicts}
    by_variant = {r["variant"]: r for r in records}
    outcomes = []
    for candidate in item.candidates:
        record = by_variant.get(candidate.name)
        if record is None or candidate.name not in verdicts:
            lost = Judgement(False, [f"FAILED: {item.name} recorded no cell for {candidate.name}"])
            outcomes.append(Outcome(candidate, item.name, item.stage, lost, None, None))
            continue
        value, interval = _objective_value(record, objective)
        judgement = judge(record, verdicts[candidate.name], spec.constraints)
        outcomes.append(Outcome(candidate, item.name, item.stage, judgement, value, interval, record))
    return outcomes


def _sensitivity_exclude(profile: Profile, model: str) -> Callable[[str], list[str]]:
    def exclude(variant: str) -> list[str]:
        from accel.diverge.run import sensitivity

        _, _, pick = sensitivity(profile, model, variant)  # the layers leaving out measurably helps
        return [row.layer for row in pick.layers]

    return exclude


def tune(
    profile: Profile | str | Path,
    out: str | Path,
    *,
    model: str | None = None,
    objective: str | None = None,
    budget_cells: int | None = None,
    budget_min: float | None = None,
    seed: int = 0,
    resume: bool = False,
    evaluate: Evaluator | None = None,
    observed: dict[str, tuple[float, float]] | None = None,
    exclude_for: Callable[[str], list[str]] | None = None,
    executor: str | None = None,
    show_progress: bool = True,
) -> TuneResult:
    """Search ``profile``'s features for ``model`` (default: its only model) under the constraints and write the
    recommendation and its evidence under ``out``.

    ``objective``: ``latency`` (default, or the profile's ``tune.objective``) or ``memory``. ``budget_cells``
    counts variant cells, ``budget_min`` wall minutes (None: no limit). ``seed`` orders the search (held-out
    prompts, validation seeds, axis order): the same seed and measurements give the same recommendation.
    ``resume`` continues ``out`` (finished rounds are read back). ``evaluate`` measures a round (default: a
    sweep, ``accel.tune.rounds.sweep_evaluator``); ``observed``: calibrated decision-signal ranges per feature;
    ``exclude_for(variant)``: the layers a quantization variant leaves out (default: the sensitivity table's).
    """
    from accel.tune.candidates import build_space
    from accel.tune.export import (
        RECOMMENDED_FILE,
        apply_snippet,
        engine_arguments,
        profile_yaml,
        recommended_profile,
    )
    from accel.tune.report import write_json, write_markdown, write_pareto_png

    source = str(profile) if not isinstance(profile, Profile) else "<profile>"
    loaded = profile if isinstance(profile, Profile) else load_profile(profile)
    spec = parse_tune_section(loaded.tune, source)
    objective = objective or spec.objective or "latency"
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective: '{objective}' is not one of {', '.join(OBJECTIVES)}")
    chosen = _model(loaded, model, source)
    out = Path(out)
    settings = {
        "fingerprint": loaded.fingerprint(), "tune": spec.model_dump(mode="json"), "model": chosen.name,
        "seed": seed, "objective": objective, "budget_cells": budget_cells, "budget_min": budget_min,
    }  # fmt: skip
    _check_settings(out, settings, resume)
    if exclude_for is None and evaluate is None:
        exclude_for = _sensitivity_exclude(loaded, chosen.name)
    space = build_space(
        loaded,
        chosen.name,
        spec.features,
        observed,
        {name: (low, high) for name, (low, high) in spec.ranges.items()},
        exclude_for,
    )
    if not space.axes and not space.fixed:
        raise ConfigError(
            f"{source}: nothing to tune for {chosen.name}: name features under variants (a cache with a threshold "
            "becomes an axis) or list cache features under tune.features"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    (out / RESOLVED_PROFILE_FILE).write_text(yaml.safe_dump(loaded.model_dump(mode="json"), sort_keys=False))
    evaluate = evaluate or sweep_evaluator(source, executor, show_progress)

    def run(item: Round) -> list[Outcome]:
        records = run_round(loaded, chosen, item, out, evaluate)
        return _judge_round(item, records, round_dir(out, item), spec, objective)

    budget = Budget(budget_cells, budget_min * 60 if budget_min is not None else None)
    workload = loaded.workload_for(chosen)
    result = Search(space, spec, workload, seed, budget, run, RoundFiles(out)).run()

    recommended_path = None
    extras: dict[str, Any] = {
        "constraints": _constraints_text(spec),
        "recommended_file": RECOMMENDED_FILE,
        "settings": settings,
    }
    if result.recommended is not None:
        features = result.recommended.candidate.features
        why = f"tuned by omni-accel tune ({objective}): {result.recommended.candidate.name}, validated in " + (
            f"{result.recommended.round}"
        )
        recommended_path = out / RECOMMENDED_FILE
        recommended_path.write_text(profile_yaml(recommended_profile(loaded, chosen, features, why)))
        extras.update(apply=apply_snippet(features), engines=engine_arguments(features))
    write_pareto_png(out, result, objective)
    write_json(out, result, extras)
    report = write_markdown(out, result, objective, extras)
    return TuneResult(out, result, report, recommended_path)


def _constraints_text(spec: TuneSpec) -> str:
    given = {k: v for k, v in spec.constraints.model_dump().items() if v is not None}
    if not given:
        return "the gate's limits (lossy parity by family, attributes lost where a ground truth exists)"
    return ", ".join(f"{k} {v}" for k, v in given.items()) + " (from the profile's tune.constraints)"
