"""Published claims cross-checked against measurement (issue 40, item 5): a cell whose verdict contradicts a
claim of feature_matrix/published_claims.yaml is marked in the support matrix and listed with its cause; a cell
that agrees is not; a bad claims file is refused with one line, exit 2."""

from __future__ import annotations

import json

import pytest
from conftest import invoke
from synthetic import CLAIMS, record

from accel import zoo
from accel.gate import GateData, load_gate_data
from accel.report.published import MARKER, TO_FILL, PublishedClaim, load_published_claims
from accel.report.tables import render_tables

SOURCE = "cache-dit 1.5.3 package, cache_dit/caching/block_adapters/adapters.py:40"
CLAIM = PublishedClaim(pipeline=zoo.ZOO["tiny-flux"].pipeline_class, feature="cache_dit", source=SOURCE)


def _cells(cache_dit_cell: dict) -> list[dict]:
    flux = {"source": "tiny-flux", "device": "cpu", "device_name": "cpu", "dtype": "float32"}
    return [record("flux.1", "baseline", {}, **flux), {**cache_dit_cell, **flux}]


def _tables(records: list[dict], claims: list[PublishedClaim]) -> dict[str, str]:
    return render_tables(records, GateData(load_gate_data().thresholds, CLAIMS), published=claims)


