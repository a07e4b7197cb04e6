"""The cell record: its declared keys and types (``CellRecord``), its readers, and the checks a record passes.

What one line of ``results.jsonl`` is, apart from how it is stored: the schema version, the typed sections
of the record (the manual's reference page of record keys is generated from them), the readers every
report, table and gate uses (``is_noise_floor``, ``parity_of``, ``feature_classes``, ...) and
``check_record`` / ``check_version``, which a record read back must pass. ``accel.results`` (the store: the
append-only log, its loader and the table) re-exports every public name, so ``from accel.results import
CellRecord`` keeps working.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from accel.errors import ConfigError

# The version of the cell record's shape, written into every line of results.jsonl. A line without it was
# written before the record was declared (version 0, the same keys) and is read as such; a line from a newer
# version than this code knows is refused. Raise it when a key changes meaning or is removed.
# 1: the record declared; 2: ``feature_classes`` recorded (older records: parsed from ``features`` on read);
# 3: ``adherence_loss`` counts the attributes lost image by image (before: the net change of overall adherence).
SCHEMA_VERSION = 3


# The cell record, one section at a time: every key a sweep writes, its type and one line on what it holds.
# Every key is optional (a cell that failed early has only its identity and error); null is always allowed.
# Keys not declared here (a third-party feature's evidence, a future key) are kept as they are.
class Identity(TypedDict, total=False):
    """Which cell this is, what it ran on, and its status."""

    schema_version: Annotated[int, "version of this record's shape (absent: 0, written before it was declared)"]
    model: Annotated[str, "the profile's model name"]
    source: Annotated[str, "where the model's weights come from (zoo name, path or hub id)"]
    weights_sha256: Annotated[
        str, "a trained zoo model (mini-flux, mini-wan): the combined SHA-256 of the weight files it ran"
    ]
    target: Annotated[str, "how it ran: library, adapter, native or an engine target such as vllm-omni"]
    variant: Annotated[str, "the profile's variant name (baseline, noise-floor or a feature set)"]
    features: Annotated[dict[str, Any], "feature name -> its options, as the variant lists them"]
    feature_classes: Annotated[
        dict[str, str], "feature name -> lossless or lossy, as the feature judged its options when planned (v2)"
    ]
    status: Annotated[str, "ok, failed or unsupported"]
    role: Annotated[str, "noise_floor for the baseline's re-run (the measured noise band)"]
    decided: Annotated[str, "engine cells: declared (from the feature mapping, never ran) or measured"]
    engine: Annotated[str, "the external engine that ran the cell (vllm-omni); absent for in-process cells"]
    engine_kwargs: Annotated[dict[str, Any], "the keyword arguments the variant's features became for the engine"]
    device: Annotated[str, "the torch device it ran on (cpu, cuda, cuda:0)"]
    device_name: Annotated[str, "the device's name, what performance baselines match on"]
    dtype: Annotated[str, "what it computed in (float32, bfloat16, float16; uint8 for engines' images)"]
    modality: Annotated[str, "image or video (from the outputs' shape)"]
    profile_fingerprint: Annotated[str, "hash of the resolved profile: --resume refuses a different one"]
    timestamp: Annotated[float, "when the record was written (epoch seconds)"]


class Timing(TypedDict, total=False):
    """How long it took, and the speedup over the baseline."""

    load_s: Annotated[float, "seconds to load the pipeline"]
    first_call_s: Annotated[float, "seconds of the first (cold) call: compilation and warm-up included"]
    cold_s: Annotated[float, "load_s + first_call_s; engines: process start to the first image"]
    process_wall_s: Annotated[float, "engine cells: the engine process's wall time"]
    cell_wall_s: Annotated[float, "seconds the whole cell took in its worker"]
    warm: Annotated[
        dict[str, float],
        "summary of the warm calls, timed alone (nothing hooked or sampling beside them): median, mean, min, max, "
        "p90, cv, n",
    ]
    warm_samples: Annotated[list[float], "seconds of each warm call, in order"]
    noisy: Annotated[bool, "the warm calls' cv is above measure.max_cv"]
    paired: Annotated[
        dict[str, Any],
        "interleaved timing: reference_s, variant_s (ABBA order), pairs_drawn, stopped (what ended the sequential "
        "sampling: decided, max_pairs or, when set, pair_budget_s) and estimate (the interval reached)",
    ]
    speedup: Annotated[
        float,
        "median reference / variant ratio of the interleaved pairs (speedup_ci.ratio); sequential timing: the "
        "ratio estimated from the baseline's and this cell's warm samples",
    ]
    speedup_ci: Annotated[dict[str, Any], "the speedup's interval and what it may be published as (verdict)"]
    timing: Annotated[
        dict[str, Any],
        "how and where it was timed: method, node, threads, executor, overlap; alone and interleaved: the "
        "contention over each timed window (wall_s, own_cores, other_cores, steal_cores: cores a virtual "
        "machine's host took, counted in other_cores too, contended, load_average_1m)",
    ]


class Memory(TypedDict, total=False):
    """Peak memory while loading and while timed."""

    peak_host_rss_bytes: Annotated[
        int, "peak host resident memory during the headline calls, the stage pass excluded (see memory_method)"
    ]
    memory_method: Annotated[
        str,
        "how the host peak was measured: the kernel's high-water mark around the timed calls (nothing sampled "
        "beside them), or a sampling thread in an untimed call of its own where the kernel has none",
    ]
    peak_device_allocated_bytes: Annotated[int, "peak device memory allocated during the timed calls"]
    peak_device_reserved_bytes: Annotated[int, "peak device memory reserved by the allocator"]
    host_pss_bytes: Annotated[int, "host proportional set size after the timed calls"]
    memory_load: Annotated[dict[str, Any], "the same peaks while loading"]
    memory_at_start: Annotated[
        dict[str, Any],
        "what the process held when the cell started, after a garbage collection and malloc_trim (host_rss, "
        "device_allocated on CUDA): what earlier cells in the process left (executor: inline)",
    ]
    memory_settled: Annotated[
        str,
        "whether the process was settled before memory_at_start (one unaccelerated load and call of this model and "
        "workload in it first, so its one-time imports, arenas and caches are not the cell's), or why not",
    ]
    cell_memory_bytes: Annotated[
        int,
        "the cell's own peak memory, the one every table and ratio uses: the headline calls' peak (device allocated "
        "on a GPU, host RSS on a CPU; the stage pass excluded) minus memory_at_start, in a process settled for the "
        "model (memory_settled); a parallel cell's is the sum over its ranks (rank_memory)",
    ]
    cell_memory_method: Annotated[str, "how cell_memory_bytes was got (and, for a parallel cell, summed)"]
    rank_memory: Annotated[
        list[dict[str, Any]],
        "a parallel cell's memory per rank: rank, cell_memory_bytes, peak_host_rss_bytes, peak_device_allocated_bytes, "
        "memory_settled",
    ]
    weight_bytes: Annotated[dict[str, int], "bytes of each pipeline component's weights"]
    memory_reduction: Annotated[
        float, "baseline's cell_memory_bytes / this cell's (device on a GPU, host RSS on a CPU; summed over ranks)"
    ]


class Stages(TypedDict, total=False):
    """Where a call's time goes."""

    stages: Annotated[dict[str, Any], "median seconds per stage, end_to_end_s, step_median_s, steps_per_call"]
    step_times: Annotated[list[float], "seconds of every denoising step of the stage pass"]
    stage_sums: Annotated[list[float], "per stage-pass call: the sum of its stages"]
    stage_outer_s: Annotated[list[float], "per stage-pass call: its time from an independent outer timer"]
    denoiser_calls_per_call: Annotated[int, "denoiser (transformer) calls in one pipeline call"]


