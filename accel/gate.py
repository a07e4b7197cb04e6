"""Parity, engagement, claim and performance gates over measured results.

One module shared by ``omni-accel gate`` and the pytest plugin. It reads results and data files and
never runs a pipeline. Each measured cell (not the baseline or its noise-floor re-run) gets a
``CellVerdict``: pass, fail or skip, with every check's measured and required values.

- Each feature of a cell is judged on its own evidence: a feature without evidence, or whose evidence
  says it did not engage, fails (never ``all([])``). A feature that engaged but cannot have its intended
  effect on this device (offload on a CPU) is labelled so, not counted as a plain success.
- Parity: lossless thresholds by the dtype the cell ran in and its modality, lossy by family (the loosest
  family for a mix), from ``feature_matrix/thresholds.yaml``. A measured noise floor (the baseline against
  its own re-run) loosens a lossless threshold, never below ``lossless_minimum``. Outputs that differ
  between timed passes (``outputs_stable`` false) fail lossless parity. SSIM is always checked.
- Claims (``feature_matrix/claims.yaml``) excuse only their own feature: a crash nobody can attribute,
  a parity loss in a combined cell, or another feature that did not engage still fails. A failure the
  claims fully explain is an expected failure (skipped, with the reason); works within parity but claimed
  unsupported -> a docs-drift finding; claimed supported but failed -> fail.
- A cell that did not run is never a pass: unsupported in this environment (no GPU, package missing) or
  on this model, it is skipped with its reason (fail when the model claims the feature supported).
- Performance (optional ``--baseline``): entries keyed by device name (exact, then a substring such as
  ``H200`` of ``NVIDIA H200``, then ``cpu``/``cuda``); warm median within ``max(base * (1 + rel), base +
  abs)``; faster by more than ``refresh`` -> a notice to refresh it; an entry that matches no measured
  cell -> a notice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, did_you_mean, unknown_choice
from accel.report.format import fmt, percent, table_lines
from accel.results import declared_tag, feature_options, is_noise_floor, lossy_features, parity_of

PASS, FAIL, SKIP = "pass", "fail", "skip"
# Why a cell was skipped: it could not run here, the model does not support it, or it failed as claimed.
ENVIRONMENT, UNSUPPORTED, EXPECTED = "environment", "unsupported", "expected"
MODALITIES = ("image", "video")
# Engines return 8-bit images: the precision their outputs deliver, whatever dtype they computed in.
EIGHT_BIT = "uint8"


@dataclass
class Check:
    """One comparison of a measured value with a required one."""

    name: str
    ok: bool
    measured: Any
    required: str

    def line(self) -> str:
        return f"{self.name}: measured {fmt(self.measured, 4, significant=True)}, required {self.required}"


@dataclass
class CellVerdict:
    """The gate's verdict on one cell.

    ``skip_kind`` says why a skipped cell is skipped (``environment``, ``unsupported``: it did not run;
    ``expected``: it failed the way the model's claims say). ``feature_states`` holds each feature's own
    state: ``engaged``, ``no effect`` (engaged, but nothing it could do on this device, or a setting the
    pipeline already had), ``not engaged``, ``excused`` (did not engage or broke parity, as claimed
    unsupported) or ``not run``.
    """

    model: str
    variant: str
    outcome: str
    in_parity: bool | None = None  # None when the cell produced no output to compare
    checks: list[Check] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    skip_kind: str | None = None
    feature_states: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.variant}"

    def message(self) -> str:
        """Every failed check and reason on its own line, with measured and required values."""
        lines = [*self.reasons, *(c.line() for c in self.checks if not c.ok)]
        return "\n".join(lines) or "ok"

    @property
    def no_effect(self) -> list[str]:
        """Features that engaged but could not have their intended effect on this device."""
        return [name for name, state in self.feature_states.items() if state == "no effect"]


@dataclass(frozen=True)
class GateData:
    """Thresholds, claims and an optional performance baseline (``source``: the thresholds file, for errors)."""

    thresholds: dict[str, Any]
    claims: dict[str, Any]
    perf: dict[str, Any] | None = None
    source: str = "feature_matrix/thresholds.yaml"


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    """A gate data file through the project's one YAML loader (UTF-8, no duplicate keys, a mapping); NaN is left
    to the range checks, which name the allowed values."""
    from accel.yaml_bounds import load_yaml_file

    data: dict[str, Any] = load_yaml_file(path, what, ranges_checked=True)
    return data


def load_gate_data(
    thresholds: Path | None = None, claims: Path | None = None, baseline: Path | None = None
) -> GateData:
    """Read the gate's data files (defaults: the shipped ``feature_matrix/`` files), each checked whole before
    any cell is judged: a bad value is a one-line ConfigError naming the file, the key and what is allowed."""
    from accel.data import data_dir

    matrix = data_dir("feature_matrix")
    threshold_path = thresholds or matrix / "thresholds.yaml"
    threshold_data = _read_yaml(threshold_path, "thresholds")
    check_thresholds(threshold_data, str(threshold_path))
    claims_path = claims or matrix / "claims.yaml"
    claims_data = _read_yaml(claims_path, "claims")
    check_claims(claims_data, str(claims_path))
    perf = _read_yaml(baseline, "performance baseline") if baseline else None
    if perf is not None:
        check_perf_baseline(perf, str(baseline))
    return GateData(threshold_data, claims_data.get("models") or {}, perf, str(threshold_path))


CLAIM_KEYS = ("supported", "note")


def check_claims(data: dict[str, Any], source: str) -> None:
    """The claims file's shape: ``models.<model>.<feature>``, each ``true``/``false`` or ``{supported: bool,
    note: text}``; the feature a registered one. ``supported: maybe`` used to count as claimed (any non-empty
    text is true) and a misspelt feature claimed nothing, silently."""
    from accel.features import FEATURES

    for key in data:
        if key != "models":
            raise ConfigError(f"{source}: {unknown_choice('key', key, ['models'])}")
    models = data.get("models")
    if models is None:
        return
    if not isinstance(models, dict):
        raise ConfigError(f"{source}: models: expected a mapping of model name to claims, got {models!r}")
    for model, claims in models.items():
        where = f"{source}: models.{model}"
        if claims is None:
            continue
        if not isinstance(claims, dict):
            raise ConfigError(f"{where}: expected a mapping of feature name to a claim, got {claims!r}")
        for feature, claim in claims.items():
            if feature not in FEATURES:
                raise ConfigError(f"{where}: {unknown_choice('feature', feature, FEATURES)}")
            if isinstance(claim, bool):
                continue
            allowed = "true, false or {supported: true|false, note: <text>}"
            if not isinstance(claim, dict):
                raise ConfigError(f"{where}.{feature}: {claim!r} is not a claim (allowed: {allowed})")
            for key, value in claim.items():
                if key not in CLAIM_KEYS:
                    raise ConfigError(f"{where}.{feature}: {unknown_choice('key', key, CLAIM_KEYS)}")
                if key == "supported" and not isinstance(value, bool):
                    raise ConfigError(f"{where}.{feature}.supported: {value!r} is not allowed (allowed: true, false)")
                if key == "note" and not isinstance(value, str):
                    raise ConfigError(f"{where}.{feature}.note: expected a text, got {value!r}")


# The defaults _perf_check uses when a baseline leaves a tolerance out.
PERF_TOLERANCES = {"rel_tolerance": 0.15, "abs_tolerance_s": 0.005, "refresh_if_faster_by": 0.2}
PERF_KEYS = (*PERF_TOLERANCES, "devices")


def check_perf_baseline(data: dict[str, Any], source: str) -> None:
    """A performance baseline's shape: the tolerances (finite numbers >= 0; ``refresh_if_faster_by`` below 1)
    and ``devices.<device>.<model>.<variant>``: a warm median in seconds, a finite number > 0. A negative
    tolerance, text or a list used to pass every cell or end in a traceback."""
    import math

    for key in data:
        if key not in PERF_KEYS:
            raise ConfigError(f"{source}: {unknown_choice('key', key, PERF_KEYS)}")
    for key in PERF_TOLERANCES:
        if key not in data:
            continue
        high = 1.0 if key == "refresh_if_faster_by" else math.inf
        value = data[key]
        if not _in_range(value, 0.0, high) or value == high:
            upper = " and < 1" if key == "refresh_if_faster_by" else ""
            raise ConfigError(f"{source}: {key}: {value!r} is not allowed: expected a number >= 0{upper}")
    devices = data.get("devices")
    if devices is None:
        return
    if not isinstance(devices, dict):
        raise ConfigError(
            f"{source}: devices: expected a mapping of device to model to variant to seconds, got {devices!r}"
        )
    for device, models in devices.items():
        if not isinstance(models, dict):
            raise ConfigError(f"{source}: devices.{device}: expected a mapping of model to variants, got {models!r}")
        for model, variants in models.items():
            where = f"{source}: devices.{device}.{model}"
            if not isinstance(variants, dict):
                raise ConfigError(f"{where}: expected a mapping of variant to seconds, got {variants!r}")
            for variant, seconds in variants.items():
                if not _in_range(seconds, 0.0, math.inf) or seconds == 0:
                    raise ConfigError(
                        f"{where}.{variant}: {seconds!r} is not allowed: expected the warm median latency in "
                        "seconds, a number > 0"
                    )


def _in_range(value: Any, low: float, high: float = float("inf")) -> bool:
    """Whether ``value`` is a number (not a bool) from ``low`` to ``high``; NaN fails every comparison."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= float(value) <= high


