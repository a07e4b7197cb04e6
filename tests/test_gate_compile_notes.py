"""A supported compile says how many graphs it split into (issue 40, wave 8): hidream-i1's full compile is
supported with 8 graph breaks, and the verdict, the support matrix and the per-feature tables say so."""

from __future__ import annotations

from synthetic import CLAIMS, results

from accel.gate import GateData, gate_records, load_gate_data
from accel.gate.judge import graph_break_note
from accel.report import tables

SHIPPED = load_gate_data()
EAGER = ["Data dependent operator", "Dynamic shape operator"]


def _compiled(breaks: int) -> tuple[list[dict], dict]:
    records = results()
    cell = next(r for r in records if r["model"] == "flux" and r["variant"] == "compile")
    cell["evidence"] = {
        "compile": {
            "engaged": True,
            "summary": "evidence",
            "graph_breaks": breaks,
            "unique_graphs": breaks + 1,
            "eager_frames": 2 if breaks else 0,
            "eager_reasons": EAGER if breaks else [],
        }
    }
    return records, cell


def _verdict(records: list[dict]):
    report = gate_records(records, GateData(SHIPPED.thresholds, CLAIMS))
    return next(v for v in report.verdicts if v.key == "flux/compile"), report


def test_a_supported_compile_with_graph_breaks_says_how_many():
    records, cell = _compiled(8)
    verdict, report = _verdict(records)
    assert verdict.outcome == "pass"
    kind, reason = tables.classify(cell, verdict)
    assert kind == tables.SUPPORTED
    assert reason == (
        "supported, compile engaged with 8 graph break(s) (9 graphs; 2 frame(s) run eagerly: "
        "Data dependent operator, Dynamic shape operator)"
    )
    assert any("flux/compile: compile engaged with 8 graph break(s)" in f for f in report.findings)
    assert "compile: supported, compile engaged with 8 graph break(s)" in tables.support_matrix(records, SHIPPED)


def test_one_graph_says_nothing_more():
    records, cell = _compiled(0)
    verdict, _ = _verdict(records)
    assert tables.classify(cell, verdict) == (tables.SUPPORTED, None)
    assert graph_break_note("compile", {"graph_breaks": 0}) is None
    assert graph_break_note("compile", {"graph_breaks": 1}) == "compile engaged with 1 graph break(s)"
