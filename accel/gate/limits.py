"""What a measured cell must reach: parity limits by class (lossless by dtype and modality, loosened by a
noise floor down to ``lossless_minimum``; lossy by family; a lossless feature beside lossy ones held to its
own class), the bound on a lossy variant's loss of prompt adherence, the performance baseline's latency
check, and notices for threshold overrides or baseline entries that matched no measured cell."""

from __future__ import annotations

import math
from typing import Any

from accel.errors import ConfigError, did_you_mean
from accel.gate.data import GateData
from accel.gate.verdict import Check
from accel.report.format import fmt, percent
from accel.results import feature_options, is_noise_floor, lossy_features, parity_of

# Engines return 8-bit images: the precision their outputs deliver, whatever dtype they computed in.
EIGHT_BIT = "uint8"


def output_precision(record: dict[str, Any]) -> str:
    """The dtype the cell computed in (``float32`` when the record does not say)."""
    return record.get("dtype") or "float32"


def lossy_families(record: dict[str, Any]) -> list[str]:
    """The families of the cell's lossy features, sorted (none for a lossless cell)."""
    from accel.features import FEATURES

    return sorted({FEATURES[name].family for name in lossy_features(record)})


def declared_lossy_limits() -> dict[str, dict[str, float]]:
    """Per family, the parity limits its features declare (``Feature.lossy_limits``; the loosest when they
    differ): the defaults ``thresholds.yaml``'s ``lossy`` section overrides."""
    from accel.features import FEATURES

    limits: dict[str, dict[str, float]] = {}
    for feature in FEATURES.values():
        own = feature.lossy_limits
        if own is None:
            continue
        known = limits.get(feature.family)
        if known is None:
            limits[feature.family] = {"ssim": own.ssim, "psnr": own.psnr}
        else:
            limits[feature.family] = {"ssim": min(known["ssim"], own.ssim), "psnr": min(known["psnr"], own.psnr)}
    return limits


def declared_adherence_limits() -> dict[str, float]:
    """Per family, the most adherence loss its features declare (the loosest), overridden by
    ``thresholds.yaml``'s ``adherence.lossy``."""
    from accel.features import FEATURES

    limits: dict[str, float] = {}
    for feature in FEATURES.values():
        own = feature.lossy_limits
        if own is not None and own.adherence_loss is not None:
            limits[feature.family] = max(limits.get(feature.family, 0.0), own.adherence_loss)
    return limits


def required_parity(
    data: GateData, record: dict[str, Any], noise_floor: dict[str, Any] | None, modality: str
) -> tuple[float, float, str]:
    """(SSIM, PSNR, description) a cell must reach.

    Lossy: the loosest of the lossy families in the cell. Lossless: ``lossless_limits``. A lossless feature
    beside lossy ones is held to its own class as well (``combined_lossless_checks``).
    """
    overrides = (data.thresholds.get("models") or {}).get(record["model"]) or {}
    lossy = {**declared_lossy_limits(), **data.thresholds["lossy"], **(overrides.get("lossy") or {})}
    families = lossy_families(record)
    if families:
        missing = [f for f in families if f not in lossy]
        if missing:
            raise ConfigError(
                f"{data.source}: lossy: no parity thresholds for family '{missing[0]}' "
                f"({record['model']}/{record['variant']} is lossy through it): add lossy.{missing[0]}: "
                "{ssim: ..., psnr: ...} or declare lossy_limits on its feature"
            )
        limits = [lossy[f] for f in families]
        ssim = min(float(x["ssim"]) for x in limits)
        psnr = min(float(x["psnr"]) for x in limits)
        return ssim, psnr, f"lossy ({', '.join(families)})"
    return lossless_limits(data, record, noise_floor, modality)