def _check_limit_value(key: str, value: Any, where: str) -> None:
    """An SSIM limit is a number from 0 to 1; a PSNR limit a number >= 0 dB (inf: bit-identical). NaN never."""
    allowed = _in_range(value, 0.0, 1.0) if key == "ssim" else _in_range(value, 0.0)
    if not allowed:
        what = "a number from 0 to 1" if key == "ssim" else "a number of dB >= 0 (inf: bit-identical)"
        raise ConfigError(f"{where}.{key}: {value!r} is not allowed: expected {what}")


def _check_limit(value: Any, where: str, partial: bool = False) -> None:
    """``{ssim, psnr}`` (both, unless ``partial``: an override may give one), each in its range."""
    keys = {"ssim", "psnr"}
    if not isinstance(value, dict) or (not partial and not keys <= set(value)) or set(value) - keys or not value:
        wanted = "a mapping with keys ssim and/or psnr" if partial else "a mapping with keys ssim and psnr"
        raise ConfigError(f"{where}: expected {wanted}, got {value!r}")
    for key, limit in value.items():
        _check_limit_value(key, limit, where)


MODEL_OVERRIDE_KEYS = ("lossy", "lossless", "adherence")


def _check_model_overrides(models: Any, lossless_dtypes: list[str], source: str) -> None:
    """``models.<model>``: ``lossy.<family>`` {ssim, psnr}, ``lossless.<dtype>.<modality>`` {ssim and/or psnr},
    ``adherence.lossy.<family>``; the same rules as the file's own sections."""
    if models is None:
        return
    if not isinstance(models, dict):
        raise ConfigError(f"{source}: models: expected a mapping of model name to overrides, got {models!r}")
    for model, overrides in models.items():
        where = f"{source}: models.{model}"
        if not isinstance(overrides, dict):
            raise ConfigError(
                f"{where}: expected a mapping with keys {', '.join(MODEL_OVERRIDE_KEYS)}, got {overrides!r}"
            )
        for key in overrides:
            if key not in MODEL_OVERRIDE_KEYS:
                raise ConfigError(f"{where}: {unknown_choice('key', key, MODEL_OVERRIDE_KEYS)}")
        lossy = {} if overrides.get("lossy") is None else overrides["lossy"]  # [] or 0 is a mistake, not "none"
        if not isinstance(lossy, dict):
            raise ConfigError(f"{where}.lossy: expected a mapping of feature family to {{ssim, psnr}}, got {lossy!r}")
        for family, limit in lossy.items():
            _check_family(family, f"{where}.lossy.{family}")
            _check_limit(limit, f"{where}.lossy.{family}")
        lossless = {} if overrides.get("lossless") is None else overrides["lossless"]
        if not isinstance(lossless, dict):
            raise ConfigError(f"{where}.lossless: expected a mapping of dtype to modality to limits, got {lossless!r}")
        for dtype, by_modality in lossless.items():
            if dtype not in lossless_dtypes:
                raise ConfigError(f"{where}.lossless: {unknown_choice('dtype', dtype, lossless_dtypes)}")
            if not isinstance(by_modality, dict):
                raise ConfigError(f"{where}.lossless.{dtype}: expected a mapping of modality to limits")
            for modality, limit in by_modality.items():
                if modality not in MODALITIES:
                    raise ConfigError(f"{where}.lossless.{dtype}: {unknown_choice('modality', modality, MODALITIES)}")
                _check_limit(limit, f"{where}.lossless.{dtype}.{modality}", partial=True)
        if "adherence" in overrides:
            _check_adherence(overrides["adherence"], where)


