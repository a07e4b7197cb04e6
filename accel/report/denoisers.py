"""Evidence per denoiser in the report: for a model with two denoisers (Wan 2.2's ``transformer`` and
``transformer_2``), what each feature of each cell showed of each one (``accel.features.denoiser_evidence``).

A feature engaged on one expert only is "partial" in its verdict; this table shows the counts behind it, so an
engaged cell shows both experts' share, not only a summary of their sum.
"""

from __future__ import annotations

from typing import Any

from accel.features.base import DENOISER_COMPONENTS
from accel.features.denoiser_evidence import DenoiserEvidence, record_by_denoiser
from accel.report.format import fmt, percent, table_lines


def _value(evidence: DenoiserEvidence, name: str) -> str:
    value = evidence.least.get(name)
    if value is None:
        return "–"
    return percent(value) if "share" in evidence.what else fmt(value, 0)


def denoiser_table(records: list[dict[str, Any]], model: str) -> list[str]:
    """Markdown lines: per cell and feature, the least each denoiser showed over the timed runs and whether the
    feature engaged; none unless some cell of ``model`` shows evidence for two denoisers or more."""
    rows: list[tuple[dict[str, Any], str, DenoiserEvidence]] = [
        (r, feature, found) for r in records if r["model"] == model for feature, found in record_by_denoiser(r).items()
    ]
    names = {name for _, _, found in rows for name in found.least}
    if len(names) < 2:
        return []
    columns = [n for n in DENOISER_COMPONENTS if n in names] + sorted(names - set(DENOISER_COMPONENTS))
    header = ("variant", "feature", "engaged", "what (least over the timed runs)", *columns)
    align = ("left", "left", "center", "left", *("right",) * len(columns))
    body = [
        (
            r["variant"],
            feature,
            "yes" if (r.get("evidence") or {}).get(feature, {}).get("engaged") else "**no**",
            found.what,
            *(_value(found, name) for name in columns),
        )
        for r, feature, found in rows
    ]
    return [
        "### Evidence per denoiser",
        "",
        "Each feature's evidence counted per denoiser on every timed run; the least run is shown, so 0 means a",
        "denoiser ran without the feature on some run (the verdict then says partial, not engaged).",
        "",
        *table_lines(header, align, body),
        "",
    ]
