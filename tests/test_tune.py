"""omni-accel tune with a fake evaluator: each round's cells are synthetic records (``tests/synthetic.py``) drawn
from a known model of speed and quality along each threshold, written into the round's run directory as a sweep
writes them, and judged by the real gate. The search, its budget, its resume, its determinism and its report
are the real ones; only the measurement is stubbed. One slow test runs a real tune on the tiny zoo."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_profile
from synthetic import record

from accel.errors import ConfigError
from accel.profile import Profile, load_profile, parse_profile
from accel.results import RESULTS_FILE, ResultsLog
from accel.sweep.resume import PLANNED_CELLS_FILE, RESOLVED_PROFILE_FILE, measured_records
from accel.tune import tune
from accel.tune.axes import threshold_axis
from accel.tune.candidates import build_space

# The fake model's truth: TeaCache's SSIM falls 0.0813 per unit of threshold, so the gate's lossy SSIM limit (0.9)
# holds up to 1.230; its speed rises with the threshold. Cheap rounds (fewer steps) may flatter it (``flattery``).
SSIM_SLOPE = 0.0813
BOUNDARY = (1 - 0.9) / SSIM_SLOPE
PROMPTS = ["a white circle on the left", "a blue square in the centre", "a red triangle", "a red square"]


def tea_profile(variants: list[dict[str, Any]] | None = None, **tune_section: Any) -> Profile:
    data = small_profile(["tiny-flux"], variants or [{"name": "tea", "features": {"tea_cache": 0.8}}])
    data["workload"].update(prompts=PROMPTS, steps=8)
    if tune_section:
        data["tune"] = tune_section
    return parse_profile(data)


class FakeEvaluator:
    """Writes a round as a sweep would (resolved profile, planned cells, one record per cell, appended) from
    ``quality(features, steps)``, with ``overrides`` (``variant`` or ``stage:variant`` -> record values) over it;
    after ``stop_after`` cells in total it raises KeyboardInterrupt (a Ctrl-C)."""

    def __init__(
        self, stop_after: int | None = None, flattery: float = 0.0, inert_below: float = 0.0, **overrides: Any
    ) -> None:
        self.stop_after = stop_after
        self.flattery = flattery
        self.inert_below = inert_below  # TeaCache thresholds under this skip nothing (not engaged)
        self.overrides = overrides  # variant name -> record values over the model's
        self.cells: list[str] = []  # every cell measured, in order

    def quality(self, features: dict[str, Any], steps: int) -> dict[str, Any]:
        values: dict[str, Any] = {"speedup": 1.0, "ssim": 1.0, "psnr": math.inf}
        if "tea_cache" in features:
            threshold = features["tea_cache"]["rel_l1_thresh"]
            flattery = self.flattery if steps < 8 else 0.0  # the cheap screen looks better than full fidelity
            ssim = 1 - SSIM_SLOPE * threshold + flattery
            values.update(speedup=1 + threshold, ssim=ssim, psnr=25 + 100 * (ssim - 0.9))
            if threshold < self.inert_below:
                values.update(speedup=0.97, ssim=1.0, psnr=math.inf, engaged=False)
        if "attention_backend" in features:
            values["speedup"] *= 1.2
        return values

    def __call__(self, profile: Profile, run_dir: Path, resume: bool) -> list[dict[str, Any]]:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            (run_dir / RESOLVED_PROFILE_FILE).write_text(yaml.safe_dump(profile.model_dump(mode="json")))
        model = profile.models[0].name
        cells = ["baseline", "noise-floor", *(v.name for v in profile.variants)]
        (run_dir / PLANNED_CELLS_FILE).write_text(json.dumps([[model, c] for c in cells]))
        done = {r["variant"] for r in measured_records(run_dir)}
        log = ResultsLog(run_dir / RESULTS_FILE)
        features = {v.name: v.features for v in profile.variants}
        for cell in cells:
            if cell in done:
                continue
            if self.stop_after is not None and len(self.cells) >= self.stop_after:
                raise KeyboardInterrupt
            self.cells.append(f"{run_dir.name}/{cell}")
            stage = run_dir.name.split("-", 1)[1]
            log.append(self.record(model, cell, features.get(cell, {}), profile.workload.steps, stage))
        return measured_records(run_dir)

    def record(self, model: str, variant: str, features: dict[str, Any], steps: int, stage: str) -> dict[str, Any]:
        if variant == "baseline":
            return record(model, variant, {}, cell_wall_s=1.0)
        if variant == "noise-floor":
            return record(model, variant, {}, role="noise_floor", speedup=1.0, cell_wall_s=1.0)
        parsed = {name: _options(name, raw) for name, raw in features.items()}
        values = {**self.quality(parsed, steps), "cell_wall_s": 1.0, **self.overrides.get(variant, {})}
        values.update(self.overrides.get(f"{stage}:{variant}", {}))  # this stage only (screen, full, validate)
        return record(model, variant, features, **values)


def _options(name: str, raw: Any) -> dict[str, Any]:
    from accel.features import parse_feature_options

    return parse_feature_options(name, raw, "test").model_dump()


def recommended_threshold(result: Any) -> float:
    return result.recommended.candidate.features["tea_cache"]["rel_l1_thresh"]


def test_the_search_finds_the_largest_threshold_that_holds_and_validates_it(tmp_path):
    fake = FakeEvaluator()
    result = tune(tea_profile(refine_rounds=2), tmp_path / "t", evaluate=fake, seed=0)
    threshold = recommended_threshold(result)
    axis = threshold_axis("tea_cache")
    # k-section resolution after the screen and two refinements with 3 points each: the range / 4**3
    assert BOUNDARY - (axis.high - axis.low) / 4**3 <= threshold <= BOUNDARY
    assert result.recommended.stage == "validate" and result.recommended.judgement.passed
    # each refinement stays inside the bracket the earlier rounds left: above the highest pass, below the
    # lowest failure (a monotone axis: nothing above a failure can hold)
    cheap = [o for o in result.search.outcomes if o.stage in ("screen", "refine")]
    for name in dict.fromkeys(o.round for o in cheap if o.stage == "refine"):
        before = [o for o in cheap if o.round < name]
        lowest_fail = min(o.threshold for o in before if not o.judgement.passed)
        highest_pass = max(o.threshold for o in before if o.judgement.passed and o.threshold < lowest_fail)
        assert all(highest_pass < o.threshold < lowest_fail for o in cheap if o.round == name)
    stages = [o.stage for o in result.search.outcomes]
    assert stages.index("screen") < stages.index("refine") < stages.index("full") < stages.index("validate")
    # cheap rounds ran the first search prompt at half the steps; validation only held-out prompts and new seeds
    rounds = {p.name: load_profile(p / RESOLVED_PROFILE_FILE) for p in (tmp_path / "t" / "rounds").iterdir()}
    screen = next(p for name, p in rounds.items() if name.endswith("screen"))
    validate = next(p for name, p in rounds.items() if name.endswith("validate"))
    full = next(p for name, p in rounds.items() if name.endswith("full"))
    assert len(screen.workload.prompts) == 1 and screen.workload.steps == 4 and full.workload.steps == 8
    assert not set(validate.workload.prompts) & set(full.workload.prompts)
    assert not set(validate.workload.seeds) & set(full.workload.seeds)
    assert set(validate.workload.prompts) | set(full.workload.prompts) == set(PROMPTS)


def test_the_screen_starts_from_the_profiles_own_rungs(tmp_path):
    # The user's ladder (0.8 and 1.1 on TeaCache, 0.3 with another option) is screened beside the evenly spaced
    # points, so a rung that holds is never missed for falling between them.
    variants = [
        {"name": "tea-a", "features": {"tea_cache": 0.8}},
        {"name": "tea-b", "features": {"tea_cache": {"rel_l1_thresh": 1.1}}},
    ]
    result = tune(tea_profile(variants), tmp_path / "t", evaluate=FakeEvaluator(), seed=0)
    screened = {o.threshold for o in result.search.outcomes if o.stage == "screen"}
    assert {0.8, 1.1} <= screened
    assert [axis.rungs for axis in build_space(tea_profile(variants), "tiny-flux").axes] == [(0.8, 1.1)]


def test_a_threshold_the_cheap_screen_flatters_is_caught_at_full_fidelity(tmp_path):
    # Cheap rounds pass up to BOUNDARY + 0.12; every full-fidelity cell above BOUNDARY must fail there, and the
    # axis is searched again at full fidelity below the failure, down to the same resolution.
    fake = FakeEvaluator(flattery=0.01)
    result = tune(tea_profile(refine_rounds=2), tmp_path / "t", evaluate=fake, seed=0)
    full = [o for o in result.search.outcomes if o.stage == "full" and o.threshold is not None]
    assert any(o.threshold > BOUNDARY for o in full)  # the flattered survivors were tried
    assert all(o.judgement.passed == (o.threshold <= BOUNDARY) for o in full)
    assert BOUNDARY - 2 * (2.0 - 0.05) / 4**3 <= recommended_threshold(result) <= BOUNDARY


def test_a_threshold_the_cheap_screen_is_too_strict_about_is_found_at_full_fidelity(tmp_path):
    # Fewer steps make each reused step cost more: here the cheap rounds fail everything above 0.74 while full
    # fidelity holds up to BOUNDARY (1.23). The survivors hold at full fidelity, so the axis above them is
    # k-sectioned there: the recommendation is near the true boundary, not the cheap one.
    fake = FakeEvaluator(flattery=-0.04)
    result = tune(tea_profile(), tmp_path / "t", evaluate=fake, seed=0)
    cheap_boundary = (0.1 - 0.04) / SSIM_SLOPE
    cheap = [o for o in result.search.outcomes if o.stage in ("screen", "refine") and o.threshold is not None]
    assert max(o.threshold for o in cheap if o.judgement.passed) <= cheap_boundary
    full = [o for o in result.search.outcomes if o.stage == "full" and o.threshold is not None]
    assert any(o.judgement.passed and o.threshold > cheap_boundary for o in full)
    assert all(o.judgement.passed == (o.threshold <= BOUNDARY) for o in full)
    assert BOUNDARY - (2.0 - 0.05) / 4**2 <= recommended_threshold(result) <= BOUNDARY


def test_an_axis_the_cheap_screen_fails_everywhere_is_still_tried_at_full_fidelity(tmp_path):
    # The cheap rounds fail every threshold (their boundary is 0.06, under every point screened); full fidelity
    # holds up to BOUNDARY. The axis's lowest cheap failure is re-run at full fidelity, holds, and the axis is
    # k-sectioned upward there: a recommendation, near the true boundary.
    fake = FakeEvaluator(flattery=-0.095)
    result = tune(tea_profile(), tmp_path / "t", evaluate=fake, seed=0)
    cheap = [o for o in result.search.outcomes if o.stage in ("screen", "refine") and o.threshold is not None]
    assert cheap and not any(o.judgement.passed for o in cheap)
    assert BOUNDARY - (2.0 - 0.05) / 4**2 <= recommended_threshold(result) <= BOUNDARY


def test_an_inert_threshold_bounds_the_axis_from_below_not_above(tmp_path):
    # As mini-flux's TeaCache at half the steps: thresholds under 0.2 skip nothing (inert, a failure for being
    # too low), every other cheap threshold fails for loss. The inert failure must not become the axis's upper
    # bound: the lowest lossy failure above it is re-run at full fidelity, holds, and the axis opens upward.
    fake = FakeEvaluator(flattery=-0.095, inert_below=0.2)
    result = tune(tea_profile(refine_rounds=2), tmp_path / "t", evaluate=fake, seed=0)
    cheap = [o for o in result.search.outcomes if o.stage in ("screen", "refine")]
    assert any(o.judgement.inert for o in cheap) and not any(o.judgement.passed for o in cheap)
    # no cell is spent under a threshold already found inert (nothing acts there)
    for index, outcome in enumerate(result.search.outcomes):
        if outcome.judgement.inert:
            later = result.search.outcomes[index + 1 :]
            assert not any(o.threshold is not None and o.threshold < outcome.threshold for o in later)
    assert BOUNDARY - (2.0 - 0.05) / 4**2 <= recommended_threshold(result) <= BOUNDARY


def test_same_seed_same_recommendation_and_the_seed_orders_the_search(tmp_path):
    first = tune(tea_profile(), tmp_path / "a", evaluate=FakeEvaluator(), seed=3)
    second = tune(tea_profile(), tmp_path / "b", evaluate=FakeEvaluator(), seed=3)
    assert (tmp_path / "a" / "recommended.yaml").read_text() == (tmp_path / "b" / "recommended.yaml").read_text()
    assert [o.candidate.name for o in first.search.outcomes] == [o.candidate.name for o in second.search.outcomes]
    splits = set()
    for seed in range(6):
        split = tune(tea_profile(), tmp_path / f"s{seed}", evaluate=FakeEvaluator(), seed=seed).search.split
        splits.add(tuple(split.validation))
    assert len(splits) > 1  # the seed chooses the held-out prompts


def test_an_interrupted_tune_resumes_without_measuring_a_cell_twice(tmp_path):
    whole = FakeEvaluator()
    expected = tune(tea_profile(), tmp_path / "whole", evaluate=whole, seed=1)
    cut = FakeEvaluator(stop_after=len(whole.cells) // 2)
    with pytest.raises(KeyboardInterrupt):
        tune(tea_profile(), tmp_path / "cut", evaluate=cut, seed=1)
    with pytest.raises(ConfigError, match="--resume"):
        tune(tea_profile(), tmp_path / "cut", evaluate=FakeEvaluator(), seed=1)
    with pytest.raises(ConfigError, match="seed changed"):
        tune(tea_profile(), tmp_path / "cut", evaluate=FakeEvaluator(), seed=2, resume=True)
    rest = FakeEvaluator()
    resumed = tune(tea_profile(), tmp_path / "cut", evaluate=rest, seed=1, resume=True)
    assert sorted(cut.cells + rest.cells) == sorted(whole.cells)  # nothing measured twice, nothing lost
    assert recommended_threshold(resumed) == recommended_threshold(expected)
    whole_results = (tmp_path / "whole" / RESULTS_FILE).read_text().count("\n")
    assert (tmp_path / "cut" / RESULTS_FILE).read_text().count("\n") == whole_results


class ClockedEvaluator(FakeEvaluator):
    """A FakeEvaluator whose every cell takes ``cell_s`` seconds of the search's (fake) clock."""

    def __init__(self, clock: list[float], cell_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clock, self.cell_s = clock, cell_s

    def record(self, *args: Any) -> dict[str, Any]:
        self.clock[0] += self.cell_s
        return super().record(*args)


def test_a_finished_tune_resumed_measures_nothing_and_decides_as_it_did(tmp_path, monkeypatch):
    """A tune under a time budget, resumed once finished, is charged each round's recorded time: it runs no round
    the first run did not, and its recommendation and report are the first run's (wave 13's tune-video resume
    went on to r05-full and r06-validate: read-back rounds cost nothing, so the budget looked unspent)."""
    import types

    from accel.tune import search as search_module

    clock = [0.0]
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    unlimited = tune(tea_profile(), tmp_path / "all", evaluate=ClockedEvaluator(clock), seed=0)
    # 10 s a cell: 4 minutes stop the search after its screen, 6 before its last full round's second survivor.
    for minutes in (4.0, 6.0):
        out = tmp_path / f"t{minutes:g}"
        done = tune(tea_profile(), out, evaluate=ClockedEvaluator(clock), seed=0, budget_min=minutes)
        assert len(done.search.outcomes) < len(unlimited.search.outcomes)  # the budget stopped it early
        assert all((p / "round-time.json").is_file() for p in (out / "rounds").iterdir())
        report = (out / "tune.md").read_text()
        (out / "tune.md").unlink()
        clock[0] += 1000.0  # resumed later: the clock has moved on
        again = ClockedEvaluator(clock)
        resumed = tune(tea_profile(), out, evaluate=again, seed=0, budget_min=minutes, resume=True)
        assert again.cells == []  # nothing measured again, no round added
        assert [(o.round, o.candidate.name) for o in resumed.search.outcomes] == [
            (o.round, o.candidate.name) for o in done.search.outcomes
        ]
        assert (out / "tune.md").read_text() == report  # the report, written again


def test_a_resumed_round_without_a_readable_recorded_time_is_said_and_its_read_never_recorded(tmp_path, monkeypatch):
    """A tune from before wave 14 (no round-time.json), or one whose file is damaged or impossible, is resumed
    without a crash; the report's notes say which rounds were charged the time of their read, and that read is
    never written down as what the round cost (found by wave 14's review)."""
    import types

    from accel.tune import search as search_module

    clock = [0.0]
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    damaged = {"missing": None, "corrupt": "{not json", "nan": '{"seconds_per_cell": NaN, "elapsed_s": NaN}',
               "negative": '{"seconds_per_cell": -1, "elapsed_s": -100000}'}  # fmt: skip
    for name, text in damaged.items():
        out = tmp_path / name
        tune(tea_profile(), out, evaluate=ClockedEvaluator(clock), seed=0, budget_min=4.0)
        timing = out / "rounds" / "r01-screen" / "round-time.json"
        if text is None:
            timing.unlink()
        else:
            timing.write_text(text)
        resumed = tune(tea_profile(), out, evaluate=ClockedEvaluator(clock), seed=0, budget_min=4.0, resume=True)
        assert any("r01-screen was read back without a readable recorded time" in n for n in resumed.search.notes)
        assert timing.is_file() == (text is not None) and (text is None or timing.read_text() == text), name
        assert "r01-screen was read back" in (out / "tune.md").read_text()


def test_the_tune_directory_is_a_run_directory_the_gate_reads(tmp_path, monkeypatch, capsys):
    from conftest import invoke

    tune(tea_profile(), tmp_path / "t", evaluate=FakeEvaluator(), seed=0)
    records = [json.loads(line) for line in (tmp_path / "t" / RESULTS_FILE).read_text().splitlines()]
    rounds = sorted({r["model"].split("+")[1] for r in records})
    baselines = {r["model"].split("+")[1] for r in records if r["variant"] == "baseline"}
    assert len(rounds) >= 3 and baselines == set(rounds)  # each round's cells beside their own baseline
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "t"))
    assert code == 1  # the thresholds past the boundary fail, as the tune found
    assert "tea-cache-" in out and "never measured" not in out


