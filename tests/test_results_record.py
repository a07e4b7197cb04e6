"""The cell record has one declared shape (``accel.results.CellRecord``): every key a sweep writes is declared
with its section, type and description; every line carries its schema version; the manual's table of keys
(docs/reference/results-record.md) is generated from the declaration and never stale."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from synthetic import record

from accel.errors import ConfigError
from accel.results import (
    SCHEMA_VERSION,
    CellRecord,
    ResultsLog,
    load_results,
    record_fields,
    record_fields_markdown,
    record_version,
)

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["identity", "timing", "memory", "stages", "parity", "roofline", "evidence", "errors"]


def test_the_manual_table_of_record_keys_is_current():
    page = (ROOT / "docs" / "reference" / "results-record.md").read_text()
    assert record_fields_markdown() in page, (
        "docs/reference/results-record.md is stale: regenerate it with 'python -m accel.docs_gen (make docs-reference)'"
    )


def test_every_key_is_declared_once_in_its_section_with_a_type_and_a_description():
    fields = record_fields()
    names = [f.name for f in fields]
    assert len(names) == len(set(names))
    assert list(dict.fromkeys(f.section for f in fields)) == SECTIONS
    assert set(names) == set(CellRecord.__annotations__)  # the TypedDict the code annotates with: the same keys
    for field in fields:
        assert field.type in ("integer", "number", "string", "boolean", "object", "list"), field
        assert field.description and "\n" not in field.description and "|" not in field.description, field


@pytest.mark.parametrize("report", ["quickstart", "engines-flux", "gpu-h200"])
def test_every_key_a_committed_report_holds_is_declared(report):
    declared = {f.name for f in record_fields()}
    records = load_results(ROOT / "reports" / report).records
    assert records
    assert {key for r in records for key in r} - declared == set()


def _written_keys(path: Path) -> set[str]:
    """String keys the module writes into a record: ``record["k"] = ``, ``record.setdefault("k")``,
    ``record.update(k=...)`` (also on ``result``), and the dicts the cell functions build a record from."""
    tree = ast.parse(path.read_text())
    # In cell.py, engine_cell.py and collect.py a result is the record being built; elsewhere it is not a record.
    names = {"record", "result"} if path.name in ("cell.py", "engine_cell.py", "collect.py") else {"record"}
    builders = {"record_head", "measure_engine", "_measure", "collect_record", "failure"}
    keys: set[str] = set()

    def is_record(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in names

    def dict_keys(node: ast.AST | None) -> None:
        if isinstance(node, ast.Dict):
            keys.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))

    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []  # fmt: skip
            for target in targets:
                key = target.slice if isinstance(target, ast.Subscript) and is_record(target.value) else None
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys.add(key.value)
                if function.name in builders and is_record(target):
                    dict_keys(node.value)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_record(node.func.value):
                if node.func.attr == "setdefault" and isinstance(node.args[0], ast.Constant):
                    keys.add(node.args[0].value)
                if node.func.attr == "update":
                    keys.update(k.arg for k in node.keywords if k.arg)
            if function.name in builders and isinstance(node, ast.Return):
                dict_keys(node.value)
    return keys


def test_every_key_the_sweep_writes_is_declared():
    # The sweep builds records; gate.py's judge_measured_cell adds its judgements before they are written.
    sources = [*sorted((ROOT / "accel" / "sweep").glob("*.py")), ROOT / "accel" / "measure" / "overlap.py"]
    sources.extend(sorted((ROOT / "accel" / "gate").glob("*.py")))
    written = set().union(*(_written_keys(path) for path in sources))
    assert {"schema_version", "model", "warm", "parity", "roofline", "evidence", "notes", "images"} <= written
    declared = {f.name for f in record_fields()}
    assert written - declared == set(), "written but not declared in accel/results.py"
    assert declared - written == set(), "declared but written nowhere: a stale declaration"


def test_a_line_without_a_version_is_version_0_and_a_new_line_carries_the_current_one(tmp_path):
    path = tmp_path / "results.jsonl"
    legacy = record("flux", "baseline", {}, latency=0.2)
    path.write_text(json.dumps(legacy) + "\n")  # written before the record was declared: no schema_version
    new = record("flux", "compile", {"compile": "regional"}, speedup=1.5)
    ResultsLog(path).append(new)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "schema_version" not in lines[0] and lines[1]["schema_version"] == SCHEMA_VERSION
    records = load_results(path).records
    assert [record_version(r) for r in records] == [0, SCHEMA_VERSION]


def test_a_newer_version_is_refused_with_file_line_and_versions(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**record("flux", "baseline", {}), "schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(ConfigError) as raised:
        load_results(path)
    assert str(raised.value) == (
        f"{path}:1: written with results schema version {SCHEMA_VERSION + 1}; this omni-accel reads versions 0 to "
        f"{SCHEMA_VERSION}: upgrade omni-accel to read it"
    )
    assert raised.value.exit_code == 2


def test_keys_nobody_declared_survive_a_write_and_a_read(tmp_path):
    """A third-party feature's evidence and an unknown top-level key are kept as written."""
    path = tmp_path / "results.jsonl"
    evidence = {"my_cache": {"engaged": True, "summary": "hit 12 of 28 steps", "hits": [1, 2], "ratio": 0.4}}
    written = {**record("flux", "baseline", {}), "evidence": evidence, "plugin_extra": {"k": 1}}
    ResultsLog(path).append(dict(written))
    (read,) = load_results(path).records
    assert read == {**written, "schema_version": SCHEMA_VERSION}


