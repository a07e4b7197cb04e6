"""The verdicts: each measured cell (``gate_cell``: engagement on evidence, parity by class, a video's worst
frame and frame pair too (``accel.gate.video``), claims that excuse only their own feature, adherence, timing
validity, performance), each reference (``gate_reference``: a baseline or noise floor that did not run fails
its model), and a whole results file judged once (``judge_records``), as ``omni-accel gate``, the pytest plugin
and the tables all judge it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accel.gate.data import GateData, claim_for
from accel.gate.evidence import evidence_problem
from accel.gate.limits import (
    adherence_check,
    combined_lossless_checks,
    parity_pair,
    perf_check,
    required_parity,
    unmatched_baseline_entries,
    unmatched_claim_models,
    unmatched_threshold_models,
)
from accel.gate.verdict import (
    BASELINE,
    ENVIRONMENT,
    EXPECTED,
    FAIL,
    HARNESS,
    PASS,
    SKIP,
    UNSUPPORTED,
    CellVerdict,
    Check,
    GateReport,
    is_reference,
)
from accel.gate.video import VIDEO, video_checks
from accel.report.format import fmt
from accel.results import (
    declared_tag,
    feature_options,
    is_noise_floor,
    lossy_features,
    not_run,
    parity_of,
    refused_by,
)

# measure.confidence's default: the confidence of a record written before ``speedup_ci`` kept the one it asked.
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class RunMeasure:
    """What the run's profile (``profile.resolved.yaml``) asked of every speed claim: the noise band its
    ``measure.min_effect`` gives and its ``measure.confidence``. A claim published from the run's results must
    have been judged with both (``publishable_claim``): a record cannot widen its own band or lower its own
    confidence."""

    band: tuple[float, float]
    confidence: float


# What a model's cells are judged against when its baseline record is missing from the results.
NO_BASELINE = {"status": "missing", "error": "no baseline record in these results"}


def _named_features(error: str | None, features: list[str]) -> list[str]:
    """Features an error names at the start of one of its '; '-separated parts (``name: reason``)."""
    named = []
    for part in (error or "").split("; "):
        head = part.split(":", 1)[0].strip()
        if head in features and head not in named:
            named.append(head)
    return named


def _excuse_note(claimed: list[str], unclaimed: list[str], why: str) -> str:
    """Why a claim did not excuse a cell: it covers only its own feature."""
    return (
        f"the claim that {', '.join(claimed)} {'is' if len(claimed) == 1 else 'are'} unsupported excuses only "
        f"{'that feature' if len(claimed) == 1 else 'those features'}; {why} {', '.join(unclaimed)}"
    )


def _gate_unsupported(verdict: CellVerdict, record: dict[str, Any], claims: dict[str, bool | None]) -> CellVerdict:
    error = record.get("error")
    features = list(claims)
    verdict.feature_states = dict.fromkeys(features, "not run")
    verdict.refused_by = owner = refused_by(record)
    if record.get("unsupported_scope") == "environment":
        verdict.outcome, verdict.skip_kind = SKIP, ENVIRONMENT
        verdict.reasons.append(f"not run, unsupported here: {error}")
        return verdict
    blamed = _named_features(error, features) or features
    claimed_supported = [name for name in blamed if claims[name]]
    if claimed_supported:  # whoever refused it, the claim is not borne out by a measurement
        verdict.outcome = FAIL
        gap = " (by omni-accel, a harness gap: not the model's)" if owner == HARNESS else ""
        verdict.reasons.append(f"claimed supported but unsupported{gap}: {error}")
        return verdict
    as_claimed = ", as claimed" if all(claims[name] is False for name in blamed) else ""
    if owner == HARNESS:
        verdict.outcome, verdict.skip_kind = SKIP, HARNESS
        verdict.reasons.append(f"not run, not supported by omni-accel yet (a harness gap){as_claimed}: {error}")
        return verdict
    verdict.outcome, verdict.skip_kind = SKIP, UNSUPPORTED
    where = {"library": "refused by the library on this model", "device": "unsupported on this device"}
    verdict.reasons.append(f"not run, {where.get(owner or '', 'unsupported on this model')}{as_claimed}: {error}")
    return verdict


def _gate_crashed(verdict: CellVerdict, record: dict[str, Any], claims: dict[str, bool | None]) -> CellVerdict:
    """A cell that failed before it produced timed outputs: blame the features its error names, else all."""
    status, error = record["status"], record.get("error")
    features = list(claims)
    blamed = _named_features(error, features) or features
    excused = [name for name in blamed if claims[name] is False]
    unexcused = [name for name in blamed if claims[name] is not False]
    verdict.feature_states = {name: ("excused" if name in excused else "not engaged") for name in blamed}
    if not unexcused:
        verdict.outcome, verdict.skip_kind = SKIP, EXPECTED
        verdict.reasons.append(f"failed, as claimed unsupported ({', '.join(excused)}): {status}: {error}")
        return verdict
    verdict.outcome = FAIL
    prefix = "claimed supported but " if any(claims[name] for name in unexcused) else ""
    verdict.reasons.append(f"{prefix}{status}: {error}")
    if excused:
        verdict.reasons.append(_excuse_note(excused, unexcused, "the error names no single feature: it counts for"))
    return verdict


def gate_cell(
    record: dict[str, Any],
    data: GateData,
    noise_floor: dict[str, Any] | None,
    modality: str,
    baseline: dict[str, Any] | None = None,
    peers: list[dict[str, Any]] | None = None,
) -> CellVerdict:
    """The verdict on one measured cell. ``baseline``: the model's baseline record (a failed or unstable one
    fails what is judged against it); ``peers``: the other records of the results, where a combined cell's
    lossless features find the cell of its lossy features alone. ``judge_records`` passes both."""
    from accel.features import FEATURES

    verdict = CellVerdict(record["model"], record["variant"], PASS)
    features = list(feature_options(record))
    claims = {name: claim_for(data, record["model"], name) for name in features}
    declared = declared_tag(record)
    if declared:
        verdict.findings.append(f"{record['model']}/{record['variant']}{declared}: {record.get('error')}")
    if record["status"] == "unsupported":
        verdict = _gate_unsupported(verdict, record, claims)
        verdict.reasons = [reason + declared for reason in verdict.reasons]
        return verdict
    if record.get("warm") is None:
        return _gate_crashed(verdict, record, claims)

    # Each feature on its own evidence: missing evidence is not engagement.
    evidence = record.get("evidence") or {}
    broken: dict[str, str] = {}
    for name in features:
        problem = evidence_problem(evidence.get(name))
        if problem:
            broken[name] = problem
    if record["status"] != "ok" and not broken:  # a failure the evidence does not explain
        for name in _named_features(record.get("error"), features) or features:
            broken[name] = f"{record['status']}: {record.get('error')}"
    on_cpu = not str(record.get("device") or "cuda").startswith("cuda")
    for name in features:
        if name in broken:
            verdict.feature_states[name] = "excused" if claims[name] is False else "not engaged"
        elif on_cpu and FEATURES[name].no_effect_on_cpu:
            verdict.feature_states[name] = "no effect"
            verdict.notes.append(f"{name} engaged, no effect on cpu: {FEATURES[name].no_effect_on_cpu}")
        elif isinstance(evidence[name].get("no_effect"), str):  # a no-op setting: what the pipeline already did
            verdict.feature_states[name] = "no effect"
            verdict.notes.append(f"{name} engaged, no effect: {evidence[name]['no_effect']}")
        elif FEATURES[name].family == "cache" and unchanged_output(record):  # a cache that changed nothing
            verdict.feature_states[name] = "no effect"
            verdict.notes.append(
                f"{name} engaged, no effect: the output is bit-identical to the baseline's (max_abs_diff 0.0), so no "
                "cached step changed what was computed"
            )
        else:
            verdict.feature_states[name] = "engaged"
        if name not in broken:
            breaks = graph_break_note(name, evidence[name])
            if breaks:
                verdict.notes.append(breaks)
            if isinstance(evidence[name].get("caveat"), str):  # what the library does that a reader must know
                verdict.notes.append(f"{name}: {evidence[name]['caveat']}")
    unexcused_engagement = [name for name in broken if claims[name] is not False]
    for name in unexcused_engagement:
        verdict.checks.append(Check(f"engagement of {name}", False, broken[name], "engaged on every timed run"))
    if not features:
        verdict.checks.append(Check("engagement", False, "no feature", "at least one feature to judge"))

    lossy = set(lossy_features(record))  # once: an older record's options are parsed to find it
    lossless = [name for name in features if name not in lossy]
    parity_checks = []
    no_reference = not_run(baseline) if baseline is not None else None
    if no_reference:
        # Nothing to compare against: one failed check says why (not SSIM and PSNR "measured –"), no claim
        # of the model excuses it, and the cell's parity stays unknown (None), not "out of parity".
        verdict.checks.append(Check("baseline", False, no_reference, "a measured baseline"))
    else:
        ssim_min, psnr_min, kind = required_parity(data, record, noise_floor, modality)
        parity_checks += parity_pair(kind, parity_of(record), ssim_min, psnr_min)
        parity_checks += combined_lossless_checks(data, record, noise_floor, modality, peers or [])
        if modality == VIDEO:  # the worst frame and the worst frame pair, named, besides the means
            parity_checks += video_checks(data, record, noise_floor)
        if lossless and (baseline or {}).get("outputs_stable") is False:  # nothing to be lossless against
            parity_checks.append(
                Check(
                    "output stability of the baseline, lossless",
                    False,
                    "the baseline's outputs differ between its own calls",
                    "a baseline identical every pass",
                )
            )
    if lossless and record.get("outputs_stable") is False:  # a lossless feature must be stable
        parity_checks.append(
            Check("output stability, lossless", False, "outputs differ between timed passes", "identical every pass")
        )
    verdict.in_parity = None if no_reference else all(c.ok for c in parity_checks)
    claimed = [name for name in features if claims[name] is False]
    unclaimed = [name for name in features if claims[name] is not False]
    parity_excused = verdict.in_parity is False and not unclaimed  # every feature of the cell claims it
    if parity_excused:
        for name in features:
            verdict.feature_states[name] = "excused"
        verdict.checks += [c for c in parity_checks if c.ok]
        verdict.reasons.append(
            "engaged but out of parity, as claimed unsupported ("
            + ", ".join(f"{c.name}: measured {fmt(c.measured, 4, significant=True)}" for c in parity_checks if not c.ok)
            + ")"
        )
    else:
        verdict.checks += parity_checks
        if verdict.in_parity is False and claimed:
            verdict.reasons.append(
                _excuse_note(claimed, unclaimed, "a combined cell cannot tell which feature lost parity: it counts for")
            )
    adherence = adherence_check(data, record)
    if adherence is not None:
        verdict.checks.append(adherence)
        if adherence.inconclusive and adherence.ok:  # accepted (adherence.inconclusive: warn), never silently
            verdict.findings.append(f"{verdict.key}: {adherence.line()}")
    if record.get("invalid_measurement"):
        verdict.checks.append(Check("timing validity", False, record["invalid_measurement"], "no step below its floor"))
    perf, notice = perf_check(data, record)
    if perf is not None:
        verdict.checks.append(perf)
    if notice:
        verdict.findings.append(notice)

    excused = [name for name in broken if claims[name] is False]
    if any(not c.ok for c in verdict.checks):
        verdict.outcome = FAIL
        # The feature's doing (a failed baseline is not).
        judged = ("SSIM", "PSNR", "temporal PSNR", "output stability", "engagement")
        if any(claims[name] for name in features) and any(
            not c.ok and c.name.startswith(judged) for c in verdict.checks
        ):
            verdict.reasons.insert(0, "claimed supported but out of parity or not engaged")
    elif excused or parity_excused:
        verdict.outcome, verdict.skip_kind = SKIP, EXPECTED
        if excused:
            verdict.reasons.insert(
                0, "not engaged, as claimed unsupported: " + "; ".join(f"{n}: {broken[n]}" for n in excused)
            )
    else:
        drift = [name for name in claimed if verdict.feature_states[name] in ("engaged", "no effect")]
        if drift:
            verdict.findings.append(
                f"docs drift: {record['model']} claims {', '.join(drift)} unsupported, "
                f"but {record['variant']} works within parity"
            )
    for note in verdict.notes:
        verdict.findings.append(f"{verdict.key}: {note}")
    return verdict


def graph_break_note(name: str, evidence: dict[str, Any]) -> str | None:
    """What a compiled cell's graph breaks were (``compile engaged with 8 graph breaks (20 graphs; 5 frames run
    eagerly: Data dependent operator, ...)``), or None without any: a supported compile that splits the denoiser
    into many graphs is not the one graph a reader assumes."""
    breaks = evidence.get("graph_breaks")
    if not isinstance(breaks, int) or isinstance(breaks, bool) or breaks <= 0:
        return None
    detail = [f"{evidence['unique_graphs']} graphs"] if isinstance(evidence.get("unique_graphs"), int) else []
    eager = evidence.get("eager_frames")
    if isinstance(eager, int) and eager > 0:
        reasons = ", ".join(str(r) for r in evidence.get("eager_reasons") or [])
        detail.append(f"{eager} frame(s) run eagerly" + (f": {reasons}" if reasons else ""))
    return f"{name} engaged with {breaks} graph break(s)" + (f" ({'; '.join(detail)})" if detail else "")


def unchanged_output(record: dict[str, Any]) -> bool:
    """Whether the cell's output is bit-identical to its baseline's (measured: a cell without parity is not)."""
    parity = parity_of(record)
    if "bit_identical" in parity:
        return parity["bit_identical"] is True
    return parity.get("max_abs_diff") == 0.0


def noise_floors(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model, the parity of the baseline's re-run against the baseline."""
    return {r["model"]: r["parity"] for r in records if is_noise_floor(r) and r.get("parity")}


