"""The gate's data files, loaded and checked whole before any cell is judged: parity and adherence thresholds
(``feature_matrix/thresholds.yaml``), support claims (``feature_matrix/claims.yaml``) and an optional
performance baseline (``--baseline``). A bad value is a one-line ConfigError naming the file, the key and
what is allowed. ``claim_for`` reads a model's claim about one feature."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, unknown_choice

MODALITIES = ("image", "video")
# What an inconclusive adherence check does (``adherence.inconclusive``): fail the cell (the default), or pass it
# with a finding (warn); the tables mark its cell inconclusive either way.
INCONCLUSIVE_CHOICES = ("fail", "warn")


@dataclass(frozen=True)
class GateData:
    """Thresholds, claims and an optional performance baseline (``source``: the thresholds file, for errors)."""

    thresholds: dict[str, Any]
    claims: dict[str, Any]
    perf: dict[str, Any] | None = None
    source: str = "feature_matrix/thresholds.yaml"
    claims_source: str | None = None  # a claims file the user gave (--claims); None: the shipped one


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
    claims_source = str(claims) if claims else None
    return GateData(threshold_data, claims_data.get("models") or {}, perf, str(threshold_path), claims_source)


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


# The defaults perf_check uses when a baseline leaves a tolerance out.
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
    seen: dict[str, Any] = {}
    for device in devices:  # devices match case-insensitively (``baseline_device``): two such keys, one lost
        earlier = seen.setdefault(str(device).lower(), device)
        if earlier != device:
            raise ConfigError(
                f"{source}: devices: '{earlier}' and '{device}' name the same device (keys match "
                "case-insensitively): merge them into one"
            )
    for device, models in devices.items():
        if not isinstance(models, dict):
            raise ConfigError(f"{source}: devices.{device}: expected a mapping of model to variants, got {models!r}")
        for model, variants in models.items():
            where = f"{source}: devices.{device}.{model}"
            if not isinstance(variants, dict):
                raise ConfigError(f"{where}: expected a mapping of variant to seconds, got {variants!r}")
            for variant, seconds in variants.items():
                if not _in_range(seconds, 0.0, math.inf) or seconds == 0 or math.isinf(seconds):
                    raise ConfigError(
                        f"{where}.{variant}: {seconds!r} is not allowed: expected the warm median latency in "
                        "seconds, a finite number > 0"
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


THRESHOLD_KEYS = ("lossless", "lossless_minimum", "lossy", "adherence", "video", "models")


def _feature_families() -> list[str]:
    from accel.features import FEATURES

    return sorted({feature.family for feature in FEATURES.values()})


def _check_family(family: Any, where: str) -> None:
    families = _feature_families()
    if family not in families:
        raise ConfigError(f"{where}: {unknown_choice('feature family', family, families)}")


def _check_adherence(value: Any, source: str) -> None:
    """``adherence.lossy.<family>``: the share of attributes a lossy variant may lose, a number in [0, 1];
    ``adherence.inconclusive``: ``fail`` (the default) or ``warn``, what a loss whose interval straddles the
    limit does (``accel.gate.limits.adherence_check``)."""
    if not isinstance(value, dict) or set(value) - {"lossy", "inconclusive"}:
        extra = sorted(set(value) - {"lossy", "inconclusive"}) if isinstance(value, dict) else []
        got = f"unknown key '{extra[0]}'" if extra else f"got {value!r}"
        raise ConfigError(f"{source}: adherence: expected a mapping with the keys lossy, inconclusive ({got})")
    if value.get("inconclusive", "fail") not in INCONCLUSIVE_CHOICES:
        unknown = unknown_choice("value", str(value["inconclusive"]), INCONCLUSIVE_CHOICES)
        raise ConfigError(
            f"{source}: adherence.inconclusive: {unknown} "
            "(fail: a loss whose interval straddles the limit fails the gate; warn: it passes with a finding)"
        )
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


def _check_video(value: Any, source: str) -> None:
    """``video.worst_frame.lossy.<family>``: the ``{ssim, psnr}`` the worst frame of a lossy video must reach."""
    if not isinstance(value, dict) or set(value) != {"worst_frame"}:
        raise ConfigError(
            f"{source}: video: expected a mapping with the one key worst_frame (video.worst_frame.lossy.<family>: "
            f"{{ssim, psnr}}), got {value!r}"
        )
    frame = value["worst_frame"]
    if not isinstance(frame, dict) or set(frame) != {"lossy"} or not isinstance(frame["lossy"], dict):
        raise ConfigError(
            f"{source}: video.worst_frame: expected a mapping with the one key lossy, a mapping of feature family "
            f"to {{ssim, psnr}}, got {frame!r}"
        )
    for family, limit in frame["lossy"].items():
        _check_family(family, f"{source}: video.worst_frame.lossy.{family}")
        _check_limit(limit, f"{source}: video.worst_frame.lossy.{family}")


def check_thresholds(data: dict[str, Any], source: str) -> None:
    """The thresholds file's shape: ``lossless.<dtype>.<modality>``, ``lossless_minimum.<modality>``,
    ``lossy.<family>``, each ``{ssim, psnr}``, the optional ``adherence.lossy.<family>`` (a share in
    [0, 1]) and ``video.worst_frame.lossy.<family>`` ({ssim, psnr}); errors name the file and key. Unknown
    top-level keys and families are refused, so a typo cannot silently fall back to a default."""
    for key in data:
        if key not in THRESHOLD_KEYS:
            raise ConfigError(f"{source}: {unknown_choice('key', key, THRESHOLD_KEYS)}")
    for key in ("lossless", "lossless_minimum", "lossy"):
        if key not in data:
            raise ConfigError(f"{source}: missing key '{key}' (a mapping)")
        if not isinstance(data[key], dict):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {data[key]!r}")
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
    if "video" in data:  # after the mean limits it refines: their errors come first
        _check_video(data["video"], source)
    _check_model_overrides(data.get("models"), [str(d) for d in data["lossless"]], source)


def claim_for(data: GateData, model: str, feature: str) -> bool | None:
    """True/False when the model claims the feature (un)supported, None when it makes no claim."""
    entry = (data.claims.get(model) or {}).get(feature)
    if entry is None:
        return None
    return bool(entry.get("supported", True)) if isinstance(entry, dict) else bool(entry)