class Parity(TypedDict, total=False):
    """How its outputs compare with the baseline's and the reference model's."""

    parity: Annotated[dict[str, Any], "vs the baseline: ssim, psnr (their minima), abs diffs, bit_identical"]
    parity_vs_reference: Annotated[dict[str, Any], "a baseline vs the reference model's baseline"]
    reference_model: Annotated[str, "the model parity_vs_reference compares with"]
    outputs_stable: Annotated[bool, "the first and last timed passes gave identical outputs"]
    video_parity: Annotated[
        dict[str, Any],
        "videos vs the baseline's (accel.measure.video): frames; samples.<prompt x seed>: ssim and psnr per frame, "
        "temporal_mad and temporal_psnr per frame pair, flicker (0 steady error to 1 reversing every frame); "
        "worst_ssim, worst_psnr, worst_temporal_psnr: {sample, frame, value}; temporal_mad (mean); flicker (max)",
    ]
    adherence: Annotated[dict[str, Any], "prompt-adherence scores of a world model's outputs"]
    adherence_loss: Annotated[
        float,
        "share of the attributes scored that the baseline got right and this cell got wrong, image by image "
        "(gains elsewhere do not offset it; before schema 3: the baseline's overall adherence minus this cell's)",
    ]
    outputs_file: Annotated[str, "the cell's outputs (.npz, float32), relative to the run directory"]
    images: Annotated[list[str], "the PNG images saved from its outputs, relative to the run directory"]
    steps_file: Annotated[
        str, "baseline and lossy variants: the latents after every step of one untimed call (.npz), relative"
    ]
    step_error: Annotated[
        dict[str, Any],
        "lossy variants: rel_l2 per step against the baseline's latents, skipped_steps (a cache's), "
        "first_differing_step",
    ]


