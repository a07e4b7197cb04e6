"""A run judged as a whole (issue 25's review): one that measured nothing fails the gate and the pytest plugin
alike, and a speedup is published only against a noise-floor record in the same results."""

from __future__ import annotations

import json

import pytest
from conftest import invoke
from synthetic import results

from accel.gate import judge_records, load_gate_data


def _unsupported(record: dict, error: str = "needs CUDA") -> dict:
    kept = {k: record[k] for k in ("model", "variant", "features", "modality") if k in record}
    return {**kept, "status": "unsupported", "unsupported_scope": "environment", "error": error}


def _write(run, records) -> None:
    run.mkdir(exist_ok=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_an_empty_results_file_measured_nothing(tmp_path, monkeypatch, capsys):
    _write(tmp_path / "run", [])
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "run"))
    assert code == 1 and "nothing was measured: the results hold no record" in out, out


def test_a_run_where_one_family_is_unavailable_is_judged_as_before():
    """A coverage run where a family cannot run here (all its records unsupported in this environment) is judged
    on what the others measured: its cells are skips, nothing else changes."""
    data = load_gate_data()
    records = results()
    flux_only = [r for r in records if r["model"] == "flux"]
    with_wan_unavailable = flux_only + [_unsupported(r) for r in records if r["model"] == "wan"]
    report, reference = judge_records(with_wan_unavailable, data), judge_records(flux_only, data)
    assert report.nothing_measured is None and report.exit_code == reference.exit_code
    assert [v.outcome for v in report.verdicts if v.model == "flux"] == [v.outcome for v in reference.verdicts]
    assert all(v.outcome == "skip" for v in report.verdicts if v.model == "wan")


def test_a_run_whose_passing_cells_are_all_that_ran_passes():
    """Only the nothing-measured rule changes the exit status: a run with a passing model and an unavailable one
    exits 0."""
    data = load_gate_data()
    records = results()
    passing = [r for r in records if r["model"] == "flux" and r["variant"] in ("baseline", "noise-floor", "compile")]
    report = judge_records(passing + [_unsupported(r) for r in records if r["model"] == "wan"], data)
    assert report.exit_code == 0 and not report.failed and report.nothing_measured is None, [
        v.message() for v in report.failed
    ]


def test_the_plugin_fails_a_run_that_measured_nothing(pytester, tmp_path):
    _write(pytester.path / "run", [_unsupported(r) for r in results()])
    result = pytester.runpytest_subprocess("--accel-results", "run", "--accel-only")
    result.assert_outcomes(skipped=20)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*omni-accel: FAILED: nothing was measured: none of the 20 record(s) ran*"])


def test_speed_claims_without_a_noise_floor_record_are_not_published(tmp_path, monkeypatch, capsys):
    """A results file read without its noise-floor records (removed, or gated without the run's profile) used to
    publish its recorded 'faster' and 'slower' claims; nothing verifies them."""
    data = load_gate_data()
    records = results()
    with_floor = dict(judge_records(records, data).speed_claims)
    without = dict(judge_records([r for r in records if r["variant"] != "noise-floor"], data).speed_claims)
    assert with_floor["flux/compile"]["verdict"] == "faster" and with_floor["wan/slicing"]["verdict"] == "equivalent"
    assert without["flux/compile"]["verdict"] == "unverified" and without["wan/slicing"]["verdict"] == "noise"
    assert "no noise-floor record that ran" in without["flux/compile"]["reason"]
    assert not {c["verdict"] for c in without.values()} & {"faster", "slower", "equivalent"}
    # the interval itself is kept; only what may be published changes
    assert without["flux/compile"]["low"] == with_floor["flux/compile"]["low"]
    _write(tmp_path / "run", [r for r in records if r["variant"] != "noise-floor"])
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "run"))
    assert "| flux/compile | 1.50x? | unverified |" in out and "| faster |" not in out, out


def test_a_noisy_noise_floor_unverifies_a_recorded_claim():
    """The gate applies the floor's verdict again: a hand-edited floor that was not equivalent leaves no claim."""
    data = load_gate_data()
    records = results()
    for r in records:
        if r["variant"] == "noise-floor" and r["model"] == "flux":
            r["speedup_ci"] = {**r["speedup_ci"], "verdict": "faster", "reason": "interval above the band"}
    claims = dict(judge_records(records, data).speed_claims)
    assert claims["flux/compile"]["verdict"] == "unverified" and claims["wan/compile"]["verdict"] == "faster"