def test_the_exported_profile_sweeps_as_it_is_with_the_recommended_variant(tmp_path):
    profile = tea_profile()
    result = tune(profile, tmp_path / "t", evaluate=FakeEvaluator(), seed=0)
    exported = load_profile(tmp_path / "t" / "recommended.yaml")
    assert [v.name for v in exported.variants] == ["tuned"]
    assert exported.variants[0].features == result.recommended.candidate.features
    assert exported.workload == profile.workload and exported.models[0].source == profile.models[0].source
    report = (tmp_path / "t" / "tune.md").read_text()
    assert "TeaCacheConfig(rel_l1_thresh=" in report and '"cache_backend": "tea_cache"' in report
    assert (tmp_path / "t" / "pareto.png").stat().st_size > 0


def test_inert_and_harmful_configurations_are_named(tmp_path):
    from synthetic import _claim

    slower = {"speedup": 0.8, "speedup_ci": {**_claim(0.8), "low": 0.7, "high": 0.9}}
    # One expert of two skipped nothing (mini-wan's MagCache at a low threshold: half of the high-noise expert's
    # work skipped, none of the low-noise one's): inert, and the report says which, not "skipped nothing".
    partial = "partial: transformer_2 called and skipped no work on any run (of ['transformer', 'transformer_2'])"
    one_expert = {"tea_cache": {"engaged": False, "summary": partial}}
    fake = FakeEvaluator(**{"tea-cache-1.51": {"evidence": one_expert}, "tea-cache-0.537": slower})
    result = tune(tea_profile(), tmp_path / "t", evaluate=fake, seed=0)
    report = (tmp_path / "t" / "tune.md").read_text()
    assert f"inert: `tea-cache-1.51` (r01-screen): tea_cache not engaged ({partial})" in report, report
    assert "harmful: `tea-cache-0.537`" in report
    named = {o.candidate.name: o.judgement for o in result.search.outcomes}
    assert named["tea-cache-1.51"].inert and not named["tea-cache-1.02"].inert
    assert named["tea-cache-0.537"].harmful and not named["tea-cache-1.02"].harmful
    assert not any(o.stage == "full" and o.candidate.name == "tea-cache-0.537" for o in result.search.outcomes)