def gate_reference(
    record: dict[str, Any], data: GateData, modality: str, baseline: dict[str, Any] | None = None
) -> CellVerdict:
    """The verdict on a model's baseline or its noise-floor re-run: every variant is measured against them.

    A reference that did not run (failed, crashed, timed out, or without timed outputs) fails: nothing of
    its model can be judged (one not runnable in this environment is skipped, as a variant would be). A
    baseline whose outputs differ between its own calls passes itself, with a finding; the lossless
    verdicts judged against it fail (``gate_cell``). A noise floor below ``lossless_minimum``: the baseline
    does not reproduce itself from a fresh load, which no threshold can absorb. A noise floor whose
    ``baseline`` (the model's baseline record) failed has nothing to be compared with: it fails saying so.
    """
    verdict = CellVerdict(record["model"], record["variant"], PASS)
    role = "noise-floor re-run of the baseline" if is_noise_floor(record) else "baseline"
    status = record["status"]
    if status == "unsupported" and record.get("unsupported_scope") == "environment":
        verdict.outcome, verdict.skip_kind = SKIP, ENVIRONMENT
        verdict.reasons.append(f"not run, unsupported here: {record.get('error')}")
        return verdict
    if status != "ok" or record.get("warm") is None:
        verdict.outcome = FAIL
        why = f"{status}: {record.get('error')}" if status != "ok" else "no timed outputs"
        verdict.reasons.append(f"{role} {why}: every cell of {record['model']} is measured against it")
        return verdict
    if record.get("outputs_stable") is False:
        verdict.findings.append(
            f"{verdict.key}: outputs differ between the {role}'s own calls: lossless verdicts against it fail"
        )
    lost = not_run(baseline) if baseline is not None and is_noise_floor(record) else None
    if lost:
        verdict.outcome = FAIL
        verdict.checks.append(Check("baseline", False, lost, "a measured baseline"))
        verdict.reasons.append(f"{role} not compared: the baseline it re-runs did not run")
        return verdict
    if is_noise_floor(record):
        parity = parity_of(record)
        minimum = data.thresholds["lossless_minimum"][modality]
        verdict.checks += parity_pair(
            f"{role} vs the baseline (lossless_minimum, {modality})",
            parity,
            float(minimum["ssim"]),
            float(minimum["psnr"]),
        )
        if any(not c.ok for c in verdict.checks):
            verdict.outcome = FAIL
            verdict.reasons.append("the baseline does not reproduce itself from a fresh load")
    verdict.in_parity = all(c.ok for c in verdict.checks)
    return verdict