def test_the_gate_keeps_a_claim_beyond_an_undecided_floor_as_the_sweep_does():
    """Beside an undecided noise floor (its interval includes 1.0) the sweep publishes a claim that clears the
    band beyond every bias the floor allows; the gate, judging again from both records' pairs, agrees, and
    unverifies one that does not clear it (or whose pairs are gone)."""
    from accel.gate.judge import publishable_claim
    from accel.measure.speedup import classify, noise_band, paired_speedup

    band = noise_band(0.05)

    def record(variant: str, ratios: list[float], looks: int) -> dict:
        estimate = paired_speedup(ratios, [1.0] * len(ratios), 0.99)
        estimate = type(estimate)(**{**estimate.to_dict(), "looks": looks})
        claim = classify(estimate, band, 0.95)
        paired = {"estimate": estimate.to_dict(), "reference_s": ratios, "variant_s": [1.0] * len(ratios)}
        speedup_ci = {**estimate.to_dict(), "verdict": claim.verdict, "reason": claim.reason, "band": list(band)}
        return {
            "model": "m", "variant": variant, "status": "ok", "warm": {"median": 1.0}, "paired": paired,
            "speedup_ci": speedup_ci,
        }  # fmt: skip

    floor = record("noise-floor", [0.8 + 0.4 * i / 39 for i in range(40)], 5)
    assert floor["speedup_ci"]["verdict"] == "noise"
    big = record("cache", [2.0 + 0.02 * i for i in range(8)], 5)
    small = record("small", [1.10 + 0.01 * i for i in range(8)], 5)
    assert big["speedup_ci"]["verdict"] == small["speedup_ci"]["verdict"] == "faster"  # against the band alone
    assert publishable_claim(big, floor)["verdict"] == "faster"
    judged = publishable_claim(small, floor)
    assert judged["verdict"] == "unverified" and "does not clear the noise band" in judged["reason"]
    pairs_gone = {**big, "paired": {"estimate": big["paired"]["estimate"]}}
    assert publishable_claim(pairs_gone, floor)["verdict"] == "unverified"


def _quickstart_copy(tmp_path):
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "reports" / "quickstart"
    run = tmp_path / "run"
    run.mkdir()
    for name in ("results.jsonl", "cells.planned.json", "profile.resolved.yaml"):
        shutil.copy(committed / name, run / name)
    return run


def test_the_gate_holds_claims_to_the_band_and_confidence_of_the_runs_profile(tmp_path, monkeypatch, capsys):
    """The review edited every record of a run (the noise floor's too) to a wider band, or a lower confidence
    with intervals recomputed: consistent among themselves, they were published. ``omni-accel gate`` on a run
    directory holds them to profile.resolved.yaml's measure.min_effect and measure.confidence."""
    from accel.measure.speedup import noise_band, paired_speedup

    run = _quickstart_copy(tmp_path)
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert "| mini-flux/cache-dit-0.5 | 1.56x [1.31–1.77] | faster |" in out, out
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    wide = list(noise_band(0.5))
    widened = [{**r, "speedup_ci": {**r["speedup_ci"], "band": wide}} if r.get("speedup_ci") else r for r in records]
    _write(run, widened)
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert "| mini-flux/cache-dit-0.5 | 1.56x? | unverified |" in out and "| faster |" not in out, out
    assert "is not the run's (0.952381..1.05, from profile.resolved.yaml's measure.min_effect)" in out

    def lowered(record: dict) -> dict:
        claim, paired = record.get("speedup_ci"), record.get("paired")
        if not claim or not paired:
            return record
        looks = paired["estimate"]["looks"]
        again = paired_speedup(paired["reference_s"], paired["variant_s"], 1 - 0.49 / looks).to_dict()
        return {**record, "speedup_ci": {**claim, **again, "looks": looks, "requested_confidence": 0.51}}

    _write(run, [lowered(r) for r in records])
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert "its confidence 0.51 is not the run's (0.95, profile.resolved.yaml's measure.confidence)" in out, out
    assert "| faster |" not in out and "| equivalent |" not in out


def test_a_results_file_without_its_runs_profile_says_its_claims_were_not_held_to_it(tmp_path, monkeypatch, capsys):
    """The review copied results.jsonl away from profile.resolved.yaml: nothing then holds the claims to the
    band and confidence the run asked. The gate says so (the claims still agree with their noise floor)."""
    run = _quickstart_copy(tmp_path)
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert "no profile.resolved.yaml beside the results" not in out, out
    (run / "profile.resolved.yaml").unlink()
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(run / "results.jsonl"))
    assert (
        "no profile.resolved.yaml beside the results: each speed claim is held to its noise floor's band and "
        "confidence only, not to what the run's profile asked"
    ) in out, out


def test_a_claims_file_naming_no_model_of_the_results_gives_a_notice(tmp_path, monkeypatch, capsys):
    """A user's claims file with a misspelt model (``flx``) left flux's cells judged with no claim, silently.
    The shipped claims, which cover the whole zoo, give no such notice for the models a run did not measure."""
    claims = tmp_path / "claims.yaml"
    claims.write_text("models:\n  flx:\n    tiling: {supported: false}\n".replace("tiling", "vae_use_tiling"))
    _write(tmp_path / "run", results())
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "run"), "--claims", str(claims))
    assert (
        f"{claims}: models.flx matched no model of these results (models here: flux, wan): its claims were not "
        "used. Did you mean 'flux'?"
    ) in out, out
    _, out, _ = invoke(monkeypatch, capsys, "gate", str(tmp_path / "run"))
    assert "matched no model of these results" not in out


def test_nothing_measured_names_the_first_record_and_any_ok_record_is_something():
    from accel.gate.judge import nothing_measured

    records = [_unsupported(r, f"error {i}") for i, r in enumerate(results()[:3])]
    assert nothing_measured(records) == (
        "nothing was measured: none of the 3 record(s) ran, the baselines included; the first, "
        f"{records[0]['model']}/{records[0]['variant']}, is unsupported: error 0"
    )
    ran = {**records[-1], "status": "ok"}  # one record that ran, last: the run measured something
    assert nothing_measured([*records[:-1], ran]) is None
