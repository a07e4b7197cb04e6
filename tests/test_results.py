"""The results reader: every malformed results.jsonl is exit 2 with ``file:line: what is wrong`` in gate, table
and --resume alike; a cut-off last line means the same to all three; fuzzed, no input gives a traceback."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from conftest import invoke, small_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic import record

from accel.errors import ConfigError
from accel.results import load_results

GOOD = [
    record("flux", "baseline", {}, latency=0.2),
    record("flux", "compile", {"compile": "regional"}, speedup=1.5, ssim=0.9995, psnr=52.0, dtype="bfloat16"),
    record("flux", "tiling", {"vae_use_tiling": {"tile_size": 32}}, speedup=0.9, ssim=0.99, psnr=40.0),
]


def _lines(records) -> list[bytes]:
    return [json.dumps(r).encode() + b"\n" for r in records]


def _run_dir(tmp_path, content: bytes):
    """A run directory (resolved profile and results) whose results.jsonl holds ``content``."""
    run = tmp_path / "run"
    run.mkdir()
    from accel.profile import parse_profile

    raw = small_profile(["tiny-flux"], [{"name": r["variant"], "features": r["features"]} for r in GOOD[1:]])
    raw["models"][0]["name"] = "flux"  # the cells GOOD holds, and nothing else
    raw["measure"]["noise_floor"] = False
    profile = parse_profile(raw)
    (run / "profile.resolved.yaml").write_text(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
    (run / "results.jsonl").write_bytes(content)
    return run


BAD_LINES = {
    "not-utf8": (b'{"model": "flux", "variant": "caf\xe9", "status": "ok"}\n', r":2: not UTF-8 text"),
    "not-an-object": (b"[1, 2, 3]\n", r":2: expected a JSON object \(one cell's record\), got a list"),
    "missing-keys": (b"{}\n", r":2: the record has no 'model'; every record has model, variant and status"),
    "not-json": (b'{"model": \n', r":2: not a JSON record: Expecting value at column 11"),
    "bad-status": (
        json.dumps({**GOOD[1], "status": 3}).encode() + b"\n",
        r":2: 'status' should be one of ok, failed, unsupported, got 3",
    ),
    "wrong-type": (
        json.dumps({**GOOD[1], "parity": {"ssim": "high", "psnr": 1}}).encode() + b"\n",
        r":2: parity.ssim should be a number, got 'high'",
    ),
    "unknown-feature": (
        json.dumps({**GOOD[1], "features": {"turbo": True}}).encode() + b"\n",
        r":2: features: unknown feature 'turbo'",
    ),
    "recorded-twice": (_lines([GOOD[0]])[0], r":2: cell flux/baseline recorded twice \(first at line 1\)"),
    "speedup-without-verdict": (
        json.dumps({**GOOD[1], "speedup_ci": {"ratio": 1.3, "low": 1.1, "high": 1.5}}).encode() + b"\n",
        r":2: speedup_ci.verdict should be one of faster, slower, equivalent, noise, inconclusive, unverified, "
        r"got None",
    ),
    "speedup-not-a-number": (
        json.dumps({**GOOD[1], "speedup_ci": {"ratio": "x", "low": 1, "high": 2}}).encode() + b"\n",
        r":2: speedup_ci.ratio should be a positive number, got 'x'",
    ),
    "newer-schema": (
        json.dumps({**GOOD[1], "schema_version": 99}).encode() + b"\n",
        r":2: written with results schema version 99; this omni-accel reads versions 0 to \d+: upgrade omni-accel",
    ),
    "schema-version-not-a-number": (
        json.dumps({**GOOD[1], "schema_version": "1"}).encode() + b"\n",
        r":2: 'schema_version' should be a whole number, got '1'",
    ),
    "pairs-of-unequal-length": (
        json.dumps({**GOOD[1], "paired": {"reference_s": [1.0, 2.0], "variant_s": [1.0]}}).encode() + b"\n",
        r":2: paired.reference_s and paired.variant_s should hold one timing per pair each, got 2 and 1",
    ),
    "pair-timing-zero": (
        json.dumps({**GOOD[1], "paired": {"reference_s": [1.0], "variant_s": [0]}}).encode() + b"\n",
        r":2: paired.variant_s should be a non-empty list of positive seconds, got \[0\]",
    ),
    "no-pairs": (
        json.dumps({**GOOD[1], "paired": {"reference_s": [], "variant_s": []}}).encode() + b"\n",
        r":2: paired.reference_s should be a non-empty list of positive seconds, got \[\]",
    ),
    "pair-looks-zero": (
        json.dumps({**GOOD[1], "paired": {"reference_s": [1.0], "variant_s": [1.0], "estimate": {"looks": 0}}}).encode()
        + b"\n",
        r":2: paired.estimate.looks should be a whole number from 1 to 10000, got 0",
    ),
    "pair-timing-past-a-float": (
        b'{"model": "flux", "variant": "compile", "status": "ok", "paired": {"reference_s": [1'
        + b"0" * 400
        + b'], "variant_s": [1.0]}}\n',
        r":2: paired.reference_s should be a non-empty list of positive seconds",
    ),
    "estimate-null": (
        json.dumps({**GOOD[1], "paired": {"reference_s": [1.0], "variant_s": [1.0], "estimate": None}}).encode()
        + b"\n",
        r":2: paired.estimate should be an object, got null",
    ),
    "looks-null": (
        json.dumps(
            {**GOOD[1], "paired": {"reference_s": [1.0], "variant_s": [1.0], "estimate": {"looks": None}}}
        ).encode()
        + b"\n",
        r":2: paired.estimate.looks should be a whole number from 1 to 10000, got None",
    ),
    "looks-disagree": (
        json.dumps(
            {
                **GOOD[1],
                "speedup_ci": {**GOOD[1]["speedup_ci"], "looks": 3},
                "paired": {**GOOD[1]["paired"], "estimate": {**GOOD[1]["paired"]["estimate"], "looks": 1}},
            }
        ).encode()
        + b"\n",
        r":2: paired.estimate.looks \(1\) and speedup_ci.looks \(3\) should be the same",
    ),
    "speedup-nan": (
        json.dumps({**GOOD[1], "speedup_ci": {**GOOD[1]["speedup_ci"], "low": math.nan}}).encode() + b"\n",
        r":2: speedup_ci.low should be a positive number, got nan",
    ),
    "interval-upside-down": (
        json.dumps({**GOOD[1], "speedup_ci": {**GOOD[1]["speedup_ci"], "low": 2.0, "high": 1.0}}).encode() + b"\n",
        r":2: speedup_ci.low should be at most speedup_ci.high, got 2.0 > 1.0",
    ),
    "band-inverted": (
        json.dumps({**GOOD[1], "speedup_ci": {**GOOD[1]["speedup_ci"], "band": [1.07, 0.93]}}).encode() + b"\n",
        r":2: speedup_ci.band should be \[low, high\] with 0 < low < 1 < high \(the noise band\), got \[1.07, 0.93\]",
    ),
    "confidence-out-of-range": (
        json.dumps({**GOOD[1], "speedup_ci": {**GOOD[1]["speedup_ci"], "requested_confidence": 0.0}}).encode() + b"\n",
        r":2: speedup_ci.requested_confidence should be a number between 0.5 and 1 \(measure.confidence\), got 0.0",
    ),
    "speedup-not-an-object": (
        json.dumps({**GOOD[1], "speedup_ci": [1]}).encode() + b"\n",
        r":2: 'speedup_ci' should be an object or null, got a list",
    ),
}


@pytest.mark.parametrize("reader", ["gate", "table", "resume"])
@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_malformed_line_is_exit_2_naming_file_and_line(case, reader, tmp_path, monkeypatch, capsys):
    import re

    bad, pattern = BAD_LINES[case]
    good = _lines(GOOD)
    run = _run_dir(tmp_path, good[0] + bad + good[2])  # the bad line in the middle: line 2
    args = {"gate": ("gate", str(run)), "table": ("table", str(run)), "resume": ("sweep", "--resume", str(run))}
    code, _, err = invoke(monkeypatch, capsys, *args[reader])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {run / 'results.jsonl'}:2: ") and re.search(pattern, err), err


@pytest.mark.parametrize("reader", ["gate", "table"])
def test_gate_and_table_treat_a_cut_off_last_line_as_resume_does(reader, tmp_path, monkeypatch, capsys):
    good = _lines(GOOD)
    run = _run_dir(tmp_path, good[0] + good[1] + good[2][:30])  # a crash mid-write: no newline
    code, out, err = invoke(monkeypatch, capsys, reader, str(run))
    assert err.startswith(f"note: {run / 'results.jsonl'}:3: last line cut short")
    assert f"'omni-accel sweep --resume {run}' measures it again" in err
    if reader == "gate":  # the cut record is not a record: its cell was never measured, which fails the gate
        assert code == 1 and "2 passed, 1 failed" in out and "flux/tiling" in out, out  # baseline + 1 cell
        assert "not in its results: never measured" in out
    else:
        assert code == 0, err
    if reader == "table":
        assert "tiling" not in out and "| compile |" in out
    assert [r["variant"] for r in load_results(run).records] == ["baseline", "compile"]


def test_a_complete_last_line_without_newline_is_cut_too(tmp_path):
    """A record is written with its newline in one append: a missing newline means the write was cut."""
    run = _run_dir(tmp_path, b"".join(_lines(GOOD))[:-1])
    results = load_results(run)
    assert results.cut_line == 3 and len(results.records) == 2


# Fuzzing: any bytes, and valid files with one value replaced by junk, give records or a ConfigError; records
# that pass the reader go through the gate and the tables without an exception.
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=6),
    st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(0, 2), max_size=2),
)  # fmt: skip


def _read_and_use(path) -> None:
    from accel.gate import gate_records, load_gate_data
    from accel.report.tables import render_tables

    try:
        records = load_results(path).records
    except ConfigError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)
        return
    data = load_gate_data(None, None)
    gate_records(records, data)
    render_tables(records, data)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-results")


@given(st.binary(max_size=300))
@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_any_bytes(fuzz_dir, content):
    path = fuzz_dir / "bytes.jsonl"
    path.write_bytes(content)
    _read_and_use(path)


def _keys(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _keys(value, (*prefix, key))


@given(st.data())
@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_mutated_records(fuzz_dir, data):
    import copy

    records = copy.deepcopy(GOOD)
    index = data.draw(st.integers(0, len(records) - 1))
    paths = list(_keys(records[index]))
    path = data.draw(st.sampled_from(paths))
    parent = records[index]
    for part in path[:-1]:
        parent = parent[part]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(JUNK)
    elif action == "delete":
        del parent[path[-1]]
    else:
        parent[data.draw(st.text(max_size=8))] = data.draw(JUNK)
    file = fuzz_dir / "mutated.jsonl"
    file.write_bytes(b"".join(_lines(records)))
    _read_and_use(file)


def test_infinity_reads_back_as_a_number(tmp_path):
    """PSNR of identical outputs is stored as JSON Infinity: the reader takes it as a number."""
    same = record("flux", "same", {"compile": "regional"})
    run = _run_dir(tmp_path, b"".join(_lines([GOOD[0], same])))
    assert math.isinf(load_results(run).records[1]["parity"]["psnr"])


@pytest.mark.parametrize("report", ["quickstart", "engines-flux"])
def test_the_committed_reports_read_back(report):
    """The reader's schema accepts every record real sweeps wrote (adapter, native and engine cells)."""
    from accel.data import data_dir

    results = load_results(data_dir("reports") / report)
    assert results.records and results.cut_line is None


def test_a_second_noise_floor_record_of_a_model_is_refused(tmp_path, monkeypatch, capsys):
    """A model's claims are judged against its one noise floor; with two (helper-4: a biased noise-floor-2 put
    before or after the real one) the order of the lines decided whether its claims were published."""
    floor = {**GOOD[1], "variant": "noise-floor", "role": "noise_floor", "features": {}}
    second = {**floor, "variant": "noise-floor-2"}
    run = _run_dir(tmp_path, b"".join(_lines([GOOD[0], floor, second])))
    code, _, err = invoke(monkeypatch, capsys, "gate", str(run))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: {run / 'results.jsonl'}:3: a second noise-floor record for model flux (first at line 2)"
    )