def test_an_inert_cell_says_what_its_caches_evidence_says_and_a_cell_that_did_not_run_says_so():
    from types import SimpleNamespace

    from accel.tune.constraints import inert_reason

    def verdict(**states):
        return SimpleNamespace(feature_states=states)

    ok = {"status": "ok", "error": None}
    partial = {"tea_cache": {"engaged": False, "summary": "partial: transformer_2 skipped no work"}}
    assert inert_reason({**ok, "evidence": partial}, verdict(tea_cache="not engaged")) == (
        "tea_cache not engaged (partial: transformer_2 skipped no work)"
    )
    # Two caches, one of no effect beside one not engaged: both named; evidence without a summary, or not a mapping
    # at all, names the gate's state alone (never "skipped nothing", which the counts may contradict).
    two = verdict(tea_cache="no effect", mag_cache="not engaged")
    assert inert_reason({**ok, "evidence": {"tea_cache": {"engaged": True}}}, two) == (
        "tea_cache no effect; mag_cache not engaged"
    )
    assert inert_reason({**ok, "evidence": ["not", "a", "mapping"]}, verdict(tea_cache="not engaged")) == (
        "tea_cache not engaged"
    )
    # Not inert: an engaged cache, or a feature of another family that did not engage.
    assert inert_reason({**ok, "evidence": partial}, verdict(tea_cache="engaged")) == ""
    assert inert_reason({**ok, "evidence": {}}, verdict(compile="not engaged")) == ""
    failed = {"status": "failed", "error": "RuntimeError: boom\nTraceback ...", "evidence": {}}
    assert inert_reason(failed, verdict(tea_cache="not engaged")) == (
        "the cell did not run (failed: RuntimeError: boom): its cache never acted"
    )