def judge_records(
    records: list[dict[str, Any]],
    data: GateData,
    unmeasured: list[tuple[str, str]] | None = None,
    run: RunMeasure | None = None,
) -> GateReport:
    """The one judgement of a results file, shared by ``omni-accel gate``, the pytest plugin and the tables:
    a verdict on every record (the baselines and noise floors too: a failed reference fails the run) and
    on every ``unmeasured`` cell (planned by the run's profile, missing from its results: an interrupted
    sweep or a lost record never passes a gate). Its speed claims are the publishable ones
    (``with_publishable_claims``, against ``run``: what the run's profile asked, when it is known)."""
    floors = noise_floors(records)
    baselines = {r["model"]: r for r in records if r["variant"] == BASELINE}
    verdicts = []
    for record in records:
        modality = _modality(record)
        if is_reference(record):
            verdicts.append(gate_reference(record, data, modality, baselines.get(record["model"], NO_BASELINE)))
            continue
        baseline = baselines.get(record["model"], NO_BASELINE)
        verdicts.append(gate_cell(record, data, floors.get(record["model"]), modality, baseline, records))
    for model, variant in unmeasured or []:
        missing = CellVerdict(model, variant, FAIL)
        missing.reasons.append(
            "planned by the run's profile but not in its results: never measured (an interrupted sweep or a lost "
            "record); continue it with 'omni-accel sweep --resume RUN_DIR'"
        )
        verdicts.append(missing)
    claims = [
        (f"{r['model']}/{r['variant']}", r["speedup_ci"])
        for r in with_publishable_claims(records, claims_voided(verdicts), run)
        if r.get("speedup_ci") and not is_noise_floor(r)
    ]
    notices = unmatched_threshold_models(records, data) + unmatched_claim_models(records, data)
    notices += unmatched_baseline_entries(records, data)
    return GateReport(verdicts, notices, claims, nothing_measured=nothing_measured(records))