THRESHOLD_KEYS = ("lossless", "lossless_minimum", "lossy", "adherence", "models")


def _feature_families() -> list[str]:
    from accel.features import FEATURES

    return sorted({feature.family for feature in FEATURES.values()})


def _check_family(family: Any, where: str) -> None:
    families = _feature_families()
    if family not in families:
        raise ConfigError(f"{where}: {unknown_choice('feature family', family, families)}")


def _check_adherence(value: Any, source: str) -> None:
    """``adherence.lossy.<family>``: the share of attributes a lossy variant may lose, a number in [0, 1]."""
    if not isinstance(value, dict) or set(value) - {"lossy"}:
        extra = sorted(set(value) - {"lossy"}) if isinstance(value, dict) else []
        got = f"unknown key '{extra[0]}'" if extra else f"got {value!r}"
        raise ConfigError(f"{source}: adherence: expected a mapping with the key lossy ({got})")
    limits = value.get("lossy")
    if limits is None:
        return
    if not isinstance(limits, dict):
        raise ConfigError(
            f"{source}: adherence.lossy: expected a mapping of feature family to a number, got {limits!r}"
        )
    for family, limit in limits.items():
        where = f"{source}: adherence.lossy.{family}"
        _check_family(family, where)
        if not _in_range(limit, 0.0, 1.0):
            raise ConfigError(
                f"{where}: {limit!r} is not allowed: the share of the prompts' attributes a lossy variant may "
                "lose, a number from 0 to 1 (e.g. 0.05)"
            )


