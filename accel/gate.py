"""Parity, engagement, claim and performance gates over measured results.

One module shared by ``omni-accel gate`` and the pytest plugin. It reads results and data files and
never runs a pipeline. Each measured cell (not the baseline or its noise-floor re-run) gets a
``CellVerdict``: pass, fail or skip, with every check's measured and required values.

- Parity: thresholds by feature class from ``feature_matrix/thresholds.yaml`` (lossless by modality,
  lossy by family, the loosest family for a mix), never stricter than the model's noise floor for
  lossless features. SSIM is always checked.
- Engagement and crashes: a failed cell fails, unless the model claims the feature unsupported.
- Claims (``feature_matrix/claims.yaml``): claimed supported but failed -> fail; works within parity
  but claimed unsupported -> a docs-drift finding.
- Performance (optional ``--baseline``): warm median within ``max(base * (1 + rel), base + abs)``;
  faster than the baseline by more than ``refresh`` -> a notice to refresh it.
- A cell unsupported by this environment (no GPU, package missing) is skipped, not failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from accel.errors import ConfigError
from accel.results import declared_tag

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class Check:
    """One comparison of a measured value with a required one."""

    name: str
    ok: bool
    measured: Any
    required: str

    def line(self) -> str:
        return f"{self.name}: measured {_fmt(self.measured)}, required {self.required}"


@dataclass
class CellVerdict:
    """The gate's verdict on one cell."""

    model: str
    variant: str
    outcome: str
    in_parity: bool | None = None  # None when the cell produced no output to compare
    checks: list[Check] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.variant}"

    def message(self) -> str:
        """Every failed check and reason on its own line, with measured and required values."""
        lines = [*self.reasons, *(c.line() for c in self.checks if not c.ok)]
        return "\n".join(lines) or "ok"


@dataclass(frozen=True)
class GateData:
    """Thresholds, claims and an optional performance baseline."""

    thresholds: dict[str, Any]
    claims: dict[str, Any]
    perf: dict[str, Any] | None = None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: {what} file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: malformed YAML: {getattr(error, 'problem', error)}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping")
    return data


def load_gate_data(
    thresholds: Path | None = None, claims: Path | None = None, baseline: Path | None = None
) -> GateData:
    """Read the gate's data files (defaults: the shipped ``feature_matrix/`` files)."""
    from accel.profile import data_dir

    matrix = data_dir("feature_matrix")
    threshold_data = _read_yaml(thresholds or matrix / "thresholds.yaml", "thresholds")
    for key in ("lossless", "lossy"):
        if key not in threshold_data:
            raise ConfigError(f"{thresholds or matrix / 'thresholds.yaml'}: missing key '{key}'")
    claims_data = _read_yaml(claims or matrix / "claims.yaml", "claims")
    perf = _read_yaml(baseline, "performance baseline") if baseline else None
    return GateData(threshold_data, claims_data.get("models") or {}, perf)


def claim_for(data: GateData, model: str, feature: str) -> bool | None:
    """True/False when the model claims the feature (un)supported, None when it makes no claim."""
    entry = (data.claims.get(model) or {}).get(feature)
    if entry is None:
        return None
    return bool(entry.get("supported", True)) if isinstance(entry, dict) else bool(entry)


def required_parity(
    data: GateData, record: dict[str, Any], noise_floor: dict[str, Any] | None, modality: str
) -> tuple[float, float, str]:
    """(SSIM, PSNR, description) a cell must reach."""
    from accel.features import FEATURES

    overrides = (data.thresholds.get("models") or {}).get(record["model"]) or {}
    lossless = {**data.thresholds["lossless"], **(overrides.get("lossless") or {})}
    lossy = {**data.thresholds["lossy"], **(overrides.get("lossy") or {})}
    lossy_families = sorted(
        {
            FEATURES[name].family
            for name, raw in (record.get("features") or {}).items()
            if FEATURES[name].feature_class_for(FEATURES[name].parse_options(raw)).value == "lossy"
        }
    )
    if lossy_families:
        limits = [lossy[f] for f in lossy_families if f in lossy] or [lossy.get("cache", {"ssim": 0.9, "psnr": 25})]
        ssim = min(float(x["ssim"]) for x in limits)
        psnr = min(float(x["psnr"]) for x in limits)
        return ssim, psnr, f"lossy ({', '.join(lossy_families)})"
    limit = lossless[modality]
    ssim, psnr = float(limit["ssim"]), float(limit["psnr"])
    if noise_floor:  # never stricter than the baseline against itself allows
        ssim = min(ssim, noise_floor["ssim"])
        psnr = min(psnr, noise_floor["psnr"])
    return ssim, psnr, f"lossless ({modality})"