def nothing_measured(records: list[dict[str, Any]]) -> str | None:
    """Why the results measured nothing (no record ran: every one, the baselines included, unsupported here, or
    no record at all), or None when a cell ran. Every verdict of such a run is a skip, and "0 passed, 0 failed"
    is no qualification: a CI runner that lost its GPU was green. A run where some model measured something is
    judged as usual (families unavailable here are skipped)."""
    if any(r["status"] == "ok" for r in records):
        return None
    if not records:
        return "nothing was measured: the results hold no record"
    first = records[0]
    return (
        f"nothing was measured: none of the {len(records)} record(s) ran, the baselines included; the first, "
        f"{first['model']}/{first['variant']}, is {first['status']}: {first.get('error')}"
    )


# The gate's failed checks that void a cell's speed claim: the feature did not engage (the time is not its), the
# baseline it was timed against did not run, or a timed step fell below its floor. A parity, adherence or
# performance failure leaves the measured speed true: it is what the trade-off costs and is still shown.
CLAIM_VOIDING_CHECKS = ("engagement", "baseline", "timing validity")


def claims_voided(verdicts: list[CellVerdict]) -> dict[tuple[str, str], str]:
    """(model, variant) -> the failed checks, of every cell whose speed claim the gate's verdict voids
    (``CLAIM_VOIDING_CHECKS``): cells whose claims are not published."""
    voided = {}
    for v in verdicts:
        lines = [c.line() for c in v.checks if not c.ok and c.name.startswith(CLAIM_VOIDING_CHECKS)]
        if lines:
            voided[(v.model, v.variant)] = "; ".join(lines)
    return voided


