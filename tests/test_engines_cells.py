"""Engine cells decided by the engine's own output, with a stand-in for vLLM-Omni (tests/fake_engine/):
fast, and without its environment. The log lines and error messages fed to the stand-in are vLLM-Omni
0.30's own, as it printed them on a CPU (tests/test_engines_vllm_omni.py checks them on the real engine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accel.engines.vllm_omni import MARKER, VERSION
from accel.gate import GateData, gate_records, judge_engine_engagement, load_gate_data, markdown_summary
from accel.profile import Measure, ModelSpec, Workload
from accel.report.markdown import model_table
from accel.report.tables import performance_table, support_matrix
from accel.sweep.cell import run_cell
from accel.sweep.spec import CELL_FILES, CellSpec

FAKE = Path(__file__).resolve().parent / "fake_engine"
ATTENTION_LOG = (
    "(DiffusionWorker pid=12065) INFO 11-30 18:08:02 [selector.py:93] Resolved diffusion attention backend 'SDPA' "
    "for role='self' via attention_config\n"
)
DEFAULT_ATTENTION_LOG = (
    "(DiffusionWorker pid=12065) INFO 11-30 18:08:02 [selector.py:93] Resolved diffusion attention backend 'SDPA' "
    "for role='self' via platform default\n"
)
CACHE_REFUSAL = (
    "Orchestrator initialization failed: Cache backend 'tea_cache' is not supported with the diffusers backend. "
    "TeaCache/Cache-DiT require hooking into individual transformer blocks."
)
COMPILE_SKIP = (
    "(DiffusionWorker pid=1) WARNING 11-30 18:20:01 [diffusion_model_runner.py:402] Model runner: Platform cpu "
    "does not support torch inductor, skipping torch.compile.\n"
)


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """An engines dir whose vLLM-Omni environment runs the stand-in; returns the file of its Omni(...) calls."""
    environment = tmp_path / "engines" / f"vllm-omni-{VERSION}"
    (environment / "bin").mkdir(parents=True)
    python = environment / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (environment / MARKER).write_text(json.dumps({"engine": "vllm-omni", "version": VERSION}))
    monkeypatch.setenv("OMNI_ACCEL_ENGINES_DIR", str(tmp_path / "engines"))
    calls = tmp_path / "omni-calls.jsonl"
    monkeypatch.setenv("FAKE_OMNI_RECORD", str(calls))
    for name in ("FAKE_OMNI_LOG", "FAKE_OMNI_ERROR", "FAKE_OMNI_SHADE"):
        monkeypatch.delenv(name, raising=False)
    return calls


def _spec(tmp_path, features, target="vllm-omni", dtype="float32", variant="v"):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "model_index.json").write_text("{}")
    return CellSpec(
        model=ModelSpec(name="omni", source=str(checkpoint), target=target, dtype=dtype),
        workload=Workload(prompts=["a red fox"], seeds=[0], steps=2, height=32, width=32),
        measure=Measure(warmup=0, repeats=1, executor="inline"),
        variant=variant,
        features=features,
        run_dir=str(tmp_path / "run"),
    )


def _calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_the_engine_gets_the_models_dtype(tmp_path, fake_engine):
    record = run_cell(_spec(tmp_path, {}, dtype="bfloat16", variant="baseline"))
    assert record["status"] == "ok", record["error"]
    assert [call["dtype"] for call in _calls(fake_engine)] == ["bfloat16"]


def test_acceptance_alone_is_not_engagement(tmp_path, fake_engine, monkeypatch):
    # vLLM-Omni resolves SDPA from its platform default whether or not the backend was asked for.
    monkeypatch.setenv("FAKE_OMNI_LOG", DEFAULT_ATTENTION_LOG)
    record = run_cell(_spec(tmp_path, {"attention_backend": "native"}))
    assert _calls(fake_engine)[0]["diffusion_attention_backend"] == "TORCH_SDPA"  # it ran, and accepted it
    judge_engine_engagement(record)
    assert record["status"] == "failed" and record["decided"] == "measured"
    assert record["evidence"]["attention_backend"]["engaged"] is False
    assert record["error"] == (
        "no evidence of engagement: attention_backend: accepted by vLLM-Omni; no log line of it engaging"
    )


def test_the_engines_log_line_is_the_evidence_and_is_kept(tmp_path, fake_engine, monkeypatch):
    monkeypatch.setenv("FAKE_OMNI_LOG", ATTENTION_LOG)
    record = run_cell(_spec(tmp_path, {"attention_backend": "native"}))
    judge_engine_engagement(record)
    assert record["status"] == "ok", record["error"]
    evidence = record["evidence"]["attention_backend"]
    assert evidence["engaged"] is True
    assert evidence["engine_log"] == "Resolved diffusion attention backend 'SDPA' for role='self' via attention_config"
    assert ATTENTION_LOG in record[CELL_FILES][record["engine_log"]].decode()  # the runner writes it


def test_a_refusal_is_the_engines_own_error_and_measured(tmp_path, fake_engine, monkeypatch):
    monkeypatch.setenv("FAKE_OMNI_ERROR", CACHE_REFUSAL)
    record = run_cell(_spec(tmp_path, {"tea_cache": 0.4}, target="vllm-omni-adapter"))
    assert _calls(fake_engine)[0]["cache_backend"] == "tea_cache"  # sent to vLLM-Omni, not decided from the YAML
    assert record["status"] == "unsupported" and record["unsupported_scope"] == "model"
    assert record["decided"] == "measured"
    assert record["error"] == (
        "tea_cache: refused by vLLM-Omni on vllm-omni-adapter: Cache backend 'tea_cache' is not supported with the "
        "diffusers backend. TeaCache/Cache-DiT require hooking into individual transformer blocks."
    )


def test_an_unknown_engine_failure_is_a_failure_with_its_message(tmp_path, fake_engine, monkeypatch):
    monkeypatch.setenv("FAKE_OMNI_ERROR", "something else broke")
    record = run_cell(_spec(tmp_path, {"tea_cache": 0.4}, target="vllm-omni-adapter"))
    assert record["status"] == "failed" and record["decided"] == "measured"
    assert record["error"].startswith("vLLM-Omni failed (exit 1): RuntimeError: something else broke")


def test_a_skip_is_read_from_the_engines_log(tmp_path, fake_engine, monkeypatch):
    monkeypatch.setenv("FAKE_OMNI_LOG", COMPILE_SKIP)
    record = run_cell(_spec(tmp_path, {"compile": "regional"}))
    assert record["status"] == "unsupported" and record["unsupported_scope"] == "environment"
    assert record["decided"] == "measured"
    assert record["error"] == (
        "compile: accepted, then skipped by vLLM-Omni on this cpu host: Platform cpu does not support torch "
        "inductor, skipping torch.compile."
    )


def test_declared_cells_never_run_the_engine_and_every_table_says_so(tmp_path, fake_engine):
    record = run_cell(_spec(tmp_path, {"quantization": "int8wo"}, variant="int8wo"))
    assert _calls(fake_engine) == []
    assert record["status"] == "unsupported" and record["decided"] == "declared"
    baseline = {"model": "omni", "variant": "baseline", "status": "ok", "features": {}, "warm": {"median": 0.1}}
    records = [baseline, record]
    data = GateData(load_gate_data().thresholds, {})
    label = "(declared, not measured)"
    assert label in support_matrix(records, data)
    assert label in performance_table(records, "omni", data)
    assert label in model_table(records)
    report = gate_records(records, data)
    assert label in report.verdicts[1].message()  # the gate's reason (JUnit); [0] is the baseline's verdict
    assert f"omni/int8wo {label}: quantization: method=int8wo cannot be told apart" in markdown_summary(report)


@pytest.mark.parametrize(
    ("parity", "log", "engaged", "summary"),
    [
        ({"bit_identical": False}, "", True, "accepted by vLLM-Omni; no log line of it engaging"),
        ({"bit_identical": True}, "TeaCache applied with rel_l1_thresh=0.4", False, "identical to the engine's"),
        (None, "", False, "no baseline output to show an effect"),
    ],
)
def test_a_lossy_feature_engages_only_with_an_effect_on_the_output(parity, log, engaged, summary):
    entry = {"engaged": bool(log), "summary": f"vLLM-Omni logged: {log}" if log else "accepted by vLLM-Omni; no log "
             "line of it engaging", **({"engine_log": log} if log else {})}  # fmt: skip
    record = {"engine": "vllm-omni", "status": "ok", "features": {"tea_cache": 0.4}, "parity": parity,
              "evidence": {"tea_cache": entry}}  # fmt: skip
    judge_engine_engagement(record)
    assert record["evidence"]["tea_cache"]["engaged"] is engaged
    assert (record["status"] == "ok") is engaged
    if engaged:
        assert record["evidence"]["tea_cache"]["summary"] == "output differs from the engine's baseline"
    else:
        assert summary in record["error"]