def _row(table: str, model: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| **{model}** |"))


def test_a_measured_verdict_contradicting_a_published_claim_is_marked_and_listed_with_its_cause():
    failed = record("flux.1", "cache-dit", {"cache_dit": {}}, status="failed", error="cache_dit: no block adapter")
    tables = _tables(_cells(failed), [CLAIM])
    assert MARKER in _row(tables["support-matrix"], "flux.1")
    assert f"published as supported by {SOURCE}; cause: {TO_FILL}" in tables["support-matrix"]
    listed = _row(tables["published-disagreements"], "flux.1")
    assert "| cache-dit | failed | supported |" in listed and SOURCE in listed and listed.endswith(f"| {TO_FILL} |")


def test_a_recorded_cause_is_shown_instead_of_to_fill():
    failed = record("flux.1", "cache-dit", {"cache_dit": {}}, status="failed", error="cache_dit: no block adapter")
    cause = {"kind": "harness defect", "note": "issue 40: the adapter was never reached"}
    claim = PublishedClaim.model_validate({**CLAIM.model_dump(), "cause": cause})
    listed = _row(_tables(_cells(failed), [claim])["published-disagreements"], "flux.1")
    assert listed.endswith("| harness defect: issue 40: the adapter was never reached |"), listed


def test_a_measured_verdict_agreeing_with_a_published_claim_is_not_marked():
    supported = record("flux.1", "cache-dit", {"cache_dit": {}}, ssim=0.99, psnr=40.0)
    tables = _tables(_cells(supported), [CLAIM])
    assert "✅" in _row(tables["support-matrix"], "flux.1")
    assert MARKER not in tables["support-matrix"]
    assert tables["published-disagreements"].startswith("_No measured verdict contradicts a published claim._")


def test_a_claim_about_other_options_does_not_match_the_cell():
    full = record("flux.1", "compile-full", {"compile": "full"}, status="failed", error="compile: recompiled")
    regional = PublishedClaim(
        pipeline=CLAIM.pipeline, feature="compile", options={"granularity": "regional"}, source=SOURCE
    )
    assert MARKER not in _tables(_cells(full), [regional])["support-matrix"]


def test_the_shipped_claims_load_and_each_names_a_zoo_pipeline_and_its_source():
    claims = load_published_claims()
    pipelines = {entry.pipeline_class for entry in zoo.family_entries()}
    assert claims and all(claim.pipeline in pipelines for claim in claims), [c.pipeline for c in claims]
    assert all(claim.source.strip() for claim in claims)


BAD_CLAIMS = {
    "unknown-key": (
        "claims:\n  - {pipeline: FluxPipeline, feature: cache_dit, source: x, sauce: y}\n",
        "claims[0]: unknown key 'sauce'",
    ),
    "no-source": ("claims:\n  - {pipeline: FluxPipeline, feature: cache_dit}\n", "claims[0].source"),
    "unknown-feature": (
        "claims:\n  - {pipeline: FluxPipeline, feature: warp_drive, source: x}\n",
        "claims[0].feature: unknown feature 'warp_drive'",
    ),
    "bad-cause": (
        "claims:\n  - {pipeline: FluxPipeline, feature: cache_dit, source: x, cause: {kind: shrug, note: n}}\n",
        "claims[0].cause.kind",
    ),
}


@pytest.mark.parametrize("name", list(BAD_CLAIMS))
def test_a_bad_claims_file_is_refused_with_one_line_naming_the_file_and_key(tmp_path, monkeypatch, capsys, name):
    text, expected = BAD_CLAIMS[name]
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text(json.dumps(record("flux.1", "baseline", {})) + "\n")
    claims = tmp_path / "claims.yaml"
    claims.write_text(text)
    code, out, err = invoke(monkeypatch, capsys, "table", str(run), "--published", str(claims))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert str(claims) in err and expected in err, err


def test_a_setting_out_of_parity_is_not_a_disagreement_with_a_claim_of_support():
    lossy = record("flux.1", "cache-dit", {"cache_dit": {}}, ssim=0.5, psnr=12.0)
    tables = _tables(_cells(lossy), [CLAIM])
    assert "⚠" in _row(tables["support-matrix"], "flux.1") and MARKER not in tables["support-matrix"]


def test_the_contradicting_verdicts_follow_the_tables_refusal_owners():
    """Every owner of a refusal that is not the device's contradicts a claim of support: the model's, the
    library's, the harness's (whose cause needs no one to look: it is the harness's), and a failure."""
    from accel.report import tables
    from accel.report.published import CONTRADICT_SUPPORTED, HARNESS_GAP

    assert HARNESS_GAP == tables.HARNESS_GAP
    assert set(CONTRADICT_SUPPORTED) == {
        tables.REFUSED_MODEL, tables.REFUSED_LIBRARY, tables.HARNESS_GAP, tables.FAILED
    }  # fmt: skip


def test_a_harness_gap_names_its_cause_and_anything_else_waits_to_be_filled():
    from accel.report.published import HARNESS_GAP, TO_FILL, Disagreement

    assert Disagreement("flux.1", "v", "cache_dit", HARNESS_GAP, CLAIM).cause.startswith("harness defect")
    assert Disagreement("flux.1", "v", "cache_dit", "failed", CLAIM).cause == TO_FILL


def test_a_shipped_cause_names_the_option_values_the_coverage_run_passed():
    """A cause recorded from the coverage run describes what was run: an option of the feature that the coverage
    profile's variant sets is quoted with that value, never as the feature's default (the cache-dit note said
    "at its default residual_diff_threshold" while profiles/coverage.yaml passed 0.5)."""
    import re
    from pathlib import Path

    import yaml

    profile = yaml.safe_load((Path(__file__).parents[1] / "profiles" / "coverage.yaml").read_text())
    runs: dict[str, list] = {}
    for variant in profile["variants"]:
        for feature, options in variant["features"].items():
            runs.setdefault(feature, []).append(options)
    # a feature the profile runs once, with options: its values are what the run used
    passed = {feature: found[0] for feature, found in runs.items() if len(found) == 1 and isinstance(found[0], dict)}
    checked = []
    for claim in load_published_claims():
        note = claim.cause.note if claim.cause else ""
        if "coverage" not in note:  # a cause recorded from another measurement
            continue
        for option, value in passed.get(claim.feature, {}).items():
            if re.search(rf"\b{option}\b", note):
                quoted = re.search(rf"\b{option}:? {re.escape(str(value))}\b", note)
                assert f"default {option}" not in note and quoted, (claim.pipeline, option, value, note)
                checked.append(option)
    assert checked, "no shipped cause quotes an option of the coverage run: nothing to check"