def with_publishable_claims(
    records: list[dict[str, Any]],
    voided: dict[tuple[str, str], str] | None = None,
    run: RunMeasure | None = None,
) -> list[dict[str, Any]]:
    """The records with each claim (``speedup_ci``) as it may be published (``publishable_claim``, against its
    model's noise-floor record in the same list, the gate's failed checks that void a cell's claim
    (``voided``, by (model, variant): ``claims_voided``) and what the run's profile asked (``run``)): what
    the gate's "Speed claims" and every generated table show, so a results file read on its own never
    publishes more than its noise floor verifies."""
    floor_records = {r["model"]: r for r in records if is_noise_floor(r)}
    voided = voided or {}
    return [
        {
            **r,
            "speedup_ci": publishable_claim(
                r, floor_records.get(r["model"]), voided=voided.get((r["model"], r["variant"])), run=run
            ),
        }
        if r.get("speedup_ci") and not is_noise_floor(r)
        else r
        for r in records
    ]


def _not_published(claim: dict[str, Any], reason: str) -> dict[str, Any]:
    """``claim`` shown as nothing verified it: an equivalence as ``noise`` (``≈1.0x?``), a speedup ``unverified``;
    its interval kept."""
    from accel.measure.speedup import EQUIVALENT, NOISE, UNVERIFIED

    return {**claim, "verdict": NOISE if claim.get("verdict") == EQUIVALENT else UNVERIFIED, "reason": reason}