class Roofline(TypedDict, total=False):
    """FLOPs, the device's peak and the floor a step cannot beat."""

    flops_per_denoiser_call: Annotated[int, "baseline: FLOPs of one denoiser call (counted on its inputs)"]
    peak_flops: Annotated[float, "the device's peak FLOP/s in this dtype"]
    peak_flops_source: Annotated[str, "where peak_flops comes from (datasheet, measured CPU peak)"]
    roofline: Annotated[
        dict[str, Any],
        "flops_per_step, floor_step_s, fastest_step_s, mfu, below_floor; floor_check and effective_mfu (mfu null) "
        "where a feature skips work (a cached step)",
    ]
    invalid_measurement: Annotated[str, "why the timings cannot be trusted (a step below its floor)"]


class Evidence(TypedDict, total=False):
    """Whether each feature engaged, in the feature's or the engine's own words."""

    evidence: Annotated[dict[str, dict[str, Any]], "feature -> engaged, summary and the feature's own keys"]
    engine_log: Annotated[str, "engine cells: the engine's log, relative to the run directory"]


class Errors(TypedDict, total=False):
    """What went wrong, and notes on what could not be measured."""

    error: Annotated[str, "why the cell failed or is unsupported (null when ok)"]
    unsupported_scope: Annotated[str, "environment (this device or installation) or model (this pipeline)"]
    refused_by: Annotated[
        str,
        "who refused an unsupported cell: library (its message quoted), model (a structure it lacks), device "
        "(this device or installation) or harness (omni-accel does not support or observe it yet); absent in "
        "records written before it: device for the scope environment, model for model",
    ]
    traceback: Annotated[str, "the traceback of an unexpected crash inside a pipeline or a feature"]
    raised_in: Annotated[
        dict[str, Any],
        "whose code a crash was raised in: package (diffusers, torchao, omni-accel, ...) and where (file:line in "
        "function), the innermost frame outside torch and the standard library (accel.raised_in); null when none",
    ]
    notes: Annotated[list[str], "what could not be measured or written (no baseline, a file outside the run)"]


class CellRecord(Identity, Timing, Memory, Stages, Parity, Roofline, Evidence, Errors, total=False):
    """One line of results.jsonl: every section's keys, flat (see ``RECORD_SECTIONS``)."""


RECORD_SECTIONS: tuple[type, ...] = (Identity, Timing, Memory, Stages, Parity, Roofline, Evidence, Errors)


@dataclass(frozen=True)
class RecordField:
    """One declared key of the cell record."""

    name: str
    section: str
    type: str  # as the manual prints it: number, integer, string, boolean, object, list
    description: str


def _kind(annotation: Any) -> str:
    origin = typing.get_origin(annotation) or annotation
    return {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", list: "list"}.get(
        origin, "any"
    )


