"""The results schema and store: an append-only JSONL log and the tables built from it.

This is the only module that touches pandas. Every measured cell is appended as one JSON line, flushed
and fsynced before the next cell starts, so a crash loses nothing already measured. PSNR of identical
outputs is ``inf``: stored as JSON ``Infinity`` and printed as ``inf``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import ConfigError

RESULTS_FILE = "results.jsonl"
TABLE_FILE = "results.parquet"

# Flat columns of the results table, in report order.
COLUMNS = [
    "model", "variant", "status", "decided", "feature_names", "device", "device_name", "dtype",
    "warm_median_s", "warm_cv", "speedup", "load_s", "first_call_s", "cold_s",
    "peak_host_rss_bytes", "peak_device_allocated_bytes",
    "ssim", "ssim_min", "psnr", "psnr_min", "mean_abs_diff", "max_abs_diff", "bit_identical",
    "outputs_stable", "evidence_summary", "error", "cell_wall_s",
]  # fmt: skip


def outputs_path(run_dir: str | Path, model: str, variant: str) -> Path:
    """Where a cell's float32 outputs are kept in a run directory (``.npz``, one array per sample key)."""
    return Path(run_dir) / "outputs" / model / f"{variant}.npz"


def peak_memory_bytes(record: dict[str, Any]) -> int | None:
    """The peak memory every table and ratio uses: device allocated on a GPU, host RSS on a CPU."""
    device = record.get("peak_device_allocated_bytes")
    return device if device is not None else record.get("peak_host_rss_bytes")


def declared_tag(record: dict[str, Any]) -> str:
    """ " (declared, not measured)" for a cell decided from an engine's feature mapping without running the
    engine (``decided: declared``); "" for a measured one. Every table and the gate print it."""
    return " (declared, not measured)" if record.get("decided") == "declared" else ""