def _noise_band_of(band: Any) -> tuple[float, float] | None:
    """``band`` when it is a noise band ``1/(1+t) .. 1+t`` with ``0 < t < 1`` (measure.min_effect's range)."""
    import math

    if not (isinstance(band, (list, tuple)) and len(band) == 2):
        return None
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in band):
        return None
    low, high = float(band[0]), float(band[1])
    return (low, high) if 0 < high - 1 < 1 and math.isclose(low, 1 / high, rel_tol=1e-9) else None


def _same_band(band: tuple[float, float], other: tuple[float, float]) -> bool:
    import math

    return all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(band, other, strict=True))


def claim_settings_problem(claim: dict[str, Any], floor_claim: dict[str, Any], run: RunMeasure | None) -> str | None:
    """Why a claim was not judged as its run asked, or None: its band must be a noise band
    (``1/(1+t) .. 1+t``, ``0 < t < 1``: measure.min_effect's range) and its confidence in measure.confidence's
    range (0.5, 1), both the same as its noise floor's and, when the run's profile is known (``run``), as the
    profile's. An edited record that widens its band or lowers its confidence publishes nothing."""
    band = _noise_band_of(claim.get("band"))
    if band is None:
        return f"its band {claim.get('band')} is not a noise band 1/(1+t)..1+t with 0 < t < 1 (measure.min_effect)"
    confidence = claim.get("requested_confidence", DEFAULT_CONFIDENCE)
    if isinstance(confidence, bool) or not (isinstance(confidence, (int, float)) and 0.5 < confidence < 1):
        return f"its confidence {confidence} is outside measure.confidence's range (0.5, 1)"
    floor_band = _noise_band_of(floor_claim.get("band"))
    if floor_band is None or not _same_band(band, floor_band):
        return f"its band {list(band)} is not its noise floor's ({floor_claim.get('band')}): they were not judged alike"
    floor_confidence = floor_claim.get("requested_confidence", DEFAULT_CONFIDENCE)
    if floor_confidence != confidence:
        return f"its confidence {confidence} is not its noise floor's ({floor_confidence}): they were not judged alike"
    if run is None:
        return None
    if not _same_band(band, run.band):
        expected = f"{run.band[0]:.6g}..{run.band[1]:.6g}"
        return f"its band {list(band)} is not the run's ({expected}, from profile.resolved.yaml's measure.min_effect)"
    if confidence != run.confidence:
        asked = f"{run.confidence}, profile.resolved.yaml's measure.confidence"
        return f"its confidence {confidence} is not the run's ({asked})"
    return None


