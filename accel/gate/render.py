"""A gate report rendered: the markdown summary (counts, failures with their numbers, skipped cells with their
reasons, speed claims, notices, findings) and JUnit XML (one testcase per cell)."""

from __future__ import annotations

from accel.gate.verdict import ENVIRONMENT, EXPECTED, FAIL, HARNESS, PASS, SKIP, UNSUPPORTED, GateReport
from accel.report.format import table_lines

SKIP_KINDS = {
    ENVIRONMENT: "not run: unsupported in this environment",
    UNSUPPORTED: "not run: unsupported on the model",
    HARNESS: "not run: not supported by omni-accel yet (a harness gap)",
    EXPECTED: "failed as claimed unsupported",
}


def summary_counts(report: GateReport) -> str:
    """``N passed, N failed, N skipped (n not run: ..., n failed as claimed unsupported)``."""
    counts = {o: sum(1 for v in report.verdicts if v.outcome == o) for o in (PASS, FAIL, SKIP)}
    kinds = [
        f"{sum(1 for v in report.skipped if v.skip_kind == kind)} {text}"
        for kind, text in SKIP_KINDS.items()
        if any(v.skip_kind == kind for v in report.skipped)
    ]
    detail = f" ({'; '.join(kinds)})" if kinds else ""
    return f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped{detail}"


def markdown_summary(report: GateReport, strict: bool = False) -> str:
    """A markdown summary: counts, each failure with its numbers, each skipped cell with its reason, notices
    about the gate's inputs, then findings. It says plainly when no variant was qualified, and with ``strict``
    (``gate --strict``) why the run fails although no cell did."""
    lines = ["# omni-accel gate", "", summary_counts(report), ""]
    if report.nothing_measured:
        lines += [f"**FAILED: {report.nothing_measured}**", ""]
    elif strict and report.strict_problem():
        lines += [f"**FAILED ({report.strict_problem()})**", ""]
    elif report.nothing_qualified():
        lines += [f"**{report.nothing_qualified()}** (`--strict` fails such a run)", ""]
    if report.failed:
        lines += ["## Failures", ""]
        for verdict in report.failed:
            lines.append(f"- **{verdict.key}**")
            lines += [f"  - {line}" for line in verdict.message().splitlines()]
        lines.append("")
    if report.skipped:
        lines += ["## Skipped (never counted as passed)", ""]
        lines += [f"- **{v.key}**: {v.message()}" for v in report.skipped]
        lines.append("")
    lines += _speed_claims(report)
    if report.notices:
        lines += ["## Notices", "", *(f"- {n}" for n in report.notices), ""]
    if report.findings:
        lines += ["## Findings", "", *(f"- {f}" for f in report.findings), ""]
    return "\n".join(lines)


def _speed_claims(report: GateReport) -> list[str]:
    """Every measured speedup as it may be published: a claim with its interval, ``≈1.0x`` or unverified."""
    from accel.measure.speedup import format_speedup

    rows = report.speed_claims
    if not rows:
        return []
    counts: dict[str, int] = {}
    for _, claim in rows:
        counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
    lines = [
        "## Speed claims",
        "",
        ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
        + " (a claim needs its whole interval outside the model's noise band)",
        "",
    ]
    cells = [(key, format_speedup(c), c["verdict"], c["reason"].replace("|", "/")) for key, c in rows]
    lines += table_lines(("cell", "speedup", "verdict", "why"), ("left",) * 4, cells)
    return [*lines, ""]


def junit_xml(report: GateReport, name: str = "omni-accel-gate") -> str:
    """JUnit XML: one testcase per cell, failures with measured and required values."""
    from xml.sax.saxutils import escape, quoteattr

    failures = len(report.failed) + bool(report.nothing_measured)
    tests = len(report.verdicts) + bool(report.nothing_measured)
    skipped = sum(1 for v in report.verdicts if v.outcome == SKIP)
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuite name={quoteattr(name)} tests="{tests}" failures="{failures}" skipped="{skipped}">',
    ]
    if report.nothing_measured:  # the run itself fails: every cell's own verdict is a skip
        lines.append('  <testcase classname="omni-accel" name="nothing-measured">')
        message = quoteattr(report.nothing_measured)
        lines.append(f"    <failure message={message}>{escape(report.nothing_measured)}</failure>")
        lines.append("  </testcase>")
    for verdict in report.verdicts:
        lines.append(f"  <testcase classname={quoteattr(verdict.model)} name={quoteattr(verdict.variant)}>")
        if verdict.outcome == FAIL:
            message = verdict.message()
            lines.append(f"    <failure message={quoteattr(message.splitlines()[0])}>{escape(message)}</failure>")
        elif verdict.outcome == SKIP:
            kind = quoteattr(verdict.skip_kind or ENVIRONMENT)
            lines.append(f"    <skipped type={kind} message={quoteattr(verdict.message())}/>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