def test_a_threshold_under_the_calibrated_range_is_reported_inert_without_being_timed(tmp_path):
    fake = FakeEvaluator()
    profile = tea_profile(ranges={"tea_cache": [0.05, 2.0]})
    result = tune(profile, tmp_path / "t", evaluate=fake, seed=0, observed={"tea_cache": (0.6, 2.0)})
    assert any(line.startswith("tea-cache-0.537") for line in result.search.untimed_inert)
    assert not any(cell.endswith("tea-cache-0.537") for cell in fake.cells)
    assert "inert, not timed: tea-cache-0.537" in (tmp_path / "t" / "tune.md").read_text()


def test_a_lossless_feature_is_admitted_only_when_the_gate_finds_it_equivalent(tmp_path):
    variants = [
        {"name": "tea", "features": {"tea_cache": 0.8}},
        {"name": "attn", "features": {"attention_backend": "native"}},
    ]
    good = tune(tea_profile(variants), tmp_path / "good", evaluate=FakeEvaluator(), seed=0)
    combined = [o for o in good.search.outcomes if o.candidate.kind == "combination"]
    assert combined and all("attention_backend" in o.candidate.features for o in combined)
    bad = FakeEvaluator(attn={"ssim": 0.95, "psnr": 30.0})  # a "lossless" backend that changes the image
    rejected = tune(tea_profile(variants), tmp_path / "bad", evaluate=bad, seed=0)
    assert not [o for o in rejected.search.outcomes if o.candidate.kind == "combination"]
    assert not any(o.stage == "full" and o.candidate.name == "attn" for o in rejected.search.outcomes)


