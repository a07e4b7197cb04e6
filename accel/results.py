"""The results store: an append-only JSONL log of cell records, its loader and the table built from it.

This is the only module that touches pandas. Every measured cell is appended as one JSON line, flushed and
fsynced before the next cell starts, so a crash loses nothing already measured. PSNR of identical outputs
is ``inf``: stored as JSON ``Infinity`` and printed as ``inf``. What a record holds and the checks it
passes are ``accel.record``'s, re-exported here (``from accel.results import CellRecord`` keeps working).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import ConfigError
from accel.record import (
    DTYPES,
    MODALITIES,
    NOISE_FLOOR_ROLE,
    OWNERS,
    RECORD_SECTIONS,
    SCHEMA_VERSION,
    STATUSES,
    CellRecord,
    Errors,
    Evidence,
    Identity,
    Memory,
    Parity,
    RecordField,
    Roofline,
    Stages,
    Timing,
    check_record,
    check_version,
    declared_tag,
    feature_classes,
    feature_options,
    is_noise_floor,
    lossy_features,
    not_run,
    parity_of,
    peak_memory_bytes,
    record_fields,
    record_version,
    refused_by,
    warm_median,
)

__all__ = [
    "COLUMNS",
    "DTYPES",
    "MODALITIES",
    "NOISE_FLOOR_ROLE",
    "OWNERS",
    "RECORD_SECTIONS",
    "RESULTS_FILE",
    "SCHEMA_VERSION",
    "STATUSES",
    "TABLE_FILE",
    "CellRecord",
    "Errors",
    "Evidence",
    "Identity",
    "Memory",
    "Parity",
    "RecordField",
    "ResultsFile",
    "ResultsLog",
    "Roofline",
    "Stages",
    "Timing",
    "check_record",
    "check_version",
    "declared_tag",
    "feature_classes",
    "feature_options",
    "flatten",
    "is_noise_floor",
    "load_results",
    "lossy_features",
    "main",
    "not_run",
    "outputs_path",
    "parity_of",
    "peak_memory_bytes",
    "read_results",
    "record_fields",
    "record_fields_markdown",
    "record_version",
    "refused_by",
    "to_frame",
    "warm_median",
    "write_table",
]

RESULTS_FILE = "results.jsonl"
TABLE_FILE = "results.parquet"


def record_fields_markdown() -> str:
    """The table of the record's keys, from the declaration (the manual's ``docs/reference/results-record.md``)."""
    lines = [
        f"Every line of `{RESULTS_FILE}` is one cell's record (`accel.results.CellRecord`, schema version "
        f"{SCHEMA_VERSION}): flat keys, grouped here by section. Every key may be absent or null; keys not listed "
        "(a plugin feature's evidence) are kept as written.",
        "",
        "| section | key | type | what it holds |",
        "|---|---|---|---|",
    ]
    lines += [f"| {f.section} | `{f.name}` | {f.type} | {f.description} |" for f in record_fields()]
    return "\n".join(lines) + "\n"


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


def steps_path(run_dir: str | Path, model: str, variant: str) -> Path:
    """Where a cell's per-step latents (one untimed call, ``accel.diverge.curve``) are kept in a run directory."""
    return Path(run_dir) / "steps" / model / f"{variant}.npz"


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
        """Write one cell's record as a line, with the ``schema_version`` it was built for."""
        record.setdefault("schema_version", SCHEMA_VERSION)
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


class _DuplicateKey(ValueError):
    """A JSON object of a results line names one key twice (json would keep the last silently)."""


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


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
        from accel.yaml_bounds import why_not_a_file

        raise ConfigError(why_not_a_file(path, "results"))
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read results: {error.strerror or error}") from error
    result = ResultsFile(path, [])
    lines = data.split(b"\n")
    seen: dict[tuple[str, str], int] = {}
    floors: dict[str, int] = {}
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
            record = json.loads(line.decode("utf-8"), object_pairs_hook=_refuse_duplicate_keys)
            json.dumps(record, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be printed
        except (UnicodeDecodeError, UnicodeEncodeError) as error:
            raise ConfigError(f"{where}: not UTF-8 text (or an unpaired surrogate): {error.reason}") from error
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not a JSON record: {error.msg} at column {error.colno}") from error
        except RecursionError as error:
            raise ConfigError(f"{where}: not a JSON record: nested too deep") from error
        except _DuplicateKey as error:
            raise ConfigError(
                f"{where}: not a JSON record: duplicate key {error.args[0]!r}: the second would silently replace "
                "the first (was the line edited by hand?)"
            ) from error
        check_version(record, where)
        check_record(record, where)
        cell = (record["model"], record["variant"])
        if cell in seen:
            raise ConfigError(
                f"{where}: cell {cell[0]}/{cell[1]} recorded twice (first at line {seen[cell]}); "
                "were two sweeps writing to this run directory?"
            )
        seen[cell] = number
        if is_noise_floor(record):  # the one a model's claims are judged against: two would make the order decide
            if record["model"] in floors:
                raise ConfigError(
                    f"{where}: a second noise-floor record for model {record['model']} (first at line "
                    f"{floors[record['model']]}): a model's claims are judged against one"
                )
            floors[record["model"]] = number
        result.records.append(record)
    return result


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of a results file, or of ``results.jsonl`` inside a run directory (see ``load_results``)."""
    return load_results(path).records


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """One results-table row from a record."""
    parity = parity_of(record)
    warm = record.get("warm") or {}
    evidence = record.get("evidence") or {}
    row = {
        **{key: record.get(key) for key in COLUMNS},
        "feature_names": ",".join(sorted(feature_options(record))) or "-",
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


def main(argv: list[str] | None = None) -> int:
    """``python -m accel.results``: print the table of the record's keys (the manual's page of them,
    ``docs/reference/results-record.md``, is written by ``python -m accel.docs_gen``)."""
    import argparse

    argparse.ArgumentParser(prog="python -m accel.results", description=main.__doc__).parse_args(argv)
    print(record_fields_markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