def lossless_limits(
    data: GateData, record: dict[str, Any], noise_floor: dict[str, Any] | None, modality: str
) -> tuple[float, float, str]:
    """(SSIM, PSNR, description) of the lossless class for this cell: the dtype's threshold (for an engine's
    8-bit output, no stricter than ``uint8``'s), loosened by a measured noise floor but never below
    ``lossless_minimum`` (nor below the dtype's own threshold when that is lower)."""
    overrides = (data.thresholds.get("models") or {}).get(record["model"]) or {}
    lossless = data.thresholds["lossless"]
    own = overrides.get("lossless") or {}
    precision = output_precision(record)
    if precision not in lossless:
        raise ConfigError(
            f"{data.source}: lossless: no thresholds for dtype '{precision}' ({record['model']}/{record['variant']}). "
            f"Allowed: {', '.join(lossless)}"
        )
    limit = {**lossless[precision][modality], **((own.get(precision) or {}).get(modality) or {})}
    ssim, psnr = float(limit["ssim"]), float(limit["psnr"])
    kind = f"lossless ({modality}, {precision})"
    if record.get("engine") and EIGHT_BIT in lossless:  # 8-bit images cannot agree better than their rounding
        ssim = min(ssim, float(lossless[EIGHT_BIT][modality]["ssim"]))
        psnr = min(psnr, float(lossless[EIGHT_BIT][modality]["psnr"]))
        kind = f"lossless ({modality}, {precision}, 8-bit output)"
    if noise_floor:  # a noisy baseline loosens the threshold, down to the stated minimum at most
        minimum = data.thresholds["lossless_minimum"][modality]
        floor_ssim, floor_psnr = min(ssim, noise_floor["ssim"]), min(psnr, noise_floor["psnr"])
        if (floor_ssim, floor_psnr) != (ssim, psnr):
            kind += ", loosened by the noise floor"
        ssim = max(floor_ssim, min(ssim, float(minimum["ssim"])))
        psnr = max(floor_psnr, min(psnr, float(minimum["psnr"])))
    return ssim, psnr, kind


def limit_text(value: float) -> str:
    """A required value as the gate prints it: enough digits to show the real limit (0.99999, not 1)."""
    return fmt(float(value), 6, significant=True)


def parity_pair(name: str, parity: dict[str, Any], ssim_min: float, psnr_min: float) -> list[Check]:
    """SSIM and PSNR of ``parity`` against their limits (a missing value is never in parity)."""
    ssim, psnr = parity.get("ssim"), parity.get("psnr")
    return [
        Check(f"SSIM, {name}", ssim is not None and ssim >= ssim_min, ssim, f">= {limit_text(ssim_min)}"),
        Check(f"PSNR dB, {name}", psnr is not None and psnr >= psnr_min, psnr, f">= {limit_text(psnr_min)}"),
    ]