class ResultsLog:
    """Append-only JSONL results file; each ``append`` is durable when it returns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a"):
                pass
        except OSError as error:
            raise ConfigError(f"{self.path}: cannot write results: {error.strerror or error}") from error

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str, sort_keys=True)
        try:
            with self.path.open("a") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise ConfigError(
                f"{self.path}: cannot append a result: {error.strerror or error}; the cells already recorded "
                f"are kept; free space, then continue with 'omni-accel sweep --resume {self.path.parent}'"
            ) from error


STATUSES = ("ok", "failed", "unsupported")
MODALITIES = ("image", "video")
_NUMBERS = (
    "speedup", "memory_reduction", "peak_host_rss_bytes", "peak_device_allocated_bytes", "peak_device_reserved_bytes",
    "load_s", "first_call_s", "cold_s", "cell_wall_s", "peak_flops", "flops_per_denoiser_call", "timestamp",
    "denoiser_calls_per_call", "host_pss_bytes", "process_wall_s",
)  # fmt: skip
_STRINGS = (
    "error", "role", "device", "device_name", "dtype", "invalid_measurement", "unsupported_scope", "outputs_file",
    "reference_model", "source", "target", "engine", "profile_fingerprint", "traceback",
)  # fmt: skip
_MAPPINGS = ("stages", "roofline", "memory_load", "weight_bytes", "engine_kwargs")
_LISTS = ("step_times", "warm_samples", "stage_sums", "notes", "images")


@dataclass
class ResultsFile:
    """The records of a results file, and the last line when a crash cut it short (not a record)."""

    path: Path
    records: list[dict[str, Any]]
    cut_line: int | None = None  # its line number; every reader drops it, --resume measures that cell again
    complete_bytes: int = 0  # length of the complete lines

    def cut_notice(self) -> str | None:
        """One line for a reader to print when the last line was dropped."""
        if self.cut_line is None:
            return None
        return (
            f"note: {self.path}:{self.cut_line}: last line cut short (the sweep was interrupted while writing it); "
            f"not a record: its cell counts as not measured, and 'omni-accel sweep --resume {self.path.parent}' "
            "measures it again"
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_record(record: Any, where: str) -> dict[str, Any]:
    """A record the gate, tables and resume can read; a ConfigError ``where: what is wrong`` otherwise."""
    from accel.features import FEATURES, parse_feature_options

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
    if record["status"] not in STATUSES:
        raise ConfigError(f"{where}: 'status' should be one of {', '.join(STATUSES)}, got {record['status']!r}")
    if record.get("modality") is not None and record["modality"] not in MODALITIES:
        raise ConfigError(f"{where}: 'modality' should be one of {', '.join(MODALITIES)}, got {record['modality']!r}")
    for keys, check, kind in (
        (_NUMBERS, _is_number, "a number"),
        (_STRINGS, lambda v: isinstance(v, str), "a string"),
        (_MAPPINGS, lambda v: isinstance(v, dict), "a JSON object"),
        (_LISTS, lambda v: isinstance(v, list), "a list"),
        (("features", "evidence", "parity", "parity_vs_reference", "warm"), lambda v: isinstance(v, dict), "an object"),
    ):
        for key in keys:
            if record.get(key) is not None and not check(record[key]):
                raise ConfigError(f"{where}: '{key}' should be {kind} or null, got {_json_type(record[key])}")
    for name, raw in (record.get("features") or {}).items():
        if name not in FEATURES:
            raise ConfigError(f"{where}: features: unknown feature {name!r}")
        parse_feature_options(name, raw, f"{where}: features")
    for name, evidence in (record.get("evidence") or {}).items():
        if not isinstance(evidence, dict):
            raise ConfigError(f"{where}: evidence.{name} should be an object, got {_json_type(evidence)}")
    for key in ("parity", "parity_vs_reference"):
        parity = record.get(key)
        if parity:
            for metric in ("ssim", "psnr"):
                if not _is_number(parity.get(metric)):
                    raise ConfigError(f"{where}: {key}.{metric} should be a number, got {parity.get(metric)!r}")
            for metric, value in parity.items():
                if value is not None and not _is_number(value) and not isinstance(value, bool):
                    raise ConfigError(f"{where}: {key}.{metric} should be a number, got {_json_type(value)}")
    if record.get("warm") and not _is_number(record["warm"].get("median")):
        raise ConfigError(f"{where}: warm.median should be a number, got {record['warm'].get('median')!r}")
    if record.get("dtype") is not None and record["dtype"] not in DTYPES:
        raise ConfigError(f"{where}: 'dtype' should be one of {', '.join(DTYPES)}, got {record['dtype']!r}")
    _check_speedup(record.get("speedup_ci"), where)
    return record


# What a cell can compute in (the profile's dtypes; uint8 for engines' 8-bit outputs).
DTYPES = ("float32", "bfloat16", "float16", "uint8")


def _check_speedup(claim: Any, where: str) -> None:
    """``speedup_ci`` as the gate and tables print it: numbers ratio/low/high and a known verdict."""
    from accel.measure.speedup import VERDICTS

    if claim is None:
        return
    if not isinstance(claim, dict):
        raise ConfigError(f"{where}: 'speedup_ci' should be an object or null, got {_json_type(claim)}")
    for key in ("ratio", "low", "high"):
        if not _is_number(claim.get(key)):
            raise ConfigError(f"{where}: speedup_ci.{key} should be a number, got {claim.get(key)!r}")
    if claim.get("verdict") not in VERDICTS:
        raise ConfigError(
            f"{where}: speedup_ci.verdict should be one of {', '.join(VERDICTS)}, got {claim.get('verdict')!r}"
        )
    if not isinstance(claim.get("reason"), str):
        raise ConfigError(f"{where}: speedup_ci.reason should be a string, got {_json_type(claim.get('reason'))}")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def load_results(path: str | Path) -> ResultsFile:
    """Read a results file (or a run directory's ``results.jsonl``), checking every record.

    Malformed input is a ConfigError ``file:line: what is wrong``: a line that is not UTF-8, not JSON or
    not a record, a record lacking keys or holding values of the wrong type, a cell recorded twice. A last
    line without its newline was cut short by a crash (each record is written with its newline in one
    append): it is not a record, in every reader alike.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: results file not found")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read results: {error.strerror or error}") from error
    result = ResultsFile(path, [])
    lines = data.split(b"\n")
    seen: dict[tuple[str, str], int] = {}
    for number, line in enumerate(lines, start=1):
        if number == len(lines):  # what follows the last newline
            if line:
                result.cut_line = number
            break
        result.complete_bytes += len(line) + 1
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line.decode("utf-8"))
            json.dumps(record, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be printed
        except (UnicodeDecodeError, UnicodeEncodeError) as error:
            raise ConfigError(f"{where}: not UTF-8 text (or an unpaired surrogate): {error.reason}") from error
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not a JSON record: {error.msg} at column {error.colno}") from error
        except RecursionError as error:
            raise ConfigError(f"{where}: not a JSON record: nested too deep") from error
        check_record(record, where)
        cell = (record["model"], record["variant"])
        if cell in seen:
            raise ConfigError(
                f"{where}: cell {cell[0]}/{cell[1]} recorded twice (first at line {seen[cell]}); "
                "were two sweeps writing to this run directory?"
            )
        seen[cell] = number
        result.records.append(record)
    return result


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of a results file, or of ``results.jsonl`` inside a run directory (see ``load_results``)."""
    return load_results(path).records


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """One results-table row from a record."""
    parity = record.get("parity") or {}
    warm = record.get("warm") or {}
    evidence = record.get("evidence") or {}
    row = {
        **{key: record.get(key) for key in COLUMNS},
        "feature_names": ",".join(sorted(record.get("features") or {})) or "-",
        "warm_median_s": warm.get("median"),
        "warm_cv": warm.get("cv"),
        "evidence_summary": "; ".join(f"{k}: {v.get('summary')}" for k, v in evidence.items()) or None,
        **{key: parity.get(key) for key in ("ssim", "ssim_min", "psnr", "psnr_min", "mean_abs_diff")},
        "max_abs_diff": parity.get("max_abs_diff"),
        "bit_identical": parity.get("bit_identical"),
    }
    return row


def to_frame(records: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame with one row per cell and the ``COLUMNS`` columns."""
    import pandas as pd

    return pd.DataFrame([flatten(r) for r in records], columns=COLUMNS)


def write_table(records: list[dict[str, Any]], run_dir: str | Path) -> Path | None:
    """Write ``results.parquet`` next to the log and return its path; None without a parquet engine.

    pandas writes parquet through pyarrow (a dependency here); a machine without it (the GPU check's,
    where a 40 MB wheel does not fit the carried files) keeps ``results.jsonl``, the same records.
    """
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None and importlib.util.find_spec("fastparquet") is None:
        return None
    path = Path(run_dir) / TABLE_FILE
    to_frame(records).to_parquet(path, index=False)
    return path
