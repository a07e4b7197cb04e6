"""The gate: parity by class, engagement, claims, performance baselines, exit codes, JUnit."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml
from conftest import invoke
from synthetic import CLAIMS, results

from accel.cli import main
from accel.gate import FAIL, PASS, SKIP, GateData, gate_records, load_gate_data


def _data(claims=CLAIMS, **changes) -> GateData:
    shipped = load_gate_data()
    return GateData(changes.get("thresholds", shipped.thresholds), claims, changes.get("perf"))


def _outcomes(report):
    return {v.key: v.outcome for v in report.verdicts}


def test_verdicts_follow_class_thresholds_claims_and_scope():
    outcomes = _outcomes(gate_records(results(), _data()))
    assert outcomes["flux/compile"] == PASS  # lossless: 0.9995 >= 0.98 and 52 >= 35
    assert outcomes["flux/tea"] == PASS  # lossy cache: 0.97 >= 0.90 and 33 >= 25
    assert outcomes["flux/fbc-loose"] == FAIL  # lossy cache: SSIM 0.71 < 0.90
    assert outcomes["flux/tiling"] == PASS  # out of parity, as claimed unsupported
    assert outcomes["flux/flash"] == SKIP  # this environment cannot run it
    assert outcomes["wan/tea"] == PASS and outcomes["wan/taylorseer"] == PASS  # claimed unsupported
    assert "flux/baseline" not in outcomes and "flux/noise-floor" not in outcomes


def test_failure_message_shows_measured_and_required_values():
    report = gate_records(results(), _data())
    failure = next(v for v in report.failed if v.key == "flux/fbc-loose")
    assert "SSIM, lossy (cache): measured 0.71, required >= 0.9" in failure.message()
    assert "PSNR dB, lossy (cache): measured 21, required >= 25" in failure.message()


def test_claimed_supported_but_broken_fails():
    claims = {**CLAIMS, "wan": {"taylorseer_cache": {"supported": True}}}
    report = gate_records(results(), _data(claims))
    failure = next(v for v in report.failed if v.key == "wan/taylorseer")
    assert "claimed supported but failed" in failure.message() and "0 cached" in failure.message()


def test_works_but_claimed_unsupported_is_docs_drift():
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": False}}}
    report = gate_records(results(), _data(claims))
    assert any("docs drift: flux claims tea_cache unsupported, but tea works" in f for f in report.findings)


def test_lossless_thresholds_never_stricter_than_the_noise_floor():
    records = results()
    floor = next(r for r in records if r.get("role") == "noise_floor")
    floor["parity"] = {"ssim": 0.97, "psnr": 30.0}
    compile_cell = next(r for r in records if r["variant"] == "compile" and r["model"] == "flux")
    compile_cell["parity"] = {"ssim": 0.975, "psnr": 31.0}  # below 0.98/35, above the noise floor
    assert _outcomes(gate_records(records, _data()))["flux/compile"] == PASS


def test_performance_baseline_tolerance_and_refresh_notice():
    perf = {
        "rel_tolerance": 0.1,
        "abs_tolerance_s": 0.0,
        "refresh_if_faster_by": 0.2,
        "devices": {"cpu": {"flux": {"compile": 0.05, "tea": 1.0}}},  # tea: 0.111 s measured
    }
    records = results()
    for r in records:
        r["device"] = "cpu"
    report = gate_records(records, _data(perf=perf))
    slow = next(v for v in report.verdicts if v.key == "flux/compile")
    assert slow.outcome == FAIL and "warm latency (s): measured 0.1333, required <= 0.055" in slow.message()
    assert any("flux/tea: faster than the stored baseline by 89%" in f for f in report.findings)


def _cli(monkeypatch, capsys, *args):
    code, out, _ = invoke(monkeypatch, capsys, *args)
    return code, out


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in results()) + "\n")
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"models": CLAIMS}))
    return tmp_path


def test_cli_exit_codes_junit_and_summary(run_dir, monkeypatch, capsys):
    code, out = _cli(monkeypatch, capsys, "gate", str(run_dir), "--claims", str(run_dir / "claims.yaml"))
    assert code == 1 and "**flux/fbc-loose**" in out and "1 failed" in out
    suite = ET.parse(run_dir / "gate.junit.xml").getroot()
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    failure = suite.find(".//testcase[@name='fbc-loose']/failure")
    assert failure is not None and "required >= 0.9" in failure.text
    assert (run_dir / "gate.md").read_text().startswith("# omni-accel gate")


def test_cli_passes_when_every_cell_passes(run_dir, monkeypatch, capsys):
    records = [r for r in results() if r["variant"] != "fbc-loose"]
    (run_dir / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    code, out = _cli(monkeypatch, capsys, "gate", str(run_dir), "--claims", str(run_dir / "claims.yaml"))
    assert code == 0 and "0 failed" in out


def test_cli_bad_input_exits_2(run_dir, monkeypatch, capsys):
    (run_dir / "bad.yaml").write_text("lossless: [unclosed")
    monkeypatch.setattr(sys, "argv", ["omni-accel", "gate", str(run_dir), "--thresholds", str(run_dir / "bad.yaml")])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2 and "bad.yaml: malformed YAML" in capsys.readouterr().err