def _perf_check(data: GateData, record: dict[str, Any]) -> tuple[Check | None, str | None]:
    if not data.perf or record.get("warm") is None:
        return None, None
    device = _device_key(record)
    base = ((data.perf.get("devices") or {}).get(device) or {}).get(record["model"], {}).get(record["variant"])
    if base is None:
        return None, None
    rel = float(data.perf.get("rel_tolerance", 0.15))
    absolute = float(data.perf.get("abs_tolerance_s", 0.005))
    refresh = float(data.perf.get("refresh_if_faster_by", 0.2))
    measured = record["warm"]["median"]
    limit = max(base * (1 + rel), base + absolute)
    check = Check("warm latency (s)", measured <= limit, measured, f"<= {limit:.4g} (baseline {base:.4g} on {device})")
    notice = None
    if measured < base * (1 - refresh):
        notice = (
            f"{record['model']}/{record['variant']}: faster than the stored baseline by "
            f"{1 - measured / base:.0%} (> {refresh:.0%}): refresh the baseline"
        )
    return check, notice


def _device_key(record: dict[str, Any]) -> str:
    return record.get("device_name") or record.get("device") or "cpu"


def gate_cell(record: dict[str, Any], data: GateData, noise_floor: dict[str, Any] | None, modality: str) -> CellVerdict:
    """The verdict on one measured cell."""
    verdict = CellVerdict(record["model"], record["variant"], PASS)
    features = list(record.get("features") or {})
    claims = {name: claim_for(data, record["model"], name) for name in features}
    claimed_unsupported = [n for n, c in claims.items() if c is False]
    status = record["status"]
    declared = declared_tag(record)
    if declared:
        verdict.findings.append(f"{record['model']}/{record['variant']}{declared}: {record.get('error')}")
    if status == "unsupported":
        if record.get("unsupported_scope") == "environment":
            verdict.outcome = SKIP
            verdict.reasons.append(f"unsupported here: {record.get('error')}{declared}")
        elif claimed_unsupported:
            verdict.reasons.append(f"unsupported, as claimed: {record.get('error')}{declared}")
        elif any(claims.values()):
            verdict.outcome = FAIL
            verdict.reasons.append(f"claimed supported but unsupported: {record.get('error')}{declared}")
        else:
            verdict.reasons.append(f"unsupported: {record.get('error')}{declared}")
        return verdict
    if status != "ok":
        if claimed_unsupported:
            verdict.reasons.append(f"failed, as claimed unsupported ({', '.join(claimed_unsupported)})")
            return verdict
        verdict.outcome = FAIL
        prefix = "claimed supported but " if any(claims.values()) else ""
        verdict.reasons.append(f"{prefix}{status}: {record.get('error')}")
        return verdict

    parity = record.get("parity") or {}
    ssim_min, psnr_min, kind = required_parity(data, record, noise_floor, modality)
    verdict.checks.append(
        Check(f"SSIM, {kind}", parity.get("ssim", 0) >= ssim_min, parity.get("ssim"), f">= {ssim_min:.4g}")
    )
    verdict.checks.append(
        Check(f"PSNR dB, {kind}", parity.get("psnr", 0) >= psnr_min, parity.get("psnr"), f">= {psnr_min:.4g}")
    )
    engaged = all(e.get("engaged") for e in (record.get("evidence") or {}).values())
    verdict.checks.append(Check("engagement evidence", engaged, engaged, "every feature engaged on every run"))
    if record.get("invalid_measurement"):
        verdict.checks.append(Check("timing validity", False, record["invalid_measurement"], "no step below its floor"))
    perf, notice = _perf_check(data, record)
    if perf is not None:
        verdict.checks.append(perf)
    if notice:
        verdict.findings.append(notice)
    parity_ok = all(c.ok for c in verdict.checks)
    verdict.in_parity = all(c.ok for c in verdict.checks if c.name.startswith(("SSIM", "PSNR")))
    if not parity_ok:
        if claimed_unsupported and all(c.ok for c in verdict.checks if not c.name.startswith(("SSIM", "PSNR"))):
            verdict.reasons.append(
                f"engaged but out of parity, as claimed unsupported ({', '.join(claimed_unsupported)})"
            )
            verdict.checks = [c for c in verdict.checks if c.ok]
            return verdict
        verdict.outcome = FAIL
        if any(claims.values()):
            verdict.reasons.append("claimed supported but out of parity or not engaged")
    elif claimed_unsupported:
        verdict.findings.append(
            f"docs drift: {record['model']} claims {', '.join(claimed_unsupported)} unsupported, "
            f"but {record['variant']} works within parity"
        )
    return verdict