def test_a_configuration_that_gains_nothing_is_never_recommended(tmp_path):
    variants = [{"name": "attn", "features": {"attention_backend": "native"}}]
    same = {"speedup": 1.0}  # equivalent to the baseline: admitted by the gate, but nothing to ship
    result = tune(tea_profile(variants), tmp_path / "t", evaluate=FakeEvaluator(attn=same), seed=0)
    assert result.recommended is None and not (tmp_path / "t" / "recommended.yaml").exists()
    assert not any(o.stage == "validate" for o in result.search.outcomes)  # no validation spent on a no-op
    assert "Recommendation\n\nNone" in (tmp_path / "t" / "tune.md").read_text()
    # faster where the search measured it, no gain on the held-out prompts: not recommended either
    only_there = FakeEvaluator(**{"validate:attn": same})
    result = tune(tea_profile(variants), tmp_path / "u", evaluate=only_there, seed=0)
    assert any(o.stage == "validate" and o.candidate.name == "attn" for o in result.search.outcomes)
    assert result.recommended is None


def test_a_budget_cuts_the_full_rounds_tail_never_the_admitted_candidates_or_pairs(tmp_path):
    # A round cut by the budget loses its tail: each axis's best survivor, the admitted candidates and the pairs
    # come first, the axis's second survivor and its re-run cheap failure after them (mini-wan's tune lost its
    # only admitted candidate, regional compile, that way).
    variants = [
        {"name": "tea", "features": {"tea_cache": 0.8}},
        {"name": "attn", "features": {"attention_backend": "native"}},
    ]
    result = tune(tea_profile(variants), tmp_path / "t", evaluate=FakeEvaluator(), seed=0)
    first_full = next(o.round for o in result.search.outcomes if o.stage == "full")
    order = [o for o in result.search.outcomes if o.round == first_full]
    thresholds = [i for i, o in enumerate(order) if o.threshold is not None]
    fixed = [i for i, o in enumerate(order) if o.threshold is None]
    assert len(thresholds) >= 2 and fixed, [o.candidate.name for o in order]
    assert thresholds[0] < min(fixed) and max(fixed) < thresholds[1], [o.candidate.name for o in order]


