"""accel/gate/render.py: the markdown summary and the JUnit XML of a gate report, pinned whole.

A report with every section (a failure, a skipped cell of each kind, speed claims of two verdicts, a notice, a
finding) is rendered and compared line for line, so a dropped section, a lost blank line, a wrong count or a
table header changed is caught (the survivors of mutmut's run on render.py: reports/mutation/mutmut-render.md).
"""

from __future__ import annotations

from accel.gate.render import junit_xml, markdown_summary, summary_counts
from accel.gate.verdict import ENVIRONMENT, EXPECTED, FAIL, PASS, SKIP, UNSUPPORTED, CellVerdict, GateReport


def _claim(verdict: str, ratio: float, reason: str) -> dict:
    return {"verdict": verdict, "ratio": ratio, "low": ratio - 0.1, "high": ratio + 0.1, "reason": reason}


def _report() -> GateReport:
    verdicts = [
        CellVerdict("m1", "baseline", PASS),
        CellVerdict("m1", "cache", FAIL, reasons=["too slow", "second line"], findings=["a finding"]),
        CellVerdict("m1", "compile", SKIP, reasons=["no compiler"], skip_kind=ENVIRONMENT),
        CellVerdict("m2", "cache", SKIP, reasons=["not on m2"], skip_kind=UNSUPPORTED),
        CellVerdict("m2", "compile", SKIP, reasons=["claimed"], skip_kind=EXPECTED),
        CellVerdict("m2", "quant", SKIP, reasons=["no kind"]),
    ]
    claims = [
        ("m1/cache", _claim("claim", 1.5, "a|b")),
        ("m1/compile", _claim("claim", 2.0, "ok")),
        ("m2/cache", _claim("unverified", 1.2, "few pairs")),
    ]
    return GateReport(verdicts, notices=["a notice"], speed_claims=claims)


def test_summary_counts_count_each_outcome_and_each_skip_kind():
    assert summary_counts(_report()) == (
        "1 passed, 1 failed, 4 skipped (1 not run: unsupported in this environment; "
        "1 not run: unsupported on the model; 1 failed as claimed unsupported)"
    )
    only_env = GateReport([CellVerdict("m", "a", SKIP, skip_kind=ENVIRONMENT), CellVerdict("m", "b", PASS)])
    assert summary_counts(only_env) == "1 passed, 0 failed, 1 skipped (1 not run: unsupported in this environment)"
    assert summary_counts(GateReport([CellVerdict("m", "a", PASS)])) == "1 passed, 0 failed, 0 skipped"


def test_markdown_summary_is_every_section_in_order():
    assert markdown_summary(_report()).split("\n") == MARKDOWN
    strict = markdown_summary(_report(), strict=True).split("\n")
    assert strict[4] == "**FAILED (--strict: 4 variant cell(s) skipped (m1/compile, m2/cache, m2/compile, m2/quant))**"
    assert strict[:4] + strict[5:] == MARKDOWN[:4] + MARKDOWN[5:]


def test_markdown_summary_of_a_report_with_nothing_but_passes_has_no_sections():
    report = GateReport([CellVerdict("m", "a", PASS)])
    assert markdown_summary(report) == "# omni-accel gate\n\n1 passed, 0 failed, 0 skipped\n"


def test_junit_xml_has_one_testcase_per_cell():
    assert junit_xml(_report()) == JUNIT
    assert junit_xml(GateReport([]), name="n").startswith(
        '<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="n" '
    )


MARKDOWN = [
    "# omni-accel gate",
    "",
    "1 passed, 1 failed, 4 skipped (1 not run: unsupported in this environment; 1 not run: unsupported on the "
    "model; 1 failed as claimed unsupported)",
    "",
    "**nothing was qualified: none of the 5 variant cell(s) passed** (`--strict` fails such a run)",
    "",
    "## Failures",
    "",
    "- **m1/cache**",
    "  - too slow",
    "  - second line",
    "",
    "## Skipped (never counted as passed)",
    "",
    "- **m1/compile**: no compiler",
    "- **m2/cache**: not on m2",
    "- **m2/compile**: claimed",
    "- **m2/quant**: no kind",
    "",
    "## Speed claims",
    "",
    "2 claim, 1 unverified (a claim needs its whole interval outside the model's noise band)",
    "",
    "| cell | speedup | verdict | why |",
    "|---|---|---|---|",
    "| m1/cache | 1.50x [1.40–1.60] | claim | a/b |",
    "| m1/compile | 2.00x [1.90–2.10] | claim | ok |",
    "| m2/cache | 1.20x? | unverified | few pairs |",
    "",
    "## Notices",
    "",
    "- a notice",
    "",
    "## Findings",
    "",
    "- a finding",
    "",
]

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuite name="omni-accel-gate" tests="6" failures="1" skipped="4">
  <testcase classname="m1" name="baseline">
  </testcase>
  <testcase classname="m1" name="cache">
    <failure message="too slow">too slow
second line</failure>
  </testcase>
  <testcase classname="m1" name="compile">
    <skipped type="environment" message="no compiler"/>
  </testcase>
  <testcase classname="m2" name="cache">
    <skipped type="unsupported" message="not on m2"/>
  </testcase>
  <testcase classname="m2" name="compile">
    <skipped type="expected" message="claimed"/>
  </testcase>
  <testcase classname="m2" name="quant">
    <skipped type="environment" message="no kind"/>
  </testcase>
</testsuite>
"""
