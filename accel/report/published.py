"""Published claims cross-checked against measurement (issue 40, item 5).

``feature_matrix/published_claims.yaml`` records what the field publishes about a pipeline family and a feature
(cache-dit's registered adapters, diffusers' documented examples and model attributes), each with its source. A
single-feature cell whose measured verdict contradicts a claim is a disagreement: the support matrix marks the
cell (``published_marker``) and ``disagreements_table`` lists each with its cause, "finding for users" (the
claim does not hold on this model or device) or "harness defect" (the harness measured wrongly), or "to fill"
until someone has looked. A claim matches a cell by the diffusers pipeline class of the cell's zoo model and the
feature's name (and, with ``options``, those option values as the feature parses them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from accel.errors import ConfigError
from accel.profile import StrictModel, format_validation_error

CAUSES = ("finding for users", "harness defect")
TO_FILL = "to fill"
MARKER = "‡"
# Measured verdicts (accel.report.tables.VERDICTS) that contradict a published "supported": the feature was
# refused as the model's, or failed. "Refused by this device" says nothing about the model, "engaged, no effect
# here" is the device's (an offload on a CPU), and "engaged, out of parity" is the setting's (a claim of support
# is not one of parity at every threshold: the matrix's ⚠ already says it).
# A library's own refusal contradicts a claim of support as much as the model's; a harness gap ("not supported by
# omni-accel yet") does too, and its cause is known without looking: the harness's.
HARNESS_GAP = "not supported by omni-accel yet"
CONTRADICT_SUPPORTED = ("refused by the model", "refused by the library", HARNESS_GAP, "failed")


class Cause(StrictModel):
    """Why measurement and a published claim disagree, once someone has looked."""

    kind: Literal["finding for users", "harness defect"]
    note: str = Field(min_length=1, description="What was found: the issue, the measurement, the reason.")


class PublishedClaim(StrictModel):
    """One published statement: ``feature`` works on ``pipeline`` (a diffusers pipeline class name)."""

    pipeline: str = Field(min_length=1)
    feature: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict, description="Option values the claim is about.")
    claim: Literal["supported"] = "supported"
    source: str = Field(min_length=1, description="A URL, or the package, its version and file:line.")
    cause: Cause | None = None


class PublishedClaims(StrictModel):
    """The whole file."""

    claims: list[PublishedClaim]


def default_path() -> Path:
    """The shipped claims file, ``feature_matrix/published_claims.yaml``."""
    from accel.data import data_dir

    return data_dir("feature_matrix") / "published_claims.yaml"


def load_published_claims(path: Path | None = None) -> list[PublishedClaim]:
    """The claims of ``path`` (default: the shipped file), checked whole: an unknown key, a missing source or an
    unknown feature is a one-line ConfigError naming the file and the key."""
    from accel.features import FEATURES
    from accel.yaml_bounds import load_yaml_file

    path = path or default_path()
    data = load_yaml_file(path, "published claims")
    try:
        claims = PublishedClaims.model_validate(data).claims
    except ValidationError as error:
        raise ConfigError(format_validation_error(str(path), error, PublishedClaims)) from None
    for index, claim in enumerate(claims):
        if claim.feature not in FEATURES:
            raise ConfigError(
                f"{path}: claims[{index}].feature: unknown feature '{claim.feature}' "
                f"(one of: {', '.join(sorted(FEATURES))})"
            )
    return claims


def _pipeline_of(record: dict[str, Any]) -> str | None:
    from accel import zoo

    source = record.get("source")
    return zoo.ZOO[source].pipeline_class if isinstance(source, str) and zoo.is_zoo_name(source) else None


def _options_match(claim: PublishedClaim, raw: Any) -> bool:
    if not claim.options:
        return True
    from accel.features import FEATURES

    try:
        parsed = FEATURES[claim.feature].parse_options(raw).model_dump()
    except (ConfigError, ValueError):
        return False
    return all(parsed.get(key) == value for key, value in claim.options.items())


def claims_for(record: dict[str, Any], claims: list[PublishedClaim]) -> list[PublishedClaim]:
    """The claims about a single-feature cell: its zoo model's pipeline class, its feature and options."""
    pipeline = _pipeline_of(record)
    features = record.get("features") or {}
    if pipeline is None or len(features) != 1:
        return []
    ((name, raw),) = features.items()
    return [c for c in claims if c.pipeline == pipeline and c.feature == name and _options_match(c, raw)]


@dataclass(frozen=True)
class Disagreement:
    """A cell whose measured verdict contradicts a published claim."""

    model: str
    variant: str
    feature: str
    measured: str
    claim: PublishedClaim

    @property
    def cause(self) -> str:
        """The cause as the claims file records it; a harness gap's is the harness's; otherwise "to fill"."""
        cause = self.claim.cause
        if cause:
            return f"{cause.kind}: {cause.note}"
        return (
            "harness defect: omni-accel does not support or observe it yet" if self.measured == HARNESS_GAP else TO_FILL
        )


def disagreement(record: dict[str, Any], measured: str, claims: list[PublishedClaim]) -> Disagreement | None:
    """The first claim about ``record`` that its measured verdict (``tables.classify``) contradicts, or None."""
    if measured not in CONTRADICT_SUPPORTED:
        return None
    for claim in claims_for(record, claims):
        return Disagreement(record["model"], record["variant"], claim.feature, measured, claim)
    return None


def published_marker(cell: str, found: Disagreement | None, notes: Any) -> str:
    """``cell`` (a rendered support-matrix mark) with the disagreement marker and its footnote when ``found``."""
    if found is None:
        return cell
    text = (
        f"{found.variant}: measured {found.measured}, published as supported by {found.claim.source}; "
        f"cause: {found.cause}"
    )
    reference: str = notes.ref(text)
    return cell + MARKER + reference


def disagreements_table(found: list[Disagreement]) -> str:
    """Every disagreement with a published claim, with its source and cause."""
    from accel.report.format import table_lines

    if not found:
        return "_No measured verdict contradicts a published claim._\n"
    rows = [
        (f"**{d.model}**", d.variant, d.measured, "supported", d.claim.source.replace("|", "/"), d.cause) for d in found
    ]
    lines = table_lines(
        ("model", "variant", "measured", "published", "source", "cause"),
        ("left", "left", "center", "center", "left", "left"),
        rows,
    )
    legend = (
        f"{MARKER} in the support matrix: the measured verdict contradicts a published claim "
        "(feature_matrix/published_claims.yaml). Cause: a finding for users (the claim does not hold here), a "
        "harness defect (to fix), or to fill."
    )
    return "\n".join(lines) + f"\n\n{legend}\n"