@functools.cache
def record_fields() -> tuple[RecordField, ...]:
    """Every declared key of the cell record, section by section, from the TypedDicts above."""
    fields = []
    for section in RECORD_SECTIONS:
        hints = typing.get_type_hints(section, include_extras=True)
        for name in inspect.get_annotations(section):  # its own keys, in declaration order
            annotation = hints[name]
            kind = _kind(annotation.__origin__)
            fields.append(RecordField(name, section.__name__.lower(), kind, annotation.__metadata__[0]))
    return tuple(fields)


def peak_memory_bytes(record: dict[str, Any]) -> int | None:
    """The peak memory every table and ratio uses: the cell's own (``cell_memory_bytes``: from its start, summed
    over a parallel cell's ranks); for a record without it, the peak device allocated on a GPU, host RSS on a CPU."""
    own = record.get("cell_memory_bytes")
    if own is not None:
        return int(own)
    device = record.get("peak_device_allocated_bytes")
    return device if device is not None else record.get("peak_host_rss_bytes")


# Readers of the record's sections: what every report, table and gate reads, absent or null alike.
NOISE_FLOOR_ROLE = "noise_floor"  # ``role`` of the baseline's re-run


def is_noise_floor(record: dict[str, Any]) -> bool:
    """Whether the record is its model's noise-floor cell (the baseline re-run; ``role``)."""
    return record.get("role") == NOISE_FLOOR_ROLE


def not_run(record: dict[str, Any]) -> str | None:
    """Why a cell did not run, or None when it did: its status and error when not ``ok``, else ``ok, but no timed
    outputs`` when it has no warm timing (a record that claims ``ok`` without having been timed). The gate,
    the report and the sweep's exit status ask this one question of a baseline alike."""
    if record.get("status") != "ok":
        error = record.get("error")
        return f"{record.get('status')}: {error}" if error else str(record.get("status"))
    if record.get("warm") is None:
        return "ok, but no timed outputs"
    return None


def feature_options(record: dict[str, Any]) -> dict[str, Any]:
    """The cell's features (name -> options); empty for a baseline or a record without them."""
    return record.get("features") or {}


def feature_classes(record: dict[str, Any]) -> dict[str, str]:
    """The cell's features, name -> ``lossless`` or ``lossy``, as recorded when the variant was planned.

    A record from before version 2 lacks them: its options are parsed once more, here, by each feature's
    own rule (``Feature.feature_class_for``); a record ``check_record`` accepted always parses.
    """
    recorded = record.get("feature_classes")
    if recorded is not None:
        return dict(recorded)
    from accel.features import FEATURES, parse_feature_options

    return {
        name: FEATURES[name].feature_class_for(parse_feature_options(name, raw, "features")).value
        for name, raw in feature_options(record).items()
    }


def lossy_features(record: dict[str, Any]) -> list[str]:
    """The cell's features that are lossy with the options it ran with (``feature_classes``)."""
    return [name for name, kind in feature_classes(record).items() if kind == "lossy"]


def warm_median(record: dict[str, Any]) -> float | None:
    """The median warm call in seconds (``warm.median``), or None when the cell was not timed."""
    return (record.get("warm") or {}).get("median")


def parity_of(record: dict[str, Any], key: str = "parity") -> dict[str, Any]:
    """The cell's parity section (``parity``, or ``parity_vs_reference``); empty when not measured."""
    return record.get(key) or {}


def declared_tag(record: dict[str, Any]) -> str:
    """ " (declared, not measured)" for a cell decided from an engine's feature mapping without running the
    engine (``decided: declared``); "" for a measured one. Every table and the gate print it."""
    return " (declared, not measured)" if record.get("decided") == "declared" else ""


def _anything(value: Any) -> bool:
    return True