def test_a_point_estimate_above_one_whose_interval_reaches_one_is_not_recommended(tmp_path):
    from synthetic import _claim

    # The attention backend holds every constraint at 1.2x, but its interval reaches down to 0.95: not shown
    # faster, so nothing is recommended, and the report says that it held but was not shown faster.
    unsure = {"speedup": 1.2, "speedup_ci": {**_claim(1.2), "low": 0.95, "high": 1.4}}
    variants = [{"name": "attn", "features": {"attention_backend": "native"}}]
    result = tune(tea_profile(variants), tmp_path / "t", evaluate=FakeEvaluator(attn=unsure), seed=0)
    assert result.recommended is None
    assert any("held the constraints at full fidelity but none was shown faster" in n for n in result.search.notes)
    sure = {"speedup": 1.2, "speedup_ci": {**_claim(1.2), "low": 1.1, "high": 1.3}}
    result = tune(tea_profile(variants), tmp_path / "u", evaluate=FakeEvaluator(attn=sure), seed=0)
    assert result.recommended is not None and result.recommended.candidate.name == "attn"


def test_the_cell_budget_is_kept(tmp_path):
    fake = FakeEvaluator()
    tune(tea_profile(), tmp_path / "t", evaluate=fake, seed=0, budget_cells=5)
    variants = [c for c in fake.cells if not c.endswith(("baseline", "noise-floor"))]
    assert 0 < len(variants) <= 5