def check_thresholds(data: dict[str, Any], source: str) -> None:
    """The thresholds file's shape: ``lossless.<dtype>.<modality>``, ``lossless_minimum.<modality>``,
    ``lossy.<family>``, each ``{ssim, psnr}``, and the optional ``adherence.lossy.<family>`` (a share in
    [0, 1]); errors name the file and key. Unknown top-level keys and families are refused, so a typo
    cannot silently fall back to a default."""
    for key in data:
        if key not in THRESHOLD_KEYS:
            raise ConfigError(f"{source}: {unknown_choice('key', key, THRESHOLD_KEYS)}")
    for key in ("lossless", "lossless_minimum", "lossy"):
        if not isinstance(data.get(key), dict):
            raise ConfigError(f"{source}: missing key '{key}' (a mapping)")
    if "adherence" in data:
        _check_adherence(data["adherence"], source)
    for dtype, by_modality in data["lossless"].items():
        if not isinstance(by_modality, dict) or set(by_modality) != set(MODALITIES):
            raise ConfigError(
                f"{source}: lossless.{dtype}: expected keys {', '.join(MODALITIES)} (lossless thresholds are "
                f"per dtype, then modality: lossless.float32.image), got {by_modality!r}"
            )
        for modality in MODALITIES:
            _check_limit(by_modality[modality], f"{source}: lossless.{dtype}.{modality}")
    for modality in MODALITIES:
        _check_limit(data["lossless_minimum"].get(modality), f"{source}: lossless_minimum.{modality}")
    for family, limit in data["lossy"].items():
        _check_family(family, f"{source}: lossy.{family}")
        _check_limit(limit, f"{source}: lossy.{family}")
    _check_model_overrides(data.get("models"), [str(d) for d in data["lossless"]], source)


def claim_for(data: GateData, model: str, feature: str) -> bool | None:
    """True/False when the model claims the feature (un)supported, None when it makes no claim."""
    entry = (data.claims.get(model) or {}).get(feature)
    if entry is None:
        return None
    return bool(entry.get("supported", True)) if isinstance(entry, dict) else bool(entry)


def output_precision(record: dict[str, Any]) -> str:
    """The dtype the cell computed in (``float32`` when the record does not say)."""
    return record.get("dtype") or "float32"