@dataclass
class GateReport:
    """Every verdict of a results file, and what to print."""

    verdicts: list[CellVerdict]

    @property
    def failed(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.outcome == FAIL]

    @property
    def findings(self) -> list[str]:
        return [f for v in self.verdicts for f in v.findings]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def noise_floors(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model, the parity of the baseline's re-run against the baseline."""
    return {r["model"]: r["parity"] for r in records if r.get("role") == "noise_floor" and r.get("parity")}


def gate_records(records: list[dict[str, Any]], data: GateData) -> GateReport:
    """Verdicts on every measured cell of a results file."""
    floors = noise_floors(records)
    verdicts = []
    for record in records:
        if record["variant"] == "baseline" or record.get("role") == "noise_floor":
            continue
        verdicts.append(gate_cell(record, data, floors.get(record["model"]), _modality(record)))
    return GateReport(verdicts)


def _modality(record: dict[str, Any]) -> str:
    return record.get("modality") or "image"


def markdown_summary(report: GateReport) -> str:
    """A markdown summary: counts, then each failure with its numbers, then findings."""
    counts = {o: sum(1 for v in report.verdicts if v.outcome == o) for o in (PASS, FAIL, SKIP)}
    lines = [
        "# omni-accel gate",
        "",
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped (unsupported in this environment)",
        "",
    ]
    if report.failed:
        lines += ["## Failures", ""]
        for verdict in report.failed:
            lines.append(f"- **{verdict.key}**")
            lines += [f"  - {line}" for line in verdict.message().splitlines()]
        lines.append("")
    if report.findings:
        lines += ["## Findings", "", *(f"- {f}" for f in report.findings), ""]
    return "\n".join(lines)


def junit_xml(report: GateReport, name: str = "omni-accel-gate") -> str:
    """JUnit XML: one testcase per cell, failures with measured and required values."""
    from xml.sax.saxutils import escape, quoteattr

    failures = len(report.failed)
    skipped = sum(1 for v in report.verdicts if v.outcome == SKIP)
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuite name={quoteattr(name)} tests="{len(report.verdicts)}" failures="{failures}" skipped="{skipped}">',
    ]
    for verdict in report.verdicts:
        lines.append(f"  <testcase classname={quoteattr(verdict.model)} name={quoteattr(verdict.variant)}>")
        if verdict.outcome == FAIL:
            message = verdict.message()
            lines.append(f"    <failure message={quoteattr(message.splitlines()[0])}>{escape(message)}</failure>")
        elif verdict.outcome == SKIP:
            lines.append(f"    <skipped message={quoteattr(verdict.message())}/>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