def test_the_time_budget_stops_the_search_after_the_round_that_spent_it(tmp_path):
    fake = FakeEvaluator()
    result = tune(tea_profile(), tmp_path / "t", evaluate=fake, seed=0, budget_min=0.0001)
    assert {o.stage for o in result.search.outcomes} == {"screen"}  # the first round gives the time per cell
    assert result.recommended is None and "nothing to validate" in " ".join(result.search.notes)


def test_profile_constraints_replace_the_gates_limits(tmp_path):
    loose = tune(tea_profile(constraints={"psnr": 20.0}), tmp_path / "t", evaluate=FakeEvaluator(), seed=0)
    # PSNR >= 20 holds up to SSIM 0.85 in the fake: a higher threshold than the gate's SSIM 0.9 allows
    assert recommended_threshold(loose) > BOUNDARY
    assert any("PSNR dB" in line for line in loose.recommended.judgement.evidence)


def test_attributes_lost_holds_by_its_intervals_top_as_the_gate_judges_it():
    """A loss measured as 0 on 4 images is not shown to be under 0.05 (the Wilson interval's top is 0.49): the
    tuner holds it as the gate does, not by its point estimate; 0 over 200 images is (top 0.019)."""
    from accel.tune.constraints import custom_checks
    from accel.tune.spec import Constraints

    limit = Constraints(attributes_lost=0.05)

    def lost(loss: float, images: int | None) -> tuple[bool, str]:
        paired = {"images": images} if images is not None else None
        [check] = custom_checks({"adherence_loss": loss, "adherence": {"vs_baseline": paired}}, limit)
        return check

    few, many = lost(0.0, 4), lost(0.0, 200)
    assert not few[0] and "95% interval high" in few[1] and "over 4 images" in few[1], few
    assert many[0] and "over 200 images" in many[1], many
    assert not lost(0.06, 10_000)[0]
    old_record = lost(0.0, None)  # before schema 3: the net change, named so
    assert old_record[0] and "net change" in old_record[1], old_record
    assert not custom_checks({}, limit)[0][0]  # no ground truth: nothing is assumed


def test_bad_tune_input_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="tune: points"):
        tune(tea_profile(points=0), tmp_path / "a", evaluate=FakeEvaluator())
    with pytest.raises(ConfigError, match="held out"):
        data = small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.8}}])
        tune(parse_profile(data), tmp_path / "b", evaluate=FakeEvaluator())
    with pytest.raises(ConfigError, match="nothing to tune"):
        tune(parse_profile(small_profile(["tiny-flux"], [])), tmp_path / "c", evaluate=FakeEvaluator())