def test_a_declared_key_of_the_wrong_type_names_it(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**record("flux", "baseline", {}), "noisy": "yes"}) + "\n")
    with pytest.raises(ConfigError, match=r":1: 'noisy' should be a boolean or null, got a string"):
        load_results(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"engaged": "no", "summary": "hand-edited"}, r"evidence.compile.engaged should be true or false, got 'no'"),
        ({"summary": "no verdict"}, r"evidence.compile.engaged should be true or false, got None"),
        ({"engaged": True, "summary": 3}, r"evidence.compile.summary should be a string, got a number"),
    ],
)
def test_evidence_fields_are_type_checked_on_read(tmp_path, entry, message):
    path = tmp_path / "results.jsonl"
    cell = {**record("flux", "compile", {"compile": "regional"}), "evidence": {"compile": entry}}
    path.write_text(json.dumps(cell) + "\n")
    with pytest.raises(ConfigError, match=message):
        load_results(path)


def test_the_cell_builds_a_versioned_record(tmp_path):
    from accel.profile import Measure, ModelSpec, Workload
    from accel.sweep.spec import CellSpec
    from accel.sweep.workers import failure

    spec = CellSpec(
        model=ModelSpec(name="m", source="tiny-flux"),
        workload=Workload(prompts=["a"], seeds=[0], steps=2, height=32, width=32),
        measure=Measure(warmup=0, repeats=1, executor="inline"),
        variant="baseline",
        features={},
        run_dir=str(tmp_path),
    )
    made = failure(spec, "timeout")  # the record of a cell that never returned one
    assert made["schema_version"] == SCHEMA_VERSION and made["status"] == "failed"


def test_resume_reads_a_run_written_before_versions(tmp_path):
    from accel.sweep.resume import measured_records

    run = tmp_path / "run"
    run.mkdir()
    legacy = [record("flux", "baseline", {}, latency=0.2), record("flux", "compile", {"compile": "regional"})]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert [r["variant"] for r in measured_records(run)] == ["baseline", "compile"]


def test_engagement_is_judged_in_the_gate():
    from accel.gate import judge_measured_cell, not_engaged_error

    evidence = {"a": {"engaged": True, "summary": "ok"}, "b": {"engaged": False, "summary": "no hook ran"}}
    assert not_engaged_error(evidence) == "b: no hook ran"
    assert not_engaged_error({"a": {"engaged": True}}) is None
    # The cell records facts; the gate's one entry point turns them into the record's judgements.
    cell = {**record("flux", "ab", {"a": {}, "b": {}}), "evidence": evidence}
    cell["roofline"] = {"below_floor": True, "fastest_step_s": 1e-6, "floor_step_s": 1e-3}
    judge_measured_cell(cell)
    assert cell["status"] == "failed" and cell["error"] == "b: no hook ran"
    assert cell["invalid_measurement"].startswith("a step took 0.001 ms, below the 1.000 ms floor")
    engaged = {**record("flux", "a", {"a": {}}), "evidence": {"a": evidence["a"]}, "roofline": {"below_floor": False}}
    judge_measured_cell(engaged)
    assert engaged["status"] == "ok" and "invalid_measurement" not in engaged
    # No module but gate.py makes a judgement: none sets a failed status from evidence or marks timing invalid.
    for path in (ROOT / "accel").rglob("*.py"):
        if path.parent.name == "gate":
            continue
        text = path.read_text()
        assert "not_engaged_error" not in text and "judge_engine_engagement(" not in text, path
        assert '["invalid_measurement"] =' not in text and "invalid_measurement=" not in text, path
    sweep = (ROOT / "accel" / "sweep" / "runner.py").read_text()
    assert sweep.count("judge_measured_cell(record)") == 1