STATUSES = ("ok", "failed", "unsupported")
MODALITIES = ("image", "video")
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "number": (lambda v: _is_number(v), "a number"),
    "integer": (lambda v: _is_number(v), "a number"),  # as before the declaration: any number is read
    "string": (lambda v: isinstance(v, str), "a string"),
    "boolean": (lambda v: isinstance(v, bool), "a boolean"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Who refuses an unsupported cell (``refused_by``), as ``accel.features.base.Owner`` names them.
OWNERS = ("library", "model", "device", "harness")


def refused_by(record: dict[str, Any]) -> str | None:
    """Who refused an unsupported cell (``OWNERS``), None for a cell that was not refused. A record written
    before ``refused_by`` is read as its scope meant then: ``environment`` the device's, ``model`` the model's."""
    if record.get("status") != "unsupported":
        return None
    owner = record.get("refused_by")
    if owner in OWNERS:
        return str(owner)
    return "device" if record.get("unsupported_scope") == "environment" else "model"


def record_version(record: dict[str, Any]) -> int:
    """The schema version a record was written with: 0 for a line written before versions (same keys)."""
    return record.get("schema_version") or 0


def check_version(record: Any, where: str) -> None:
    """A ConfigError for a record this code cannot read: a ``schema_version`` that is not a whole number, or
    one newer than ``SCHEMA_VERSION`` (written by a newer omni-accel)."""
    if not isinstance(record, dict) or record.get("schema_version") is None:
        return
    version = record["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ConfigError(f"{where}: 'schema_version' should be a whole number, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"{where}: written with results schema version {version}; this omni-accel reads versions 0 to "
            f"{SCHEMA_VERSION}: upgrade omni-accel to read it"
        )


def _inside_run(value: Any) -> bool:
    """A path relative to the run directory that stays inside it: not absolute, no '..', no NUL, not empty."""
    import posixpath

    if not isinstance(value, str) or not value or "\x00" in value or "\\" in value:
        return False
    return not posixpath.isabs(value) and ".." not in value.split("/")


def _check_run_files(record: dict[str, Any], where: str) -> None:
    """``outputs_file`` and ``images`` name files inside the run directory only (``outputs_file: /etc/passwd``
    was read by the tables and the figures)."""
    named = [("outputs_file", record.get("outputs_file"))] if record.get("outputs_file") is not None else []
    named += [(f"images[{i}]", image) for i, image in enumerate(record.get("images") or [])]
    for key, value in named:
        if not _inside_run(value):
            raise ConfigError(
                f"{where}: '{key}' should be a path inside the run directory (relative, without '..'), got {value!r}"
            )


def check_record(record: Any, where: str) -> dict[str, Any]:
    """A record the gate, tables and resume can read; a ConfigError ``where: what is wrong`` otherwise."""
    from accel.features import FEATURES, parse_feature_options
    from accel.features.base import FeatureClass
    from accel.profile import MAX_NAME_LENGTH, name_length_problem

    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected a JSON object (one cell's record), got {_json_type(record)}")
    for key in ("model", "variant", "status"):
        if key not in record:
            raise ConfigError(f"{where}: the record has no '{key}'; every record has model, variant and status")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+")
    for key in ("model", "variant"):
        if not isinstance(record[key], str) or not record[key] or not set(record[key]) <= allowed:
            raise ConfigError(
                f"{where}: '{key}' should be a name (letters, digits, '-', '_', '.', '+'), got {record[key]!r}"
            )
        if len(record[key]) > MAX_NAME_LENGTH or record[key] in (".", ".."):
            raise ConfigError(f"{where}: '{key}': {name_length_problem(record[key])}")
    if record["status"] not in STATUSES:
        raise ConfigError(f"{where}: 'status' should be one of {', '.join(STATUSES)}, got {record['status']!r}")
    if record.get("refused_by") is not None and record["refused_by"] not in OWNERS:
        raise ConfigError(f"{where}: 'refused_by' should be one of {', '.join(OWNERS)}, got {record['refused_by']!r}")
    if record.get("modality") is not None and record["modality"] not in MODALITIES:
        raise ConfigError(f"{where}: 'modality' should be one of {', '.join(MODALITIES)}, got {record['modality']!r}")
    for declared in record_fields():  # each declared key's type; null is always allowed
        value = record.get(declared.name)
        check, kind = _CHECKS.get(declared.type, (_anything, ""))
        if value is not None and not check(value):
            raise ConfigError(f"{where}: '{declared.name}' should be {kind} or null, got {_json_type(value)}")
    for name in feature_options(record):
        if name not in FEATURES:
            raise ConfigError(f"{where}: features: unknown feature {name!r}")
    # Every record's options are parsed, whatever its version: recorded classes say lossless or lossy, not
    # that the options are ones this omni-accel knows ('nonsense' as an attention backend is refused).
    for name, raw in feature_options(record).items():
        parse_feature_options(name, raw, f"{where}: features")
    recorded = record.get("feature_classes")
    if recorded is not None:
        if set(recorded) != set(feature_options(record)):
            raise ConfigError(
                f"{where}: feature_classes should name the same features as features "
                f"({', '.join(sorted(feature_options(record))) or 'none'}), got {', '.join(sorted(recorded)) or 'none'}"
            )
        classes = [kind.value for kind in FeatureClass]
        for name, kind in recorded.items():
            if kind not in classes:
                raise ConfigError(
                    f"{where}: feature_classes.{name} should be one of {', '.join(classes)}, got {kind!r}"
                )
    _check_run_files(record, where)
    for name, evidence in (record.get("evidence") or {}).items():
        if not isinstance(evidence, dict):
            raise ConfigError(f"{where}: evidence.{name} should be an object, got {_json_type(evidence)}")
        if not isinstance(evidence.get("engaged"), bool):  # "no" would count as engaged by truth value
            raise ConfigError(
                f"{where}: evidence.{name}.engaged should be true or false, got {evidence.get('engaged')!r}"
            )
        for key in ("summary", "no_effect"):
            if evidence.get(key) is not None and not isinstance(evidence[key], str):
                raise ConfigError(f"{where}: evidence.{name}.{key} should be a string, got {_json_type(evidence[key])}")
    for key in ("parity", "parity_vs_reference"):
        parity = record.get(key)
        if parity:
            for metric in ("ssim", "psnr"):
                if not _is_number(parity.get(metric)):
                    raise ConfigError(f"{where}: {key}.{metric} should be a number, got {parity.get(metric)!r}")
            for metric, value in parity.items():
                if value is not None and not _is_number(value) and not isinstance(value, bool):
                    raise ConfigError(f"{where}: {key}.{metric} should be a number, got {_json_type(value)}")
    _check_video_parity(record.get("video_parity"), where)
    if record.get("warm") and not _is_number(record["warm"].get("median")):
        raise ConfigError(f"{where}: warm.median should be a number, got {record['warm'].get('median')!r}")
    if record.get("dtype") is not None and record["dtype"] not in DTYPES:
        raise ConfigError(f"{where}: 'dtype' should be one of {', '.join(DTYPES)}, got {record['dtype']!r}")
    _check_speedup(record.get("speedup_ci"), where)
    _check_paired(record.get("paired"), where, record.get("speedup_ci"))
    return record


# What a cell can compute in (the profile's dtypes; uint8 for engines' 8-bit outputs).
DTYPES = ("float32", "bfloat16", "float16", "uint8")


def _check_video_parity(video: Any, where: str) -> None:
    """``video_parity``'s worst frames, the values the gate judges: each null or ``{sample, frame, value}`` with a
    frame number from 0 and a numeric value (a hand-edited or truncated record would end the gate in a traceback)."""
    if video is None:
        return
    if not isinstance(video, dict):
        raise ConfigError(f"{where}: video_parity should be an object, got {_json_type(video)}")
    for key in ("worst_ssim", "worst_psnr", "worst_temporal_psnr"):
        worst = video.get(key)
        if worst is None:
            continue
        if (
            not isinstance(worst, dict)
            or not isinstance(worst.get("sample"), str)
            or not _is_number(worst.get("frame"))
            or worst["frame"] != int(worst["frame"])
            or worst["frame"] < 0
            or not _is_number(worst.get("value"))
        ):
            raise ConfigError(
                f"{where}: video_parity.{key} should be {{sample: text, frame: a whole number from 0, value: a "
                f"number}}, got {worst!r}"
            )


def _positive(value: Any) -> bool:
    """A finite number above zero (JSON's NaN, Infinity and integers past a float's range are not)."""
    try:
        return _is_number(value) and 0 < float(value) < math.inf
    except OverflowError:
        return False


def _whole(value: Any, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


def _check_speedup(claim: Any, where: str) -> None:
    """``speedup_ci`` as the gate and tables print and re-judge it: finite ratio/low/high (low <= high), a known
    verdict and a reason; when given, a noise band ``[1 / (1 + e), 1 + e]``-shaped (``0 < low < 1 < high``), a
    requested confidence as the profile allows (0.5 to 1) and whole planned looks."""
    from accel.measure.speedup import VERDICTS
    from accel.profile import MAX_PAIRS

    if claim is None:
        return
    if not isinstance(claim, dict):
        raise ConfigError(f"{where}: 'speedup_ci' should be an object or null, got {_json_type(claim)}")
    for key in ("ratio", "low", "high"):
        if not _positive(claim.get(key)):
            raise ConfigError(f"{where}: speedup_ci.{key} should be a positive number, got {claim.get(key)!r:.40}")
    if claim["low"] > claim["high"]:
        raise ConfigError(
            f"{where}: speedup_ci.low should be at most speedup_ci.high, got {claim['low']} > {claim['high']}"
        )
    if claim.get("verdict") not in VERDICTS:
        raise ConfigError(
            f"{where}: speedup_ci.verdict should be one of {', '.join(VERDICTS)}, got {claim.get('verdict')!r}"
        )
    if not isinstance(claim.get("reason"), str):
        raise ConfigError(f"{where}: speedup_ci.reason should be a string, got {_json_type(claim.get('reason'))}")
    band = claim.get("band")
    if band is not None and not (
        isinstance(band, list) and len(band) == 2 and all(map(_positive, band)) and band[0] < 1 < band[1]
    ):
        raise ConfigError(
            f"{where}: speedup_ci.band should be [low, high] with 0 < low < 1 < high (the noise band), got {band!r:.40}"
        )
    confidence = claim.get("requested_confidence")
    if confidence is not None and not (_is_number(confidence) and 0.5 < confidence < 1):
        raise ConfigError(
            f"{where}: speedup_ci.requested_confidence should be a number between 0.5 and 1 (measure.confidence), "
            f"got {confidence!r:.40}"
        )
    if claim.get("looks") is not None and not _whole(claim["looks"], MAX_PAIRS):
        raise ConfigError(
            f"{where}: speedup_ci.looks should be a whole number from 1 to {MAX_PAIRS}, got {claim['looks']!r:.40}"
        )


def _check_paired(paired: Any, where: str, claim: Any) -> None:
    """``paired`` as the gate re-judges a claim from it: equal, non-empty lists of positive timings and, when
    given, an estimate object whose ``looks`` is a whole number (the one ``speedup_ci`` records, if it does)."""
    from accel.profile import MAX_PAIRS

    if paired is None:
        return
    if not isinstance(paired, dict):
        raise ConfigError(f"{where}: 'paired' should be an object or null, got {_json_type(paired)}")
    timings: list[list[Any] | None] = [paired.get(key) for key in ("reference_s", "variant_s")]
    for key, values in zip(("reference_s", "variant_s"), timings, strict=True):
        if values is None:
            continue
        if not isinstance(values, list) or not values or not all(map(_positive, values)):
            raise ConfigError(
                f"{where}: paired.{key} should be a non-empty list of positive seconds, got {values!r:.80}"
            )
    reference, variant = timings
    if (reference is None) != (variant is None) or (
        reference is not None and variant is not None and len(reference) != len(variant)
    ):
        counts = " and ".join(str(None if t is None else len(t)) for t in timings)
        raise ConfigError(
            f"{where}: paired.reference_s and paired.variant_s should hold one timing per pair each, got {counts}"
        )
    if "estimate" not in paired:
        return
    estimate = paired["estimate"]
    if not isinstance(estimate, dict):
        raise ConfigError(f"{where}: paired.estimate should be an object, got {_json_type(estimate)}")
    if "looks" in estimate and not _whole(estimate["looks"], MAX_PAIRS):
        raise ConfigError(
            f"{where}: paired.estimate.looks should be a whole number from 1 to {MAX_PAIRS}, "
            f"got {estimate['looks']!r:.40}"
        )
    recorded = claim.get("looks") if isinstance(claim, dict) else None
    if recorded is not None and "looks" in estimate and recorded != estimate["looks"]:
        raise ConfigError(
            f"{where}: paired.estimate.looks ({estimate['looks']}) and speedup_ci.looks ({recorded}) should be the "
            "same: the looks the sampling planned"
        )


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
