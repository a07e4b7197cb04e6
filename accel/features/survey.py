"""``survey``: which features can run on a loaded pipeline, and who refuses the others, applying nothing.

``omni-accel features SOURCE`` answers "which features can I use on this checkpoint?" before a sweep: for
every registered feature and its main options (each Literal choice of its primary option, else its
defaults) it asks the feature itself, in the order ``apply`` does: ``probe`` (device, installation, the
pipeline's compute dtype), ``check`` (this pipeline) and ``untouched_denoisers_refusal`` (a second denoiser
the feature would leave untouched: the harness's gap). The first refusal is the verdict, with its ``Owner``.

A parallel feature's ``check`` refuses outside the ranks the sweep starts for it (``_in_ranks``): that is
the state of this process, not a refusal, so it reads as "can run" with the ranks it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from accel.features.base import (
    OWNER_OF_SCOPE,
    AnyFeature,
    FeatureConfig,
    Owner,
    Support,
    compute_dtype,
    untouched_denoisers_refusal,
)

CAN_RUN = "can run"


@dataclass(frozen=True)
class SurveyRow:
    """One feature with one set of options on one pipeline: ``verdict`` is ``can run`` or ``refused by
    <owner>`` (``owner``: an ``Owner`` value, None when it can run); ``reason`` says why, or notes a limit."""

    feature: str
    options: str
    verdict: str
    owner: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON object."""
        return asdict(self)


def survey(pipeline: Any, device: str, features: Mapping[str, AnyFeature]) -> list[SurveyRow]:
    """Each feature of ``features`` with each of its main options (``option_values``, else its defaults),
    judged on ``pipeline`` for ``device`` by the feature's own ``probe`` and ``check`` and the reach check,
    without applying anything."""
    dtype = compute_dtype(pipeline)
    rows = []
    for feature in features.values():
        for value in feature.option_values() or [None]:
            options = feature.parse_options(value)
            shown = f"{feature.primary_option}={value}" if value is not None else "(defaults)"
            owner, reason = _refusal(feature, pipeline, device, options, dtype)
            if owner is None:
                rows.append(SurveyRow(feature.name, shown, CAN_RUN, None, reason))
            else:
                rows.append(SurveyRow(feature.name, shown, f"refused by {owner.value}", owner.value, reason))
    return rows


def _refusal(
    feature: AnyFeature, pipeline: Any, device: str, options: FeatureConfig, dtype: str | None
) -> tuple[Owner | None, str]:
    """The owner and reason of the first refusal, as ``apply`` checks them; (None, a note) when it can run."""
    probe = feature.probe(device, options, dtype)
    if not probe.supported:
        return probe.owner or OWNER_OF_SCOPE["environment"], probe.reason
    check = feature.check(pipeline, device, options)
    ranks = _ranks_needed(feature, options, check)
    if not check.supported and ranks is None:
        return check.owner or OWNER_OF_SCOPE["model"], check.reason
    untouched = untouched_denoisers_refusal(feature, pipeline, options)
    if untouched is not None:  # the library could reach it: omni-accel does not yet
        return Owner.HARNESS, untouched
    notes = [f"in {ranks} ranks, which the sweep starts"] if ranks is not None else []
    if device == "cpu" and feature.no_effect_on_cpu:
        notes.append(f"no effect on cpu: {feature.no_effect_on_cpu}")
    return None, "; ".join(notes)


def _ranks_needed(feature: AnyFeature, options: FeatureConfig, check: Support) -> int | None:
    """The ranks a parallel feature needs when ``check`` refused only because this process is not one of them
    (the sweep starts them); None otherwise."""
    from accel.features.parallel import _in_ranks

    world_size = getattr(feature, "world_size", None)
    if check.supported or world_size is None:
        return None
    size = int(world_size(options))
    return size if check == _in_ranks(size) else None