def test_the_cli_refuses_two_budgets_and_an_unknown_objective_before_any_work(tmp_path, monkeypatch, capsys):
    from conftest import invoke

    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.8}}])))
    out = str(tmp_path / "t")
    code, _, err = invoke(
        monkeypatch, capsys, "tune", str(profile), "--out", out, "--budget-cells", "3", "--budget-min", "1"
    )
    assert code == 2 and "give one budget" in err
    code, _, err = invoke(monkeypatch, capsys, "tune", str(profile), "--out", out, "--objective", "speed")
    assert code == 2 and "latency, memory" in err and not (tmp_path / "t").exists()


def test_an_interrupted_tune_says_how_to_continue_the_tune_not_its_round(tmp_path, monkeypatch, capsys):
    """Ctrl-C inside a round: the round's sweep names 'omni-accel sweep --resume ROUND', which would finish that
    round and leave the search behind; the tune's message names the tune's own --resume."""
    from conftest import invoke

    import accel.tune
    from accel.errors import Interrupted
    from accel.sweep.resume import RESOLVED_PROFILE_FILE
    from accel.sweep.runner import interrupted_message

    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.8}}])))
    out = tmp_path / "t"
    round_dir = out / "rounds" / "r01-screen"

    def interrupted_tune(*args: Any, **kwargs: Any) -> None:
        round_dir.mkdir(parents=True)
        (round_dir / RESOLVED_PROFILE_FILE).write_text("{}\n")
        raise Interrupted(interrupted_message(round_dir))

    monkeypatch.setattr(accel.tune, "tune", interrupted_tune)
    code, _, err = invoke(monkeypatch, capsys, "tune", str(profile), "--out", str(out))
    assert code == 130
    assert f"interrupted: 0 cell(s) recorded in {round_dir / 'results.jsonl'} are kept" in err
    assert f"continue the tune with 'omni-accel tune {profile} --out {out} --resume'" in err
    assert "sweep --resume" not in err


@pytest.mark.slow
def test_a_real_tune_on_the_tiny_zoo_runs_sweeps_the_gate_reads(tmp_path, monkeypatch, capsys):
    from conftest import invoke

    # One round: at two steps TeaCache computes both (its first and last steps always run), so its one screened
    # threshold is inert, named so, and nothing is left to carry to full fidelity.
    data = small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.8}}], num_images_per_prompt=1)
    data["workload"]["prompts"] = ["a red fox", "a blue bird"]
    data["tune"] = {"points": 1, "refine_rounds": 0, "survivors": 1}
    result = tune(parse_profile(data), tmp_path / "t", show_progress=False)
    named = {(o.stage, o.candidate.name): o for o in result.search.outcomes}
    assert named[("screen", "tea-cache-1.02")].judgement.inert and result.recommended is None
    assert "inert: `tea-cache-1.02`" in (tmp_path / "t" / "tune.md").read_text()
    assert (tmp_path / "t" / "rounds" / "r01-screen" / "report.md").is_file()  # each round is a whole sweep
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "t"))
    assert code == 1  # the inert TeaCache cell fails: its cache never engaged
    assert "tiny-flux+r01-screen/tea-cache-1.02" in out and "never measured" not in out


def test_a_quantization_candidate_leaves_out_the_layers_the_measured_pick_names(monkeypatch):
    """The sensitivity table's measured pick (accel.diverge.sensitivity.measured_pick) is what tune excludes."""
    import accel.diverge.run
    from accel.diverge.sensitivity import LayerError, Pick
    from accel.tune import _sensitivity_exclude

    rows = [LayerError("transformer", f"blocks.{i}.ff", 0.1 / (i + 1)) for i in range(4)]
    pick = Pick(rows[:2], [(0, 0.004), (1, 0.003), (2, 0.002), (3, 0.002)])
    asked: list[tuple[str, str]] = []

    def measured(profile, model, variant):
        asked.append((model, variant))
        return rows, "int8wo", pick

    monkeypatch.setattr(accel.diverge.run, "sensitivity", measured)
    exclude = _sensitivity_exclude(parse_profile(small_profile(), "p.yaml"), "tiny-flux")
    assert exclude("int8") == ["blocks.0.ff", "blocks.1.ff"] and asked == [("tiny-flux", "int8")]