def publishable_claim(
    record: dict[str, Any],
    floor: dict[str, Any] | None,
    *,
    voided: str | None = None,
    run: RunMeasure | None = None,
) -> dict[str, Any]:
    """A record's claim (its ``speedup_ci``) as the gate may publish it, judged again from the pairs.

    Only a measured variant that ran (status ok) and whose gate verdict does not void its timing (``voided``:
    the failed checks, ``claims_voided``: a feature that did not engage, a baseline that did not run, a step
    below its floor) makes a claim: the baseline and noise floor are the references. Without a noise-floor
    record that ran in the same results (removed, failed or not timed), a speedup or an equivalence is
    verified by nothing and is shown ``unverified`` (an equivalence ``noise``). A faster/slower/equivalent
    verdict stands only when the record's own pairs give it (``verdict_from_pairs``: an edited interval or
    verdict, or pairs and looks removed, do not) and the floor's recorded verdict is what its pairs give,
    both judged with the same band and confidence, the run's when known (``run``; ``claim_settings_problem``);
    then ``against_noise_floor`` applies as at measurement, the floor's possible bias (``floor_bias_of``)
    computed again from both records' pairs.
    """
    from accel.measure.speedup import (
        DECIDED,
        EQUIVALENT,
        FASTER,
        NOISE,
        SLOWER,
        UNVERIFIED,
        SpeedupClaim,
        against_noise_floor,
        floor_bias_of,
        verdict_from_pairs,
    )

    claim: dict[str, Any] = record["speedup_ci"]
    verdict = claim.get("verdict")
    if verdict not in DECIDED:
        return claim
    if is_reference(record):
        return _not_published(claim, "a reference cell (the baseline or its noise floor) makes no speed claim")
    lost = not_run(record)
    if lost:
        return _not_published(claim, f"the cell did not run ({lost}): it claims nothing")
    if voided is not None:
        return _not_published(claim, f"the gate failed the cell's timing ({voided}): its claim is not published")
    ran = floor is not None and floor.get("status") == "ok" and bool(floor.get("warm"))
    floor_ci = floor.get("speedup_ci") if floor is not None and ran else None
    if not floor_ci or floor_ci.get("verdict") is None:
        reason = (
            "no noise-floor record that ran in these results (removed, failed, or measure.noise_floor off): nothing "
            "shows identical configurations land inside the noise band, so no claim is verified"
        )
        return _not_published(claim, reason)
    own_reason = claim.get("reason") or ""
    settings_problem = claim_settings_problem(claim, floor_ci, run)
    if settings_problem:
        return _not_published(claim, f"{own_reason}, but {settings_problem}: no claim is verified")
    confidence = claim.get("requested_confidence", DEFAULT_CONFIDENCE)
    from_pairs, why = verdict_from_pairs(claim, record.get("paired"), confidence)
    if from_pairs != verdict:
        why = why if from_pairs == UNVERIFIED else f"its pairs give {from_pairs} ({why})"
        return _not_published(claim, f"{own_reason}, but {why}: the gate publishes what they show")
    floor_confidence = floor_ci.get("requested_confidence", DEFAULT_CONFIDENCE)
    floor_from_pairs, floor_why = verdict_from_pairs(floor_ci, floor.get("paired") if floor else None, floor_confidence)
    if floor_from_pairs != floor_ci["verdict"]:
        floor_why = floor_why if floor_from_pairs == UNVERIFIED else f"its pairs give {floor_from_pairs} ({floor_why})"
        reason = (
            f"{own_reason}, but the noise floor recorded {floor_ci['verdict']} and {floor_why}: no claim is verified"
        )
        return _not_published(claim, reason)
    band = (float(claim["band"][0]), float(claim["band"][1]))
    floor_claim = SpeedupClaim(floor_ci["verdict"], floor_ci.get("reason") or "", None)
    floor_bias = None
    if floor_claim.verdict in (EQUIVALENT, NOISE) and verdict in (FASTER, SLOWER):
        floor_bias = floor_bias_of(record.get("paired"), floor.get("paired") if floor else None, band, confidence)
    judged = against_noise_floor(SpeedupClaim(str(verdict), own_reason, band), floor_claim, floor_bias)
    if judged.verdict == verdict:
        return claim
    return {**claim, "verdict": judged.verdict, "reason": judged.reason}


# The name the CLI, tables and older callers know.
gate_records = judge_records


def _modality(record: dict[str, Any]) -> str:
    return record.get("modality") or "image"
