"""The gate: parity by class, engagement, claims, performance baselines, exit codes, JUnit."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml
from conftest import invoke
from synthetic import CLAIMS, results

from accel.cli import main
from accel.errors import ConfigError
from accel.gate import FAIL, PASS, SKIP, GateData, gate_records, junit_xml, load_gate_data, markdown_summary


def _data(claims=CLAIMS, **changes) -> GateData:
    shipped = load_gate_data()
    return GateData(changes.get("thresholds", shipped.thresholds), claims, changes.get("perf"))


def _outcomes(report):
    return {v.key: v.outcome for v in report.verdicts}


def test_verdicts_follow_class_thresholds_claims_and_scope():
    outcomes = _outcomes(gate_records(results(), _data()))
    assert outcomes["flux/compile"] == PASS  # lossless bfloat16: 0.9995 >= 0.98 and 52 >= 35
    assert outcomes["flux/tea"] == PASS  # lossy cache: 0.97 >= 0.90 and 33 >= 25
    assert outcomes["flux/fbc-loose"] == FAIL  # lossy cache: SSIM 0.71 < 0.90
    assert outcomes["flux/tiling"] == SKIP  # out of parity, as claimed unsupported: an expected failure
    assert outcomes["flux/flash"] == SKIP  # this environment cannot run it
    assert outcomes["wan/tea"] == SKIP and outcomes["wan/taylorseer"] == SKIP  # claimed unsupported
    assert outcomes["wan/compile"] == PASS  # lossless float32 at 131 dB
    # The references are judged too: every variant is measured against them.
    assert outcomes["flux/baseline"] == PASS and outcomes["flux/noise-floor"] == PASS


def _verdict(key, records=None, data=None):
    report = gate_records(records or results(), data or _data())
    return next(v for v in report.verdicts if v.key == key)


def test_a_claim_excuses_only_its_own_feature_in_a_combined_cell():
    # Tiling is claimed unsupported on flux; the quantization beside it makes no claim: the parity loss
    # of the combined cell cannot be put on tiling alone.
    verdict = _verdict("flux/int8+tiling")
    assert verdict.outcome == FAIL
    assert "excuses only that feature" in verdict.message() and "quantization" in verdict.message()
    # A crash no error attributes to one feature counts for every unclaimed feature of the cell.
    records = results()
    cell = next(r for r in records if r["variant"] == "int8+tiling")
    for key in ("warm", "parity", "evidence"):
        cell.pop(key)
    cell.update(status="failed", error="RuntimeError: shape mismatch in a tiled decode")
    crashed = _verdict("flux/int8+tiling", records)
    assert crashed.outcome == FAIL and "it counts for quantization" in crashed.message()
    # The same crash named by the claimed feature is an expected failure, skipped with its reason.
    cell["error"] = "vae_use_tiling: tile size 32 is below the VAE's minimum"
    named = _verdict("flux/int8+tiling", records)
    assert named.outcome == SKIP and named.skip_kind == "expected" and "tile size 32" in named.message()


def test_each_feature_of_a_combined_cell_needs_its_own_evidence():
    records = results()
    cell = next(r for r in records if r["variant"] == "tea+offload")
    cell["evidence"] = {"tea_cache": {"engaged": True, "summary": "4 cached steps per run"}}  # offload: none
    verdict = _verdict("flux/tea+offload", records)
    assert verdict.outcome == FAIL
    assert "engagement of enable_cpu_offload: measured no evidence recorded" in verdict.message()
    assert verdict.feature_states == {"tea_cache": "engaged", "enable_cpu_offload": "not engaged"}


def test_no_evidence_is_never_engagement():
    verdict = _verdict("wan/pab")  # evidence {}: all([]) would be True
    assert verdict.outcome == FAIL and "no evidence recorded" in verdict.message()


def test_unstable_outputs_fail_lossless_parity():
    verdict = _verdict("wan/slicing")  # bit-identical on the last pass, but the passes differ
    assert verdict.outcome == FAIL and "output stability, lossless" in verdict.message()
    records = results()
    next(r for r in records if r["variant"] == "baseline" and r["model"] == "wan")["outputs_stable"] = False
    for r in records:
        if r["variant"] == "slicing":
            r["outputs_stable"] = True
    # An unstable baseline: no lossless verdict can be judged against it, however stable the cell.
    unstable = _verdict("wan/slicing", records)
    assert unstable.outcome == FAIL and "output stability of the baseline, lossless" in unstable.message()
    assert _verdict("wan/compile", records).outcome == FAIL  # every lossless cell of the model
    assert _verdict("wan/baseline", records).outcome == PASS  # the baseline itself ran; the finding says why
    assert any(
        "outputs differ between the baseline's own calls" in f for f in _verdict("wan/baseline", records).findings
    )
    records = results()
    for r in records:
        if r["variant"] in ("tea", "tea+offload"):
            r["outputs_stable"] = False
    assert _verdict("flux/tea+offload", records).outcome == FAIL  # offload is lossless, even beside a cache
    assert _verdict("flux/tea", records).outcome == PASS  # a lossy feature alone is held to its parity only


def test_lossless_thresholds_follow_the_dtype():
    verdict = _verdict("wan/attn-math")  # float32 at 36 dB: passes 35 dB, far below what float32 delivers
    assert verdict.outcome == FAIL
    assert "PSNR dB, lossless (video, float32): measured 36, required >= 100" in verdict.message()
    shipped = load_gate_data().thresholds
    assert shipped["lossless"]["float32"]["image"]["psnr"] > 2 * shipped["lossless"]["bfloat16"]["image"]["psnr"]
    assert _verdict("flux/compile").outcome == PASS  # bfloat16 at 52 dB


def test_cells_that_did_not_run_are_skipped_with_their_reason():
    report = gate_records(results(), _data())
    unsupported = next(v for v in report.verdicts if v.key == "flux/compile-full")
    assert unsupported.outcome == SKIP and unsupported.skip_kind == "unsupported"
    assert "not run, unsupported on this model: compile: full-graph compile breaks" in unsupported.message()
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "compile": {"supported": True}}}
    assert _verdict("flux/compile-full", data=_data(claims)).outcome == FAIL  # claimed supported
    summary = markdown_summary(report)
    assert (
        "10 passed, 5 failed, 5 skipped (1 not run: unsupported in this environment; 1 not run: unsupported on the "
        "model; 1 not run: not supported by omni-accel yet (a harness gap); " in summary
    )
    gap = next(v for v in report.verdicts if v.key == "wan/tea")  # refused_by: harness, claimed unsupported
    assert (gap.outcome, gap.skip_kind, gap.refused_by) == (SKIP, "harness", "harness")
    assert gap.message().startswith("not run, not supported by omni-accel yet (a harness gap), as claimed: tea_cache")
    assert unsupported.refused_by == "model"  # a record written before refused_by: its scope's owner
    assert "- **flux/compile-full**: not run, unsupported on this model" in summary
    suite = ET.fromstring(junit_xml(report))
    skipped = suite.find(".//testcase[@name='compile-full']/skipped")
    assert skipped is not None and "full-graph compile breaks" in skipped.get("message")
    assert suite.get("skipped") == "5" and suite.get("failures") == "5"


def test_offload_on_a_cpu_is_labelled_no_effect():
    verdict = _verdict("wan/offload")
    assert verdict.outcome == PASS and verdict.no_effect == ["enable_cpu_offload"]
    assert any(
        "enable_cpu_offload engaged, no effect on cpu: nothing moved off any device" in f for f in verdict.findings
    )
    assert _verdict("flux/offload").no_effect == []  # on a GPU it moves weights off the device


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
    floor = next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "wan")
    floor["parity"] = {"ssim": 0.999, "psnr": 60.0}  # a noisy baseline
    cell = next(r for r in records if r["variant"] == "attn-math")
    cell["parity"] = {"ssim": 0.9995, "psnr": 61.0}  # below float32's threshold, above the noise floor
    verdict = _verdict("wan/attn-math", records)
    assert verdict.outcome == PASS
    assert "loosened by the noise floor" in verdict.checks[0].name


def test_the_noise_floor_never_loosens_below_the_stated_minimum():
    records = results()
    floor = next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "wan")
    floor["parity"] = {"ssim": 0.5, "psnr": 12.0}  # a broken re-run must not let anything through
    cell = next(r for r in records if r["variant"] == "attn-math")
    cell["parity"] = {"ssim": 0.9, "psnr": 30.0}
    message = _verdict("wan/attn-math", records).message()
    assert "required >= 0.95" in message and "required >= 35" in message  # lossless_minimum for video


def test_thresholds_file_shape_is_checked(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(
        yaml.safe_dump({"lossless": {"image": {"ssim": 0.98, "psnr": 35}}, "lossless_minimum": {}, "lossy": {}})
    )
    with pytest.raises(
        ConfigError, match=r"t\.yaml: lossless\.image: expected keys image, video \(lossless thresholds are per dtype"
    ):
        load_gate_data(thresholds=path)
    records = [{**r, "dtype": "float8"} for r in results()]
    with pytest.raises(
        ConfigError, match=r"thresholds\.yaml: lossless: no thresholds for dtype 'float8' .*Allowed: float32"
    ):
        gate_records(records, _data())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"adherence": {"lossy": {"cache": "lots"}}},
            r"adherence\.lossy\.cache: 'lots' is not allowed: .* from 0 to 1",
        ),
        ({"adherence": {"lossy": {"cache": 1.5}}}, r"adherence\.lossy\.cache: 1\.5 is not allowed"),
        ({"adherence": {"lossy": {"cache": True}}}, r"adherence\.lossy\.cache: True is not allowed"),
        ({"adherence": {"lossy": {"cache": -0.5}}}, r"adherence\.lossy\.cache: -0\.5 is not allowed"),
        ({"adherence": {"lossy": {"cache": float("nan")}}}, r"adherence\.lossy\.cache: nan is not allowed"),
        ({"adherence": {"lossy": 0.05}}, r"adherence\.lossy: expected a mapping of feature family to a number"),
        (
            {"adherence": {"lossy": {"cachee": 0.05}}},
            r"adherence\.lossy\.cachee: unknown feature family 'cachee'\. "
            r"Did you mean 'cache'\? Allowed: attention, cache",
        ),
        (
            {"adherence": {"lossyy": {"cache": 0.05}}},
            r"adherence: expected a mapping with the keys lossy, inconclusive \(unknown key",
        ),
        ({"adherance": {"lossy": {"cache": 0.05}}}, r"unknown key 'adherance'\. Did you mean 'adherence'\?"),
        ({"lossy": {"cachee": {"ssim": 0.9, "psnr": 25}}}, r"lossy\.cachee: unknown feature family 'cachee'"),
    ],
)
def test_thresholds_adherence_and_family_typos_are_refused(tmp_path, change, message):
    # A typo or an out-of-range limit must not silently switch the adherence gate off or fall back to the
    # features' declared default: every one is a one-line error naming the file and the key.
    data = load_gate_data().thresholds | change
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"t\.yaml: " + message) as error:
        load_gate_data(thresholds=path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ([1, 2], r"models: expected a mapping of model name to overrides"),
        (
            {"m": {"lossy": {"cache": {"ssim": "abc", "psnr": 1.0}}}},
            r"models\.m\.lossy\.cache\.ssim: 'abc' is not allowed",
        ),
        ({"m": {"lossy": {"cache": {"ssim": float("nan"), "psnr": 25}}}}, r"models\.m\.lossy\.cache\.ssim: nan is not"),
        (
            {"m": {"lossy": {"cache": {"ssim": -1, "psnr": -100}}}},
            r"models\.m\.lossy\.cache\.psnr: -100 is not allowed: expected a number of dB >= 0",
        ),
        (
            {"m": {"lossy": {"cache": {"ssim": 0.9}}}},
            r"models\.m\.lossy\.cache: expected a mapping with keys ssim and psnr",
        ),
        ({"m": {"lossyy": {}}}, r"models\.m: unknown key 'lossyy'\. Did you mean 'lossy'\?"),
        ({"m": {"lossless": {"float8": {"image": {"psnr": 30}}}}}, r"models\.m\.lossless: unknown dtype 'float8'"),
        (
            {"m": {"lossless": {"float32": {"picture": {"psnr": 30}}}}},
            r"models\.m\.lossless\.float32: unknown modality 'picture'\. Allowed: image, video",
        ),
        ({"m": {"lossless": {"float32": {"image": {"psnr": -3}}}}}, r"models\.m\.lossless\.float32\.image\.psnr: -3"),
        (
            {"m": {"adherence": {"lossy": {"cache": "abc"}}}},
            r"models\.m: adherence\.lossy\.cache: 'abc' is not allowed",
        ),
        ({"m": "strict"}, r"models\.m: expected a mapping with keys lossy, lossless, adherence"),
        ({"m": {"lossy": []}}, r"models\.m\.lossy: expected a mapping of feature family"),
        ({"m": {"lossy": 0}}, r"models\.m\.lossy: expected a mapping of feature family"),
        ({"m": {"lossless": ""}}, r"models\.m\.lossless: expected a mapping of dtype"),
    ],
)
def test_per_model_threshold_overrides_are_checked_like_the_rest(tmp_path, models, message):
    data = load_gate_data().thresholds | {"models": models}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"t\.yaml: " + message):
        load_gate_data(thresholds=path)


def test_a_lossy_limit_of_nan_is_refused(tmp_path):
    data = load_gate_data().thresholds
    data["lossy"]["cache"] = {"ssim": float("nan"), "psnr": 25.0}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        ConfigError, match=r"t\.yaml: lossy\.cache\.ssim: nan is not allowed: expected a number from 0 to 1"
    ):
        load_gate_data(thresholds=path)


def test_a_per_model_adherence_override_is_used_and_a_misspelt_model_is_noticed(tmp_path):
    from accel.gate import adherence_check

    record = {
        "model": "flux", "variant": "v", "features": {"cache_dit": {}}, "feature_classes": {"cache_dit": "lossy"},
        "adherence_loss": 0.2, "adherence": {"overall": 0.7, "vs_baseline": {"loss": 0.2}},
    }  # fmt: skip
    shipped = load_gate_data()
    assert not adherence_check(shipped, record).ok  # 0.2 > the shipped 0.05
    loose = GateData(shipped.thresholds | {"models": {"flux": {"adherence": {"lossy": {"cache": 0.25}}}}}, {})
    assert adherence_check(loose, record).ok
    # An older record (no per-image scores) is judged on its net change, and the check says so.
    older = {**record, "adherence": {"overall": 0.7}}
    assert "net change: no per-image scores" in adherence_check(shipped, older).name
    misspelt = GateData(shipped.thresholds | {"models": {"flx": {"lossy": {}}}}, {})
    report = gate_records(results(), misspelt)
    assert any(
        "models.flx matched no model of these results" in n and "Did you mean 'flux'?" in n for n in report.notices
    )


def test_performance_baseline_tolerance_and_refresh_notice():
    perf = {
        "rel_tolerance": 0.1,
        "abs_tolerance_s": 0.0,
        "refresh_if_faster_by": 0.2,
        "devices": {"H200": {"flux": {"compile": 0.05, "tea": 1.0}}},  # tea: 0.111 s measured
    }
    report = gate_records(results(), _data(perf=perf))
    slow = next(v for v in report.verdicts if v.key == "flux/compile")
    assert slow.outcome == FAIL and "warm latency (s): measured 0.1333, required <= 0.055" in slow.message()
    assert "(baseline 0.05 on H200)" in slow.message()  # matched on the device name "NVIDIA H200"
    assert any("flux/tea: faster than the stored baseline by 89%" in f for f in report.findings)
    assert report.notices == []


def test_performance_baseline_matches_device_names_and_reports_unmatched_entries():
    from accel.gate import baseline_device

    record = {"device": "cuda", "device_name": "NVIDIA H200"}
    assert baseline_device(record, {"cuda": {}, "H200": {}, "NVIDIA H200": {}}) == "NVIDIA H200"
    assert baseline_device(record, {"cuda": {}, "H20": {}, "H200": {}}) == "H200"  # the longest contained key
    assert baseline_device(record, {"cuda": {}, "A100": {}}) == "cuda"
    assert baseline_device({"device": "cpu", "device_name": "AMD EPYC 7763"}, {"H200": {}}) is None
    perf = {"devices": {"H100": {"flux": {"compile": 0.1}}, "cpu": {"wan": {"compile": 1.0, "gone": 1.0}}}}
    report = gate_records(results(), _data(perf=perf))
    assert len(report.notices) == 2
    assert "performance baseline devices.H100.flux.compile matched no measured cell" in report.notices[0]
    assert "cuda 'NVIDIA H200'" in report.notices[0]
    assert "devices.cpu.wan.gone matched no measured cell" in report.notices[1]
    assert "## Notices" in markdown_summary(report) and "devices.H100.flux.compile" in markdown_summary(report)


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
    assert code == 1 and "**flux/fbc-loose**" in out and "5 failed" in out
    suite = ET.parse(run_dir / "gate.junit.xml").getroot()
    assert suite.get("failures") == "5" and suite.get("skipped") == "5"
    failure = suite.find(".//testcase[@name='fbc-loose']/failure")
    assert failure is not None and "required >= 0.9" in failure.text
    assert (run_dir / "gate.md").read_text().startswith("# omni-accel gate")


def test_cli_passes_when_every_cell_passes(run_dir, monkeypatch, capsys):
    failing = {"fbc-loose", "int8+tiling", "attn-math", "slicing", "pab"}
    records = [r for r in results() if r["variant"] not in failing]
    (run_dir / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    code, out = _cli(monkeypatch, capsys, "gate", str(run_dir), "--claims", str(run_dir / "claims.yaml"))
    assert code == 0 and "0 failed" in out


def test_cli_bad_input_exits_2(run_dir, monkeypatch, capsys):
    (run_dir / "bad.yaml").write_text("lossless: [unclosed")
    monkeypatch.setattr(sys, "argv", ["omni-accel", "gate", str(run_dir), "--thresholds", str(run_dir / "bad.yaml")])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2 and "bad.yaml: malformed YAML" in capsys.readouterr().err


def _without(records, model, variant):
    return [r for r in records if (r["model"], r["variant"]) != (model, variant)]


def _crash(record, status="failed", error="segfault: the worker died (signal 11)"):
    for key in ("warm", "parity", "evidence", "speedup_ci", "outputs_stable"):
        record.pop(key, None)
    record.update(status=status, error=error)


def test_a_crashed_baseline_fails_the_run_and_every_cell_measured_against_it():
    records = results()
    _crash(next(r for r in records if (r["model"], r["variant"]) == ("flux", "baseline")))
    for r in records:
        if r["model"] == "flux" and r["variant"] != "baseline":
            r.pop("parity", None)  # the runner compares nothing with a baseline that did not run
    report = gate_records(records, _data())
    baseline = next(v for v in report.verdicts if v.key == "flux/baseline")
    assert baseline.outcome == FAIL and report.exit_code == 1
    assert "baseline failed: segfault" in baseline.message() and "every cell of flux" in baseline.message()
    compile_ = next(v for v in report.verdicts if v.key == "flux/compile")
    assert compile_.outcome == FAIL and "baseline: measured failed: segfault" in compile_.message()
    # The review's run: a crashed baseline beside a cell that could not run here: never a green gate.
    alone = [r for r in records if r["model"] == "flux" and r["variant"] in ("baseline", "flash")]
    report = gate_records(alone, _data())
    assert report.exit_code == 1 and "0 passed, 1 failed, 1 skipped" in markdown_summary(report)
    # A results file without any baseline of the model: nothing to judge the variants against.
    missing = next(
        v for v in gate_records(_without(results(), "wan", "baseline"), _data()).verdicts if v.key == "wan/compile"
    )
    assert missing.outcome == FAIL and "no baseline record in these results" in missing.message()
    floor = next(
        v for v in gate_records(_without(results(), "wan", "baseline"), _data()).verdicts if v.key == "wan/noise-floor"
    )
    assert floor.outcome == FAIL and floor.message().split("\n") == [
        "noise-floor re-run of the baseline not compared: the baseline it re-runs did not run",
        "baseline: measured missing: no baseline record in these results, required a measured baseline",
    ]


@pytest.mark.parametrize("claim", [True, False], ids=["claimed-supported", "claimed-unsupported"])
def test_a_cell_without_a_baseline_fails_on_that_alone_with_its_parity_unknown(claim):
    # Nothing was compared: no SSIM/PSNR "measured –", no "out of parity", and no claim excuses it (a
    # feature claimed unsupported would otherwise turn the failure into an expected skip).
    records = results()
    _crash(_flux_cell(records, "baseline"))
    _flux_cell(records, "tea").pop("parity")
    data = _data({**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": claim}}})
    verdict = _verdict("flux/tea", records, data)
    assert verdict.outcome == FAIL and verdict.in_parity is None
    assert verdict.message().split("\n") == [
        "baseline: measured failed: segfault: the worker died (signal 11), required a measured baseline"
    ]
    floor = _verdict("flux/noise-floor", records, data)
    assert floor.outcome == FAIL and floor.in_parity is None
    assert floor.message().split("\n") == [
        "noise-floor re-run of the baseline not compared: the baseline it re-runs did not run",
        "baseline: measured failed: segfault: the worker died (signal 11), required a measured baseline",
    ]


def test_a_cell_or_noise_floor_judged_without_its_baseline_record_is_judged_on_its_own_parity():
    # gate_cell and gate_reference take the baseline as an option (judge_records always passes one): without
    # it, nothing says the baseline failed, and the cell is judged on the parity it recorded.
    from accel.gate.judge import gate_cell, gate_reference, noise_floors

    records, data = results(), _data()
    floors = noise_floors(records)
    compile_ = gate_cell(_flux_cell(records, "compile"), data, floors["flux"], "image")
    assert compile_.outcome == PASS and compile_.in_parity is True
    floor = gate_reference(_flux_cell(records, "noise-floor"), data, "image")
    assert floor.outcome == PASS and floor.in_parity is True
    baseline = _flux_cell(records, "baseline")
    assert gate_reference(baseline, data, "image", baseline).outcome == PASS


def test_a_baseline_that_says_ok_but_was_never_timed_did_not_run_for_its_cells_either():
    # The review set the baseline's warm to null: the baseline itself failed ("no timed outputs") while its
    # variants passed against it and published their speedups.
    records = results()
    _flux_cell(records, "baseline")["warm"] = None
    report = gate_records(records, _data())
    compile_ = next(v for v in report.verdicts if v.key == "flux/compile")
    assert compile_.outcome == FAIL and compile_.in_parity is None
    assert compile_.message() == "baseline: measured ok, but no timed outputs, required a measured baseline"
    flux_claims = [claim for key, claim in report.speed_claims if key.startswith("flux/")]
    decided = ("faster", "slower", "equivalent")
    assert flux_claims and not [claim for claim in flux_claims if claim["verdict"] in decided], flux_claims
    floor = next(v for v in report.verdicts if v.key == "flux/noise-floor")
    assert floor.outcome == FAIL and "not compared" in floor.message()


def test_a_step_below_its_floor_voids_the_cells_speed_claim_but_a_parity_failure_does_not():
    records = results()
    claims = dict(gate_records(records, _data()).speed_claims)
    assert claims["flux/compile"]["verdict"] == "faster"  # published as measured
    _flux_cell(records, "compile")["invalid_measurement"] = "a step took 0.001 ms, below the 1.000 ms floor"
    claim = dict(gate_records(records, _data()).speed_claims)["flux/compile"]
    assert claim["verdict"] == "unverified" and "timing validity" in claim["reason"], claim
    records = results()
    _flux_cell(records, "compile")["parity"]["ssim"] = 0.5  # out of parity: the speed is still what it cost
    report = gate_records(records, _data())
    assert _verdict("flux/compile", records).outcome == FAIL
    assert dict(report.speed_claims)["flux/compile"]["verdict"] == "faster"


def test_a_failed_or_irreproducible_noise_floor_fails():
    records = results()
    _crash(next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "wan"), "timeout", "timed out")
    verdict = _verdict("wan/noise-floor", records)
    assert verdict.outcome == FAIL and "noise-floor re-run of the baseline timeout: timed out" in verdict.message()
    records = results()
    next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "wan")["parity"] = {
        "ssim": 0.5,
        "psnr": 12.0,
    }
    verdict = _verdict("wan/noise-floor", records)
    assert verdict.outcome == FAIL and "does not reproduce itself" in verdict.message()
    assert (
        "SSIM, noise-floor re-run of the baseline vs the baseline (lossless_minimum, video): "
        "measured 0.5, required >= 0.95" in verdict.message()
    )


def _combined(ssim, psnr, partner=None):
    """``wan`` (float32 on a CPU) with int8wo beside _native_math, and optionally int8wo alone."""
    from synthetic import record

    cpu = {"device": "cpu", "dtype": "float32", "modality": "image"}
    features = {"quantization": "int8wo", "attention_backend": "_native_math"}
    records = [
        record("m", "baseline", {}, latency=0.3, **cpu),
        record("m", "int8+math", features, speedup=1.1, ssim=ssim, psnr=psnr, **cpu),
        record("m", "math", {"attention_backend": "_native_math"}, speedup=1.0, ssim=ssim, psnr=psnr, **cpu),
    ]
    if partner:
        records.append(
            record("m", "int8", {"quantization": "int8wo"}, speedup=1.1, ssim=partner[0], psnr=partner[1], **cpu)
        )
    return records


def test_a_lossless_feature_beside_a_lossy_one_is_held_to_its_own_class():
    # The review's case: int8wo + _native_math at SSIM 0.93 / 27 dB passed on the lossy limits, math alone failed.
    records = _combined(0.93, 27.0)
    assert _verdict("m/math", records).outcome == FAIL
    combined = _verdict("m/int8+math", records)
    assert combined.outcome == FAIL
    message = combined.message()
    assert "attention_backend lossless (image, float32) (no cell of quantization alone" in message
    assert "required >= 0.99999" in message and "required >= 100" in message  # the real limit, not "1"
    # With int8wo measured alone at 0.99 / 40 dB the lossless feature may add only its own class's error.
    worse = _verdict("m/int8+math", _combined(0.93, 27.0, partner=(0.99, 40.0)))
    assert worse.outcome == FAIL and "attention_backend lossless (image, float32) beside int8" in worse.message()
    same = _verdict("m/int8+math", _combined(0.99, 40.0, partner=(0.99, 40.0)))
    assert same.outcome == PASS, same.message()
    # An added error at the lossless class's edge (about 100 dB) still passes; one at 60 dB does not.
    assert _verdict("m/int8+math", _combined(0.99, 39.99999, partner=(0.99, 40.0))).outcome == PASS
    records = _combined(0.99, 40.0, partner=(0.99, 40.0))
    records[1]["parity"]["psnr"] = -20 * __import__("math").log10(10 ** (-40 / 20) + 10 ** (-60 / 20))
    assert _verdict("m/int8+math", records).outcome == FAIL


def test_evidence_of_another_type_is_not_engagement():
    from accel.gate import not_engaged_error

    records = results()
    cell = next(r for r in records if r["variant"] == "compile" and r["model"] == "wan")
    cell["evidence"] = {"compile": {"engaged": "no", "summary": "hand-edited"}}  # bool("no") is True
    verdict = _verdict("wan/compile", records)
    assert verdict.outcome == FAIL and "engaged should be true or false, got 'no'" in verdict.message()
    cell["evidence"] = {"compile": {"engaged": 1}}
    assert _verdict("wan/compile", records).outcome == FAIL
    # The sweep's own judgement: a feature that left no evidence at all fails its cell.
    assert not_engaged_error({}, ["compile"]) == "compile: no evidence recorded"
    assert not_engaged_error({"compile": {"engaged": True}}, ["compile"]) is None
    from accel.gate import judge_measured_cell

    silent = {"model": "m", "variant": "v", "status": "ok", "features": {"compile": "regional"}, "evidence": {}}
    judge_measured_cell(silent)
    assert silent["status"] == "failed" and "compile: no evidence recorded" in silent["error"]


def test_a_no_op_setting_is_labelled_no_effect():
    records = results()
    cell = next(r for r in records if r["variant"] == "attn-math")
    cell["parity"] = {"ssim": 1.0, "psnr": float("inf"), "max_abs_diff": 0.0, "bit_identical": True}
    cell["evidence"]["attention_backend"]["no_effect"] = "the pipeline already used the native backend"
    verdict = _verdict("wan/attn-math", records)
    assert verdict.outcome == PASS and verdict.no_effect == ["attention_backend"]
    assert any("attention_backend engaged, no effect: the pipeline already used" in f for f in verdict.findings)


def test_gate_and_pytest_plugin_agree_on_every_fixture(pytester):
    """One judgement: the plugin's item outcomes are exactly the gate's verdicts, on every fixture."""
    import json

    from accel.gate import judge_records

    fixtures = {"synthetic": results()}
    crashed = results()
    _crash(next(r for r in crashed if (r["model"], r["variant"]) == ("flux", "baseline")))
    fixtures["crashed-baseline"] = crashed
    unstable = results()
    next(r for r in unstable if (r["model"], r["variant"]) == ("wan", "baseline"))["outputs_stable"] = False
    fixtures["unstable-baseline"] = unstable
    fixtures["combined"] = _combined(0.93, 27.0)
    fixtures["no-baseline"] = _without(results(), "wan", "baseline")
    words = {PASS: "PASSED", FAIL: "FAILED", SKIP: "SKIPPED"}
    for name, records in fixtures.items():
        path = pytester.path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        gate = {f"accel[{v.key}]": words[v.outcome] for v in judge_records(records, load_gate_data()).verdicts}
        # In process (a subprocess re-imported torch and diffusers five times, ~8 s each): the plugin's
        # --accel-results path imports no pandas, so the pyarrow re-registration that keeps test_pytest_plugin.py's
        # runs in subprocesses cannot happen here. Without xdist: the inner run is one plain pytest session.
        result = pytester.runpytest("--accel-results", str(path), "-v", "-p", "no:cacheprovider", "-p", "no:xdist")
        plugin = {}
        for line in result.stdout.lines:  # "<file>::accel[flux/compile] PASSED    [ 15%]": the node id names the file
            found = re.match(rf"{re.escape(path.name)}::(accel\[[^\]]+\]) (PASSED|FAILED|SKIPPED)", line)
            if found:
                plugin[found.group(1)] = found.group(2)
        assert len(plugin) == len(records), (name, result.stdout.lines[-5:])
        assert plugin == gate, name


def test_a_crash_or_refusal_blames_the_features_its_error_names_first():
    # The crash names a feature only at the start of a '; '-separated part (``name: reason``); a feature named
    # later in the text, or the text after a second colon, names nothing.
    records = results()
    cell = next(r for r in records if r["variant"] == "int8+tiling")
    _crash(cell, error="vae_use_tiling: tile 32: too small for quantization: int8wo")
    named = _verdict("flux/int8+tiling", records)
    assert named.outcome == SKIP and named.skip_kind == "expected"
    assert named.feature_states == {"vae_use_tiling": "excused"}
    # Named by no part: every feature is blamed; the claimed one is excused, the other one is not.
    _crash(cell, error="RuntimeError: shape mismatch in a tiled decode")
    crashed = _verdict("flux/int8+tiling", records)
    assert crashed.feature_states == {"quantization": "not engaged", "vae_use_tiling": "excused"}
    lines = crashed.message().split("\n")
    assert lines[0] == "failed: RuntimeError: shape mismatch in a tiled decode"  # no claim says it works
    assert len(lines) == 2 and lines[1].startswith("the claim that vae_use_tiling is unsupported excuses only")
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "quantization": {"supported": True}}}
    supported = _verdict("flux/int8+tiling", records, _data(claims))
    assert supported.reasons[0] == "claimed supported but failed: RuntimeError: shape mismatch in a tiled decode"


def test_a_cell_unsupported_on_the_model_blames_only_the_feature_its_error_names():
    verdict = _verdict("flux/compile-full")
    assert verdict.feature_states == {"compile": "not run"}
    assert ", as claimed" not in verdict.message()  # no claim about compile on flux
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "compile": {"supported": False}}}
    as_claimed = _verdict("flux/compile-full", data=_data(claims))
    assert as_claimed.message().startswith("not run, unsupported on this model, as claimed: compile: full-graph")
    # Beside a feature claimed supported, the error that names compile alone does not blame the other one.
    records = results()
    cell = next(r for r in records if r["variant"] == "compile-full")
    cell["features"] = {**cell["features"], "tea_cache": 0.4}
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": True}}}
    both = _verdict("flux/compile-full", records, _data(claims))
    assert both.outcome == SKIP and both.skip_kind == "unsupported"
    assert both.feature_states == {"compile": "not run", "tea_cache": "not run"}
    assert _verdict("flux/compile").message() == "ok"  # a passing cell's message


def test_a_performance_baseline_matches_by_kind_only_on_the_records_own_kind():
    from accel.gate import baseline_device

    # The device kind is the part before the index; a name that mentions the other kind is not matched to it.
    assert baseline_device({"device": "cuda:0", "device_name": "NVIDIA A100"}, {"cuda": {}}) == "cuda"
    assert baseline_device({"device": "cuda", "device_name": "Grace CPU superchip GPU"}, {"cpu": {}}) is None
    assert baseline_device({"device": "cpu", "device_name": "CUDA-less Xeon"}, {"cuda": {}}) is None
    # The longest contained key, not the greatest string.
    devices = {"HBM3": {}, "H100 80GB": {}}
    assert baseline_device({"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}, devices) == "H100 80GB"


def test_an_engine_cell_without_evidence_of_a_feature_fails_with_what_the_engine_said():
    from accel.gate import judge_engine_engagement, judge_measured_cell

    # The engine accepted the feature and logged nothing: an entry saying so is made, and the cell fails on it
    # (the in-process check, which would only say "no evidence recorded", is not the engine's judgement).
    silent = {"engine": "vllm-omni", "variant": "native", "status": "ok", "features": {"attention_backend": "native"}}
    judge_measured_cell(silent)
    assert silent["evidence"] == {"attention_backend": {"engaged": False, "summary": "accepted by vLLM-Omni"}}
    assert silent["status"] == "failed"
    assert silent["error"] == "no evidence of engagement: attention_backend: accepted by vLLM-Omni"
    # A lossy feature the engine logged and whose output differs keeps the log line's summary before the effect.
    logged = {"engaged": True, "summary": "vLLM-Omni logged: TeaCache on", "engine_log": "TeaCache on"}
    record = {"engine": "vllm-omni", "status": "ok", "features": {"tea_cache": 0.4},
              "parity": {"bit_identical": False}, "evidence": {"tea_cache": logged}}  # fmt: skip
    judge_engine_engagement(record)
    assert record["status"] == "ok"
    assert logged["summary"] == "vLLM-Omni logged: TeaCache on; output differs from the engine's baseline"


def test_a_cell_that_failed_after_its_timed_runs_blames_the_feature_its_error_names():
    # Timed outputs and engaged evidence, but the cell failed afterwards: never a pass, and the error's feature
    # (not every feature of the cell) is the one not engaged.
    records = results()
    cell = next(r for r in records if r["variant"] == "tea+offload")
    assert _verdict("flux/tea+offload", records).outcome == PASS
    cell.update(status="failed", error="tea_cache: the cache's state was lost after the last timed run")
    verdict = _verdict("flux/tea+offload", records)
    assert verdict.outcome == FAIL
    assert verdict.feature_states == {"tea_cache": "not engaged", "enable_cpu_offload": "engaged"}
    assert verdict.message() == (
        "engagement of tea_cache: measured failed: tea_cache: the cache's state was lost after the last timed run, "
        "required engaged on every timed run"
    )
    # Claimed supported: still a failure; claimed unsupported: excused, an expected failure.
    supported = {**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": True}}}
    assert _verdict("flux/tea+offload", records, _data(supported)).outcome == FAIL
    unsupported = {**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": False}}}
    excused = _verdict("flux/tea+offload", records, _data(unsupported))
    assert excused.outcome == SKIP and excused.skip_kind == "expected"
    assert excused.feature_states == {"tea_cache": "excused", "enable_cpu_offload": "engaged"}


def test_a_measured_cell_without_features_fails_and_a_record_without_a_device_is_not_on_a_cpu():
    records = results()
    cell = next(r for r in records if r["variant"] == "compile")
    cell.update(features={}, evidence={})
    verdict = _verdict("flux/compile", records)
    assert verdict.outcome == FAIL
    assert "engagement: measured no feature, required at least one feature to judge" in verdict.message()
    cell["parity"]["ssim"] = 0.2  # out of parity too: no claim excuses a cell without features
    verdict = _verdict("flux/compile", records)
    assert verdict.outcome == FAIL and verdict.skip_kind != "expected"
    assert "engagement: measured no feature, required at least one feature to judge" in verdict.message()
    offload = next(r for r in records if r["variant"] == "offload" and r["model"] == "flux")
    offload.pop("device")
    assert _verdict("flux/offload", records).no_effect == []  # a device kind is only "cpu" when recorded so


def test_a_parity_excuse_lists_the_failed_checks_and_the_adherence_limit_is_applied():
    tiling = _verdict("flux/tiling")  # out of parity, claimed unsupported: an expected failure
    assert tiling.feature_states == {"vae_use_tiling": "excused"}
    assert tiling.reasons == [
        "engaged but out of parity, as claimed unsupported (SSIM, lossy (vae): measured 0.33, PSNR dB, lossy (vae): "
        "measured 15.9)"
    ]
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "tea_cache": {"supported": False}}}
    assert _verdict("flux/tea", data=_data(claims)).reasons == []  # in parity: docs drift, no excuse note
    records = results()
    cell = next(r for r in records if r["variant"] == "tea")
    cell.update(adherence_loss=0.2, adherence={"overall": 0.7, "vs_baseline": {"loss": 0.2}})
    verdict = _verdict("flux/tea", records)
    assert verdict.outcome == FAIL
    assert verdict.message() == "adherence loss vs baseline: measured 0.2, required <= 0.05 (lossy)"


def test_an_invalid_timing_fails_and_a_claimed_supported_cell_out_of_parity_says_so():
    records = results()
    cell = next(r for r in records if r["variant"] == "compile")
    cell["invalid_measurement"] = "a step took 0.001 ms, below the 1.000 ms floor"
    verdict = _verdict("flux/compile", records)
    assert verdict.outcome == FAIL
    assert verdict.message() == (
        "timing validity: measured a step took 0.001 ms, below the 1.000 ms floor, required no step below its floor"
    )
    claims = {**CLAIMS, "flux": {**CLAIMS["flux"], "first_block_cache": {"supported": True}}}
    loose = _verdict("flux/fbc-loose", data=_data(claims))  # SSIM and PSNR below the lossy limits
    assert loose.reasons == ["claimed supported but out of parity or not engaged"]


def _flux_cell(records, variant):
    return next(r for r in records if (r["model"], r["variant"]) == ("flux", variant))


def _supported_on_flux(*features):
    return _data({**CLAIMS, "flux": {**CLAIMS["flux"], **{name: {"supported": True} for name in features}}})


@pytest.mark.parametrize(
    ("variant", "change", "failed"),
    [
        (
            "tea",
            lambda records, cell: cell["parity"].update(ssim=0.85),
            "SSIM, lossy (cache): measured 0.85, required >= 0.9",
        ),
        (
            "tea",
            lambda records, cell: cell["parity"].update(psnr=20.0),
            "PSNR dB, lossy (cache): measured 20, required >= 25",
        ),
        (
            "tea+offload",  # offload is lossless beside the cache: its outputs must be identical every pass
            lambda records, cell: cell.update(outputs_stable=False),
            "output stability, lossless: measured outputs differ between timed passes, required identical every pass",
        ),
        (
            "tea",
            lambda records, cell: cell["evidence"]["tea_cache"].update(engaged=False, summary="0 cached steps"),
            "engagement of tea_cache: measured 0 cached steps, required engaged on every timed run",
        ),
    ],
    ids=["ssim-only", "psnr-only", "output-stability-only", "engagement-only"],
)
def test_a_claimed_supported_cell_failing_any_one_judged_check_says_so(variant, change, failed):
    # Each judged check on its own is enough for the reason: a claim of support that parity or the evidence
    # contradicts (the fixtures elsewhere fail SSIM and PSNR together).
    records = results()
    change(records, _flux_cell(records, variant))
    verdict = _verdict(f"flux/{variant}", records, _supported_on_flux("tea_cache"))
    assert verdict.outcome == FAIL
    assert verdict.message().split("\n") == ["claimed supported but out of parity or not engaged", failed]


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        (
            {"invalid_measurement": "a step took 0.001 ms, below the 1.000 ms floor"},
            "timing validity: measured a step took 0.001 ms, below the 1.000 ms floor, "
            "required no step below its floor",
        ),
        (
            {"adherence_loss": 0.2, "adherence": {"overall": 0.7, "vs_baseline": {"loss": 0.2}}},
            "adherence loss vs baseline: measured 0.2, required <= 0.05 (lossy)",
        ),
    ],
    ids=["timing-only", "adherence-only"],
)
def test_a_claimed_supported_cell_failing_only_a_check_that_is_not_judged_keeps_its_own_reason(change, failed):
    # In parity and engaged, claimed supported, but the timing or the adherence fails: a failure, without the
    # claim's "out of parity or not engaged" reason (its SSIM and PSNR checks pass).
    records = results()
    _flux_cell(records, "tea").update(change)
    verdict = _verdict("flux/tea", records, _supported_on_flux("tea_cache"))
    assert verdict.outcome == FAIL and verdict.in_parity
    assert verdict.reasons == [] and verdict.message() == failed


def test_a_feature_claimed_unsupported_that_engaged_with_no_effect_is_docs_drift():
    # Offload on a CPU engages with nothing to move, a no-op setting engages doing what the pipeline already
    # did: either works within parity, so a claim that it is unsupported is stale.
    claims = {**CLAIMS, "wan": {**CLAIMS["wan"], "enable_cpu_offload": {"supported": False}}}
    offload = _verdict("wan/offload", data=_data(claims))
    assert offload.outcome == PASS and offload.feature_states == {"enable_cpu_offload": "no effect"}
    assert offload.findings == [
        "docs drift: wan claims enable_cpu_offload unsupported, but offload works within parity",
        "wan/offload: enable_cpu_offload engaged, no effect on cpu: nothing moved off any device: the weights "
        "already live in host memory",
    ]
    records = results()
    cell = next(r for r in records if r["variant"] == "attn-math")
    cell["parity"] = {"ssim": 1.0, "psnr": float("inf"), "max_abs_diff": 0.0, "bit_identical": True}
    cell["evidence"]["attention_backend"]["no_effect"] = "the pipeline already used the native backend"
    claims = {**CLAIMS, "wan": {**CLAIMS["wan"], "attention_backend": {"supported": False}}}
    no_op = _verdict("wan/attn-math", records, _data(claims))
    assert no_op.outcome == PASS and no_op.feature_states == {"attention_backend": "no effect"}
    assert no_op.findings[0] == (
        "docs drift: wan claims attention_backend unsupported, but attn-math works within parity"
    )


def test_the_noise_floor_loosens_the_lossless_limits_of_a_combined_cell_too():
    from synthetic import record

    # int8wo + _native_math at 0.9995 / 70 dB, no cell of int8wo alone: the lossless feature is held to its
    # class against the baseline, float32's 0.99999 / 100 dB, which a noise floor of 0.999 / 60 dB loosens.
    records = _combined(0.9995, 70.0)
    cpu = {"device": "cpu", "dtype": "float32", "modality": "image"}
    floor = record("m", "noise-floor", {}, role="noise_floor", ssim=0.999, psnr=60.0, speedup=1.0, **cpu)
    combined = _verdict("m/int8+math", [*records, floor])
    assert combined.outcome == PASS, combined.message()
    name = (
        "attention_backend lossless (image, float32), loosened by the noise floor (no cell of quantization alone to "
        "separate it: against the baseline)"
    )
    assert [(c.name, c.required) for c in combined.checks[2:]] == [
        (f"SSIM, {name}", ">= 0.999"),
        (f"PSNR dB, {name}", ">= 60"),
    ]
    alone = _verdict("m/int8+math", records)  # no noise floor: float32's own lossless limits
    assert alone.outcome == FAIL
    assert "PSNR dB, attention_backend lossless (image, float32) (no cell of quantization alone" in alone.message()


def test_a_crash_whose_error_names_two_features_blames_both_and_only_those():
    # Every '; '-separated part of the error can name a feature: two named of three are blamed, the third is
    # not (the error does name features, so it is not counted for all of them).
    records = results()
    cell = next(r for r in records if r["variant"] == "int8+tiling")
    cell["features"] = {**cell["features"], "tea_cache": 0.4}
    error = "quantization: no int8 kernel on this device; vae_use_tiling: tile size 32 is below the VAE's minimum"
    _crash(cell, error=error)
    verdict = _verdict("flux/int8+tiling", records)
    assert verdict.outcome == FAIL
    assert verdict.feature_states == {"quantization": "not engaged", "vae_use_tiling": "excused"}
    assert verdict.reasons == [
        f"failed: {error}",
        "the claim that vae_use_tiling is unsupported excuses only that feature; the error names no single "
        "feature: it counts for quantization",
    ]


@pytest.mark.parametrize(
    ("parity", "why"),
    [({"bit_identical": True}, "but the output is identical to the engine's baseline"),
     (None, "no baseline output to show an effect")],
    ids=["identical-output", "no-baseline-output"],
)  # fmt: skip
def test_a_lossy_engine_feature_it_logged_did_not_engage_without_an_effect_on_the_output(parity, why):
    from accel.gate import judge_engine_engagement

    # The engine's log line made the entry engaged; an output identical to the engine's baseline, or none to
    # compare, takes that back: the entry says not engaged and the cell fails.
    logged = {"engaged": True, "summary": "vLLM-Omni logged: TeaCache on", "engine_log": "TeaCache on"}
    record = {"engine": "vllm-omni", "status": "ok", "features": {"tea_cache": 0.4}, "parity": parity,
              "evidence": {"tea_cache": logged}}  # fmt: skip
    judge_engine_engagement(record)
    assert logged["engaged"] is False and logged["summary"] == f"vLLM-Omni logged: TeaCache on; {why}"
    assert set(logged) == {"engaged", "summary", "engine_log"}
    assert record["status"] == "failed"
    assert record["error"] == f"no evidence of engagement: tea_cache: vLLM-Omni logged: TeaCache on; {why}"


def test_a_reference_not_runnable_here_is_skipped_and_one_unsupported_on_the_model_fails():
    from accel.gate import ENVIRONMENT

    error = "attention_backend: package flash_attn not installed: pip install 'omni-accel[gpu]'"
    for scope, outcome in (("environment", SKIP), ("model", FAIL)):
        records = results()
        baseline = next(r for r in records if (r["model"], r["variant"]) == ("flux", "baseline"))
        _crash(baseline, "unsupported", error)
        baseline["unsupported_scope"] = scope
        verdict = _verdict("flux/baseline", records)
        assert verdict.outcome == outcome, (scope, verdict)
        if scope == "environment":
            assert verdict.skip_kind == ENVIRONMENT and verdict.message() == f"not run, unsupported here: {error}"
        else:
            assert verdict.skip_kind is None and verdict.message() == (
                f"baseline unsupported: {error}: every cell of flux is measured against it"
            )


def test_a_reference_without_timed_outputs_or_failed_after_them_fails():
    records = results()
    baseline = next(r for r in records if (r["model"], r["variant"]) == ("flux", "baseline"))
    baseline.pop("warm")  # status ok, but nothing was timed
    verdict = _verdict("flux/baseline", records)
    assert verdict.outcome == FAIL
    assert verdict.message() == "baseline no timed outputs: every cell of flux is measured against it"
    records = results()
    baseline = next(r for r in records if (r["model"], r["variant"]) == ("flux", "baseline"))
    baseline.update(status="failed", error="RuntimeError: out of memory after the timed runs")  # warm kept
    verdict = _verdict("flux/baseline", records)
    assert verdict.outcome == FAIL and verdict.message() == (
        "baseline failed: RuntimeError: out of memory after the timed runs: every cell of flux is measured against it"
    )


def test_a_references_parity_is_that_of_its_checks():
    assert _verdict("flux/baseline").in_parity is True  # no check: nothing out of parity
    assert _verdict("wan/noise-floor").in_parity is True
    records = results()
    next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "wan")["parity"] = {
        "ssim": 0.5,
        "psnr": 12.0,
    }
    assert _verdict("wan/noise-floor", records).in_parity is False


def test_a_planned_cell_missing_from_the_results_fails_and_every_measured_speedup_is_listed():
    from accel.gate import judge_records

    records = results()
    report = judge_records(records, _data(), [("flux", "lost"), ("wan", "never")])
    lost = [v for v in report.verdicts if v.key in ("flux/lost", "wan/never")]
    assert [(v.model, v.variant, v.outcome) for v in lost] == [("flux", "lost", FAIL), ("wan", "never", FAIL)]
    assert lost[0].message() == (
        "planned by the run's profile but not in its results: never measured (an interrupted sweep or a lost "
        "record); continue it with 'omni-accel sweep --resume RUN_DIR'"
    )
    assert report.exit_code == 1 and len(report.verdicts) == len(records) + 2
    # How each speedup may be published: every measured variant's, never the noise floor's.
    keys = [key for key, _ in report.speed_claims]
    assert keys == [
        "flux/compile",
        "flux/tea",
        "flux/fbc-loose",
        "flux/tiling",
        "flux/offload",
        "flux/tea+offload",
        "flux/int8+tiling",
        "wan/compile",
        "wan/attn-math",
        "wan/offload",
        "wan/slicing",
        "wan/pab",
    ]
    ci = {f"{r['model']}/{r['variant']}": r.get("speedup_ci") for r in records}
    # as recorded, except wan/pab's: no engagement evidence voids its timing (below)
    assert all(claim is ci[key] for key, claim in report.speed_claims if key != "wan/pab")
    assert dict(report.speed_claims)["wan/pab"]["verdict"] == "unverified"


def test_a_cell_whose_feature_did_not_engage_or_whose_baseline_failed_publishes_no_claim():
    """The review copied a faster claim onto cells whose timing the gate voids (no engagement evidence; a
    baseline that crashed), and onto the baseline: each was published. A parity failure leaves its speed shown
    (the trade-off), a voided timing does not."""
    from accel.gate import judge_records

    records = results()
    no_evidence = [{**r, "evidence": {}} if r["variant"] == "compile" and r["model"] == "flux" else r for r in records]
    claims = dict(judge_records(no_evidence, _data()).speed_claims)
    assert claims["flux/compile"]["verdict"] == "unverified"
    assert "the gate failed the cell's timing (engagement of compile" in claims["flux/compile"]["reason"]
    assert claims["wan/compile"]["verdict"] == "faster"  # the other model's untouched
    fbc = dict(judge_records(records, _data()).speed_claims)["flux/fbc-loose"]
    assert _verdict("flux/fbc-loose", records).outcome == FAIL and fbc["verdict"] == "faster"  # out of parity only
    crashed = [{**r, "status": "failed", "error": "boom"} if r["variant"] == "baseline" else r for r in records]
    claims = dict(judge_records(crashed, _data()).speed_claims)
    assert (
        claims["flux/compile"]["verdict"] == "unverified"
        and "baseline: measured failed" in claims["flux/compile"]["reason"]
    )
    copied = [{**r, "speedup_ci": ci_of(records, "flux/compile")} if r["variant"] == "baseline" else r for r in records]
    claims = dict(judge_records(copied, _data()).speed_claims)
    assert (
        claims["flux/baseline"]["verdict"] == "unverified" and "a reference cell" in claims["flux/baseline"]["reason"]
    )


def ci_of(records: list[dict], key: str) -> dict:
    return next(r["speedup_ci"] for r in records if f"{r['model']}/{r['variant']}" == key)


def test_a_record_without_a_modality_is_judged_as_an_image():
    with_modality = _outcomes(gate_records(results(), _data()))
    records = results()
    for r in records:
        if r["model"] == "flux":
            r.pop("modality")
    assert _outcomes(gate_records(records, _data())) == with_modality
    floor = next(r for r in records if r.get("role") == "noise_floor" and r["model"] == "flux")
    floor["parity"] = {"ssim": 0.5, "psnr": 12.0}
    assert "vs the baseline (lossless_minimum, image)" in _verdict("flux/noise-floor", records).message()


def test_a_feature_that_did_not_engage_says_so_when_it_gives_no_summary():
    from accel.gate import evidence_problem, not_engaged_error

    assert evidence_problem({"engaged": False}) == "not engaged"
    assert evidence_problem({"engaged": False, "summary": ""}) == "not engaged"
    assert evidence_problem({"engaged": False, "summary": "no hook ran"}) == "no hook ran"
    assert not_engaged_error({"compile": {"engaged": False}}) == "compile: not engaged"


def test_a_cache_whose_output_is_bit_identical_to_the_baseline_is_engaged_without_effect():
    import math

    from synthetic import record

    from accel.report.tables import _cell

    gpu = {"device": "cuda", "device_name": "NVIDIA H200", "dtype": "bfloat16"}
    unchanged = record("flux", "tea-idle", {"tea_cache": 0.4}, speedup=1.0, ssim=1.0, psnr=math.inf, **gpu)
    verdict = _verdict("flux/tea-idle", [*results(), unchanged])
    assert verdict.outcome == PASS and verdict.no_effect == ["tea_cache"]
    assert any("bit-identical to the baseline's" in note for note in verdict.notes)
    mark, footnote = _cell(unchanged, verdict)
    assert mark == "⚪" and "bit-identical" in footnote
    # A lossless feature keeping the output bit-identical is what it should do, not "no effect".
    assert _verdict("wan/compile").no_effect == []
    changed = _verdict("flux/tea")  # SSIM 0.97: the cache changed the output
    assert changed.no_effect == [] and _cell(next(r for r in results() if r["variant"] == "tea"), changed)[0] != "⚪"


def test_synthetic_parity_is_self_consistent_so_a_max_abs_diff_check_can_fail():
    """The synthetic records' parity agrees with itself: max_abs_diff 0.0 only where the output is bit-identical
    (PSNR infinite), else at least the root-mean-square difference the PSNR implies. A record from before
    ``bit_identical`` is judged by its max_abs_diff: a lossy cache there keeps its effect, an unchanged one has none."""
    import math

    from accel.gate.judge import unchanged_output

    measured = [r for r in results() if "parity" in r]
    assert any(not r["parity"]["bit_identical"] for r in measured)
    for cell in measured:
        parity = cell["parity"]
        assert (parity["max_abs_diff"] == 0.0) == parity["bit_identical"] == math.isinf(parity["psnr"]), cell
        if not parity["bit_identical"]:
            assert parity["max_abs_diff"] >= 10 ** (-parity["psnr"] / 20) * (1 - 1e-12), cell
    for variant, changed in (("tea", True), ("noise-floor", False)):
        cell = next(r for r in results() if r["model"] == "flux" and r["variant"] == variant)
        del cell["parity"]["bit_identical"]  # an older record: max_abs_diff alone says whether anything changed
        assert unchanged_output(cell) is not changed, cell["parity"]


def test_an_out_of_parity_cell_says_what_the_library_does_that_changes_the_output():
    """VAE tiling out of parity: the footnote beside ⚠ carries the feature's parity_note (diffusers' tile
    geometry), so a reader sees the library's algorithm on this model, not a harness fault."""
    from accel.report.tables import _cell

    note = "diffusers' AutoencoderKL.tiled_decode decodes 32-px tiles (4 latents) every 24 px, each alone"
    records = results()
    tiling = next(r for r in records if r["model"] == "flux" and r["variant"] == "tiling")
    tiling["evidence"]["vae_use_tiling"]["parity_note"] = note
    mark, footnote = _cell(tiling, _verdict("flux/tiling", records))
    assert mark == "⚠" and footnote.startswith("tiling: engaged but SSIM 0.330") and footnote.endswith(f"; {note}")


def test_a_cache_reporting_cached_steps_that_skipped_no_work_is_engaged_without_effect():
    from synthetic import record

    from accel.report.tables import _cell

    gpu = {"device": "cuda", "device_name": "NVIDIA H200", "dtype": "bfloat16"}
    reason = "3-3 cached steps per run by its own report, but ... the cached steps skipped no work"
    evidence = {"cache_dit": {"engaged": True, "summary": f"engaged, no effect: {reason}", "no_effect": reason}}
    idle = record("flux", "dbcache", {"cache_dit": {}}, ssim=0.99, psnr=40.0, evidence=evidence, **gpu)
    verdict = _verdict("flux/dbcache", [*results(), idle])
    assert verdict.outcome == PASS and verdict.no_effect == ["cache_dit"]
    mark, footnote = _cell(idle, verdict)
    assert mark == "⚪" and "skipped no work" in footnote