def _lossy_families(record: dict[str, Any]) -> list[str]:
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
    lossy_families = _lossy_families(record)
    if lossy_families:
        missing = [f for f in lossy_families if f not in lossy]
        if missing:
            raise ConfigError(
                f"{data.source}: lossy: no parity thresholds for family '{missing[0]}' "
                f"({record['model']}/{record['variant']} is lossy through it): add lossy.{missing[0]}: "
                "{ssim: ..., psnr: ...} or declare lossy_limits on its feature"
            )
        limits = [lossy[f] for f in lossy_families]
        ssim = min(float(x["ssim"]) for x in limits)
        psnr = min(float(x["psnr"]) for x in limits)
        return ssim, psnr, f"lossy ({', '.join(lossy_families)})"
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


def _parity_pair(name: str, parity: dict[str, Any], ssim_min: float, psnr_min: float) -> list[Check]:
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
        return _parity_pair(
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
    return _parity_pair(f"{names} {kind} beside {part['variant']}", parity_of(record), ssim_min, psnr_min)


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
    lossy feature or no limit for its families.
    """
    from accel.features import FEATURES

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
    paired = "vs_baseline" in (record.get("adherence") or {})
    name = "adherence loss vs baseline" + ("" if paired else " (net change: no per-image scores)")
    return Check(name, loss <= limit + 1e-9, loss, f"<= {fmt(limit, 4, significant=True)} (lossy)")


def _perf_check(data: GateData, record: dict[str, Any]) -> tuple[Check | None, str | None]:
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
    if record.get("unsupported_scope") == "environment":
        verdict.outcome, verdict.skip_kind = SKIP, ENVIRONMENT
        verdict.reasons.append(f"not run, unsupported here: {error}")
        return verdict
    blamed = _named_features(error, features) or features
    claimed_supported = [name for name in blamed if claims[name]]
    if claimed_supported:
        verdict.outcome = FAIL
        verdict.reasons.append(f"claimed supported but unsupported: {error}")
        return verdict
    verdict.outcome, verdict.skip_kind = SKIP, UNSUPPORTED
    as_claimed = ", as claimed" if all(claims[name] is False for name in blamed) else ""
    verdict.reasons.append(f"not run, unsupported on this model{as_claimed}: {error}")
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


def evidence_problem(entry: Any) -> str | None:
    """Why one feature's evidence entry does not show engagement, or None when it does.

    Only ``engaged: true`` (a JSON boolean) is engagement: a missing entry, ``false``, or a value of another
    type (``"no"``, ``1``: a hand-edited or foreign record) is not."""
    if entry is None:
        return "no evidence recorded"
    if not isinstance(entry, dict):
        return f"malformed evidence: expected an object, got {entry!r}"
    engaged = entry.get("engaged")
    if not isinstance(engaged, bool):
        return f"malformed evidence: engaged should be true or false, got {engaged!r}"
    if not engaged:
        return str(entry.get("summary") or "not engaged")
    return None


def not_engaged_error(evidence: dict[str, Any], features: list[str] | None = None) -> str | None:
    """A measured cell's error when a feature's own verdict says it did not engage (``summary`` of each), or
    left no evidence at all (each of ``features`` needs an entry), or None: the cell records it as failed
    (its run does not show the feature)."""
    names = list(dict.fromkeys([*(features or []), *evidence]))
    problems = [(name, evidence_problem(evidence.get(name))) for name in names]
    return "; ".join(f"{name}: {problem}" for name, problem in problems if problem) or None


def judge_engine_engagement(record: dict[str, Any]) -> None:
    """An engine cell's features engage only on evidence: the engine's own log line, or, for a lossy
    feature, an output that differs from the engine's baseline (an effect its default path cannot produce).
    A lossy feature whose output is identical did not engage whatever the engine logged. Without evidence
    for every feature the cell fails with the reason; acceptance alone is never engagement.

    The sweep records the facts (the engine's log lines as evidence, ``parity.bit_identical`` against the
    engine's baseline) and calls this before it writes the record, so the record, the report and the gate
    agree on the cell's status."""
    if not record.get("engine") or record["status"] != "ok":
        return
    evidence = record.setdefault("evidence", {})
    parity = parity_of(record)
    missing = []
    lossy_ones = lossy_features(record)
    for name in feature_options(record):
        entry = evidence.setdefault(name, {"engaged": False, "summary": "accepted by vLLM-Omni"})
        lossy = name in lossy_ones
        if lossy and parity.get("bit_identical") is False:
            entry["engaged"] = True
            entry["summary"] = "; ".join(
                [*([entry["summary"]] if entry.get("engine_log") else []), "output differs from the engine's baseline"]
            )
        elif lossy and parity.get("bit_identical"):
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; but the output is identical to the engine's baseline"
        elif lossy:
            entry["engaged"] = False
            entry["summary"] = f"{entry['summary']}; no baseline output to show an effect"
        if not entry["engaged"]:
            missing.append(f"{name}: {entry['summary']}")
    if missing:
        record["status"] = "failed"
        record["error"] = "no evidence of engagement: " + "; ".join(missing)


def judge_timing_validity(record: dict[str, Any]) -> None:
    """A cell whose fastest step beat its floor (FLOPs / peak, ``roofline.below_floor``) was timed by a clock
    that cannot be trusted: ``invalid_measurement`` says so, and the gate fails its timing check. A feature
    that skips or changes the work (``Feature.roofline_exempt``) may beat the full-step floor:
    ``roofline.floor_check`` then says the floor does not apply, and why."""
    from accel.features import FEATURES

    roof = record.get("roofline") or {}
    exempt = [FEATURES[n].roofline_exempt for n in feature_options(record) if n in FEATURES]
    exempt = [reason for reason in exempt if reason]
    if roof and exempt:
        roof["floor_check"] = f"not applicable: {exempt[0]}"
        return
    if roof.get("below_floor"):
        record["invalid_measurement"] = (
            f"a step took {fmt(roof['fastest_step_s'] * 1e3, 3)} ms, below the {fmt(roof['floor_step_s'] * 1e3, 3)} "
            "ms floor (FLOPs / peak): the timer cannot be trusted"
        )


def judge_measured_cell(record: dict[str, Any]) -> None:
    """Every judgement a record carries, made here and only here; the sweep calls it once per cell, after
    attaching the facts (evidence, parity, roofline) and before writing the record, so the record, the report
    and the gate agree. An in-process cell whose feature's own ``verify()`` found no engagement fails
    (``not_engaged_error``); an engine cell engages only on evidence (``judge_engine_engagement``); a step
    below its floor marks the timing invalid (``judge_timing_validity``)."""
    if record.get("status") == "ok" and not record.get("engine") and not is_reference(record):
        not_engaged = not_engaged_error(record.get("evidence") or {}, list(feature_options(record)))
        if not_engaged:
            record.update(status="failed", error=not_engaged)
    judge_engine_engagement(record)
    judge_timing_validity(record)


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
        else:
            verdict.feature_states[name] = "engaged"
    unexcused_engagement = [name for name in broken if claims[name] is not False]
    for name in unexcused_engagement:
        verdict.checks.append(Check(f"engagement of {name}", False, broken[name], "engaged on every timed run"))
    if not features:
        verdict.checks.append(Check("engagement", False, "no feature", "at least one feature to judge"))

    parity = parity_of(record)
    ssim_min, psnr_min, kind = required_parity(data, record, noise_floor, modality)
    parity_checks = _parity_pair(kind, parity, ssim_min, psnr_min)
    parity_checks += combined_lossless_checks(data, record, noise_floor, modality, peers or [])
    lossy = set(lossy_features(record))  # once: an older record's options are parsed to find it
    lossless = [name for name in features if name not in lossy]
    if lossless and record.get("outputs_stable") is False:  # a lossless feature must be stable
        parity_checks.append(
            Check("output stability, lossless", False, "outputs differ between timed passes", "identical every pass")
        )
    if baseline is not None and baseline.get("status") != "ok":
        parity_checks.append(
            Check("baseline", False, f"{baseline.get('status')}: {baseline.get('error')}", "a measured baseline")
        )
    elif lossless and (baseline or {}).get("outputs_stable") is False:  # nothing to be lossless against
        parity_checks.append(
            Check(
                "output stability of the baseline, lossless",
                False,
                "the baseline's outputs differ between its own calls",
                "a baseline identical every pass",
            )
        )
    verdict.in_parity = all(c.ok for c in parity_checks)
    claimed = [name for name in features if claims[name] is False]
    unclaimed = [name for name in features if claims[name] is not False]
    parity_excused = not verdict.in_parity and not unclaimed  # every feature of the cell claims it
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
        if not verdict.in_parity and claimed:
            verdict.reasons.append(
                _excuse_note(claimed, unclaimed, "a combined cell cannot tell which feature lost parity: it counts for")
            )
    adherence = adherence_check(data, record)
    if adherence is not None:
        verdict.checks.append(adherence)
    if record.get("invalid_measurement"):
        verdict.checks.append(Check("timing validity", False, record["invalid_measurement"], "no step below its floor"))
    perf, notice = _perf_check(data, record)
    if perf is not None:
        verdict.checks.append(perf)
    if notice:
        verdict.findings.append(notice)

    excused = [name for name in broken if claims[name] is False]
    if any(not c.ok for c in verdict.checks):
        verdict.outcome = FAIL
        judged = ("SSIM", "PSNR", "output stability", "engagement", "baseline")
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


@dataclass
class GateReport:
    """Every verdict of a results file, notices about the gate's own inputs, and what to print."""

    verdicts: list[CellVerdict]
    notices: list[str] = field(default_factory=list)
    # (cell key, speedup_ci) of every measured variant: how each speedup may be published.
    speed_claims: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def failed(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.outcome == FAIL]

    @property
    def skipped(self) -> list[CellVerdict]:
        return [v for v in self.verdicts if v.outcome == SKIP]

    @property
    def findings(self) -> list[str]:
        return [f for v in self.verdicts for f in v.findings]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def noise_floors(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model, the parity of the baseline's re-run against the baseline."""
    return {r["model"]: r["parity"] for r in records if is_noise_floor(r) and r.get("parity")}


BASELINE = "baseline"
# What a model's cells are judged against when its baseline record is missing from the results.
NO_BASELINE = {"status": "missing", "error": "no baseline record in these results"}


def is_reference(record: dict[str, Any]) -> bool:
    """The baseline or its noise-floor re-run: the cells every variant of the model is measured against."""
    return record["variant"] == BASELINE or is_noise_floor(record)


def gate_reference(record: dict[str, Any], data: GateData, modality: str) -> CellVerdict:
    """The verdict on a model's baseline or its noise-floor re-run: every variant is measured against them.

    A reference that did not run (failed, crashed, timed out, or without timed outputs) fails: nothing of
    its model can be judged (one not runnable in this environment is skipped, as a variant would be). A
    baseline whose outputs differ between its own calls passes itself, with a finding; the lossless
    verdicts judged against it fail (``gate_cell``). A noise floor below ``lossless_minimum``: the baseline
    does not reproduce itself from a fresh load, which no threshold can absorb.
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
    if is_noise_floor(record):
        parity = parity_of(record)
        minimum = data.thresholds["lossless_minimum"][modality]
        verdict.checks += _parity_pair(
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
    records: list[dict[str, Any]], data: GateData, unmeasured: list[tuple[str, str]] | None = None
) -> GateReport:
    """The one judgement of a results file, shared by ``omni-accel gate``, the pytest plugin and the tables:
    a verdict on every record (the baselines and noise floors too: a failed reference fails the run) and
    on every ``unmeasured`` cell (planned by the run's profile, missing from its results: an interrupted
    sweep or a lost record never passes a gate)."""
    floors = noise_floors(records)
    baselines = {r["model"]: r for r in records if r["variant"] == BASELINE}
    verdicts = []
    for record in records:
        modality = _modality(record)
        if is_reference(record):
            verdicts.append(gate_reference(record, data, modality))
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
        for r in records
        if r.get("speedup_ci") and not is_noise_floor(r)
    ]
    notices = unmatched_threshold_models(records, data) + unmatched_baseline_entries(records, data)
    return GateReport(verdicts, notices, claims)


# The name the CLI, tables and older callers know.
gate_records = judge_records


def _modality(record: dict[str, Any]) -> str:
    return record.get("modality") or "image"


SKIP_KINDS = {
    ENVIRONMENT: "not run: unsupported in this environment",
    UNSUPPORTED: "not run: unsupported on the model",
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


def markdown_summary(report: GateReport) -> str:
    """A markdown summary: counts, each failure with its numbers, each skipped cell with its reason, notices
    about the gate's inputs, then findings."""
    lines = ["# omni-accel gate", "", summary_counts(report), ""]
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
            kind = quoteattr(verdict.skip_kind or ENVIRONMENT)
            lines.append(f"    <skipped type={kind} message={quoteattr(verdict.message())}/>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