def lossy_part(record: dict[str, Any], peers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The measured cell of the same model whose features are exactly this cell's lossy ones, with the same
    options (``int8wo`` for ``int8wo + _native_math``), or None."""
    lossy = set(lossy_features(record))
    wanted = {name: value for name, value in feature_options(record).items() if name in lossy}
    for peer in peers:
        if peer is record or peer["model"] != record["model"] or peer["variant"] == record["variant"]:
            continue
        if feature_options(peer) == wanted and peer.get("status") == "ok" and parity_of(peer):
            return peer
    return None


def combined_lossless_checks(
    data: GateData,
    record: dict[str, Any],
    noise_floor: dict[str, Any] | None,
    modality: str,
    peers: list[dict[str, Any]],
) -> list[Check]:
    """A lossless feature beside lossy ones is held to its own class, not to the lossy limits of the cell.

    With a cell of the lossy features alone (``lossy_part``) the lossless features may add no more error than
    their class allows: RMS errors add at most (triangle inequality), so the cell's PSNR must reach
    ``-20 log10(10^(-P_part/20) + 10^(-P_lossless/20))`` and its SSIM ``S_part - (1 - S_lossless)``. Without
    one nothing separates the features: the cell is held to the lossless limits against the baseline."""
    lossy = set(lossy_features(record))
    lossless = [name for name in feature_options(record) if name not in lossy]
    if not lossy or not lossless:
        return []
    ssim_ll, psnr_ll, kind = lossless_limits(data, record, noise_floor, modality)
    names = ", ".join(lossless)
    part = lossy_part(record, peers)
    if part is None:
        beside = ", ".join(sorted(lossy))
        return parity_pair(
            f"{names} {kind} (no cell of {beside} alone to separate it: against the baseline)",
            parity_of(record),
            ssim_ll,
            psnr_ll,
        )
    reached = parity_of(part)
    part_psnr, part_ssim = float(reached["psnr"]), float(reached["ssim"])
    rms = 10 ** (-part_psnr / 20) + 10 ** (-psnr_ll / 20)
    psnr_min = -20 * math.log10(rms) if rms > 0 else math.inf
    ssim_min = part_ssim - (1 - ssim_ll)
    return parity_pair(f"{names} {kind} beside {part['variant']}", parity_of(record), ssim_min, psnr_min)


def baseline_device(record: dict[str, Any], devices: dict[str, Any]) -> str | None:
    """The key of ``devices`` (a performance baseline's) that matches the record's device, or None.

    Most specific first: the device name exactly (``NVIDIA H200``, a CPU model), then a key contained in
    it (``H200``; the longest wins), then the device kind (``cpu``, ``cuda``)."""
    name = (record.get("device_name") or "").lower()
    kind = (record.get("device") or "").split(":")[0].lower()
    keys = {str(key).lower(): key for key in devices}
    if name and name in keys:
        return keys[name]
    contained = [key for low, key in keys.items() if name and low in name and low not in ("cpu", "cuda")]
    if contained:
        return max(contained, key=lambda key: len(str(key)))
    return keys.get(kind)


def adherence_check(data: GateData, record: dict[str, Any]) -> Check | None:
    """Bound a lossy variant's loss of prompt adherence (models with a ground truth) by ``adherence.lossy``.

    The limit is by lossy family (a mix takes the loosest); None when the cell has no adherence loss, no
    lossy feature or no limit for its families. A paired loss is judged by its 95% Wilson interval over the
    *images* (``accel.measure.adherence.loss_interval``: an image's attributes are not independent trials, so
    counting them would read one flipped image as evidence): wholly above the limit fails, wholly within
    passes, straddling it is inconclusive (``n images, run more prompts``). An inconclusive loss measured above
    the limit fails whatever the rule (the measurement says lost, and nothing shows otherwise: a FirstBlockCache
    losing 0.089 over 96 images, interval 0.047-0.163, passed a 0.05 limit under ``warn``); one measured within
    it fails unless the thresholds say ``adherence.inconclusive: warn``. At zero loss the interval's top is
    ``3.84 / (n + 3.84)``: a limit of 0.05 needs 73 images to pass. A record without the images (before schema
    3: the net change) is judged on its point estimate, and the check's name says so.
    """
    from accel.features import FEATURES
    from accel.measure.adherence import loss_images, loss_interval

    loss = record.get("adherence_loss")
    model = (data.thresholds.get("models") or {}).get(record["model"]) or {}
    limits = {
        **declared_adherence_limits(),
        **(((data.thresholds.get("adherence") or {}).get("lossy")) or {}),
        **(((model.get("adherence") or {}).get("lossy")) or {}),
    }
    if loss is None or not limits:
        return None
    families = {FEATURES[name].family for name in lossy_features(record)}
    bounds = [float(limits[f]) for f in families if f in limits]
    if not bounds:
        return None
    limit = max(bounds)
    # Records before schema 3 (or a variant resumed beside an older baseline) carry the net change of overall
    # adherence, which lets gains on some images offset losses on others: the check says which it is.
    paired = (record.get("adherence") or {}).get("vs_baseline")
    required = f"<= {fmt(limit, 4, significant=True)} (lossy)"
    images = loss_images(record)
    if images is None:
        name = "adherence loss vs baseline" + ("" if paired else " (net change: no per-image scores)")
        return Check(name, loss <= limit + 1e-9, loss, required)
    low, high = loss_interval(float(loss), images)
    name = f"adherence loss vs baseline (95% interval {fmt(low, 3)}-{fmt(high, 3)} over {images} images)"
    if low > limit + 1e-9:
        return Check(name, False, loss, required)
    if high <= limit + 1e-9:
        return Check(name, True, loss, required)
    if loss > limit + 1e-9:  # measured over the limit, not yet significant: no rule passes it
        why = f"measured above the limit, not significant over {images} images: run more prompts"
        return Check(name, False, loss, required, inconclusive=why)
    own = (model.get("adherence") or {}).get("inconclusive")
    rule = own or (data.thresholds.get("adherence") or {}).get("inconclusive")
    accepted = rule == "warn"
    why = f"{images} images, run more prompts" + ("" if accepted else " (or accept with adherence.inconclusive: warn)")
    return Check(name, accepted, loss, required, inconclusive=why)


def perf_check(data: GateData, record: dict[str, Any]) -> tuple[Check | None, str | None]:
    """The warm median against the performance baseline's entry for this device, model and variant (None
    without a baseline, a warm median or a matching entry), and a notice when it is faster by more than
    ``refresh_if_faster_by``: refresh the baseline."""
    if not data.perf or record.get("warm") is None:
        return None, None
    devices = data.perf.get("devices") or {}
    device = baseline_device(record, devices)
    if device is None:
        return None, None
    base = (devices[device] or {}).get(record["model"], {}).get(record["variant"])
    if base is None:
        return None, None
    rel = float(data.perf.get("rel_tolerance", 0.15))
    absolute = float(data.perf.get("abs_tolerance_s", 0.005))
    refresh = float(data.perf.get("refresh_if_faster_by", 0.2))
    measured = record["warm"]["median"]
    limit = max(base * (1 + rel), base + absolute)
    check = Check(
        "warm latency (s)",
        measured <= limit,
        measured,
        f"<= {fmt(limit, 4, significant=True)} (baseline {fmt(base, 4, significant=True)} on {device})",
    )
    notice = None
    if measured < base * (1 - refresh):
        notice = (
            f"{record['model']}/{record['variant']}: faster than the stored baseline by "
            f"{percent(1 - measured / base)} (> {percent(refresh)}): refresh the baseline"
        )
    return check, notice


def unmatched_threshold_models(records: list[dict[str, Any]], data: GateData) -> list[str]:
    """A notice for every per-model threshold override (``models.<name>``) that names no model of the results:
    a misspelt name would otherwise leave that model on the defaults without a word."""
    measured = sorted({str(r["model"]) for r in records})
    return [
        f"{data.source}: models.{name} matched no model of these results (models here: {', '.join(measured)}): "
        f"its overrides were not used.{did_you_mean(name, measured)}"
        for name in (data.thresholds.get("models") or {})
        if str(name) not in measured
    ]


def unmatched_claim_models(records: list[dict[str, Any]], data: GateData) -> list[str]:
    """A notice for every model of a claims file the user gave (``--claims``) that names no model of the results:
    a misspelt name would otherwise leave that model's cells judged with no claim, without a word. The shipped
    claims cover the whole zoo, so a run of some of its models is not told about the others."""
    if data.claims_source is None:
        return []
    measured = sorted({str(r["model"]) for r in records})
    return [
        f"{data.claims_source}: models.{name} matched no model of these results (models here: "
        f"{', '.join(measured)}): its claims were not used.{did_you_mean(str(name), measured)}"
        for name in data.claims
        if str(name) not in measured
    ]


def unmatched_baseline_entries(records: list[dict[str, Any]], data: GateData) -> list[str]:
    """A notice for every performance-baseline entry that matched no measured cell."""
    if not data.perf:
        return []
    devices = data.perf.get("devices") or {}
    matched = {
        (baseline_device(r, devices), r["model"], r["variant"])
        for r in records
        if r.get("warm") is not None and not is_noise_floor(r)
    }
    here = sorted({f"{r.get('device') or '?'} '{r.get('device_name') or '?'}'" for r in records if r.get("warm")})
    notices = []
    for device, models in devices.items():
        for model, variants in (models or {}).items():
            for variant in variants or {}:
                if (device, model, variant) not in matched:
                    notices.append(
                        f"performance baseline devices.{device}.{model}.{variant} matched no measured cell "
                        f"(devices measured here: {', '.join(here) or 'none'}): it was not checked"
                    )
    return notices