def test_a_sweep_resumes_a_run_written_before_versions(tmp_path):
    """A run directory from before the declaration (no schema_version on any line) continues with --resume:
    its lines are kept as written, the cells measured now carry the version."""
    from collections import Counter

    from conftest import small_profile

    from accel.profile import parse_profile
    from accel.sweep.runner import run_sweep

    raw = small_profile(["tiny-flux"], [{"name": "v0", "features": {"attention_backend": "native"}}], steps=2)
    raw["measure"] = {"warmup": 0, "repeats": 1, "executor": "inline"}
    profile = parse_profile(raw)
    run_sweep(profile, "p.yaml", tmp_path, show_progress=False)
    results = tmp_path / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert all(line["schema_version"] == SCHEMA_VERSION for line in lines)
    legacy = [{k: v for k, v in line.items() if k != "schema_version"} for line in lines[:-1]]
    results.write_text("".join(json.dumps(line) + "\n" for line in legacy))  # the last cell not measured yet
    run_sweep(profile, "p.yaml", tmp_path, show_progress=False, resume=True)
    records = load_results(results).records
    assert Counter(r["variant"] for r in records) == Counter(line["variant"] for line in lines)
    assert [record_version(r) for r in records] == [0] * len(legacy) + [SCHEMA_VERSION]


def test_the_gate_reads_each_features_class_from_the_record_not_its_options(monkeypatch):
    import accel.features
    from accel.gate import GateData, gate_records, load_gate_data
    from accel.results import check_record, feature_classes, lossy_features

    baseline = record("flux", "baseline", {})
    cache = {**record("flux", "cache", {"cache_dit": {"residual_diff_threshold": 0.2}}, ssim=0.9, psnr=25.0)}
    legacy = dict(cache)  # written before version 2: no feature_classes, the options are parsed on read
    assert feature_classes(legacy) == {"cache_dit": "lossy"}
    cache["feature_classes"] = {"cache_dit": "lossless"}  # what the record says wins: no second opinion

    def parsed_again(*args, **kwargs):
        raise AssertionError("a recorded feature's options were parsed again")

    # check_record parses the options (an unknown one is refused, issue 41) but keeps the recorded class;
    # judging never parses them again.
    assert check_record(cache, "r:1") is cache
    monkeypatch.setattr(accel.features, "parse_feature_options", parsed_again)
    assert lossy_features(cache) == []
    data = GateData(load_gate_data().thresholds, {})
    verdict = gate_records([baseline, cache], data).verdicts[1]  # [0]: the baseline's own verdict
    # A lossless cell's thresholds, as its record said (the options alone would make it lossy).
    assert [check.name for check in verdict.checks][:2] == [
        "SSIM, lossless (image, float32)",
        "PSNR dB, lossless (image, float32)",
    ]

    monkeypatch.undo()  # check_record parses the options again (each must be known), then checks the classes
    with pytest.raises(ConfigError, match=r"r:2: feature_classes.cache_dit should be one of lossless, lossy, got 'x'"):
        check_record({**cache, "feature_classes": {"cache_dit": "x"}}, "r:2")
    with pytest.raises(ConfigError, match=r"r:3: feature_classes should name the same features as features"):
        check_record({**cache, "feature_classes": {}}, "r:3")


def test_a_cell_records_the_class_its_features_had_when_planned():
    from accel.profile import parse_profile
    from accel.sweep.cell import record_head
    from accel.sweep.runner import plan

    profile = parse_profile(
        {
            "models": [{"name": "flux", "source": "tiny-flux"}],
            "workload": {"prompts": ["a"], "steps": 2, "height": 32, "width": 32},
            "variants": [
                {"name": "cache", "features": {"cache_dit": {"residual_diff_threshold": 0.2}}},
                {"name": "sdpa", "features": {"attention_backend": "native"}},
            ],
        }
    )
    heads = {cell.variant: record_head(cell) for cell in plan(profile, Path("."))}
    assert heads["cache"]["feature_classes"] == {"cache_dit": "lossy"}
    assert heads["sdpa"]["feature_classes"] == {"attention_backend": "lossless"}
    assert heads["baseline"]["feature_classes"] == {} and heads["baseline"]["schema_version"] == SCHEMA_VERSION >= 2
