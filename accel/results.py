"""The results schema and store: an append-only JSONL log and the tables built from it.

This is the only module that touches pandas. Every measured cell is appended as one JSON line, flushed
and fsynced before the next cell starts, so a crash loses nothing already measured. PSNR of identical
outputs is ``inf``: stored as JSON ``Infinity`` and printed as ``inf``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from accel.errors import ConfigError

RESULTS_FILE = "results.jsonl"
TABLE_FILE = "results.parquet"

# Flat columns of the results table, in report order.
COLUMNS = [
    "model", "variant", "status", "decided", "feature_names", "device", "dtype",
    "warm_median_s", "warm_cv", "speedup", "load_s", "first_call_s", "cold_s",
    "peak_host_rss_bytes", "peak_device_allocated_bytes",
    "ssim", "ssim_min", "psnr", "psnr_min", "mean_abs_diff", "max_abs_diff", "bit_identical",
    "outputs_stable", "evidence_summary", "error", "cell_wall_s",
]  # fmt: skip


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


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of a results file, or of ``results.jsonl`` inside a run directory."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: results file not found")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            # A line cut by a crash mid-write is the only expected case: it can only be the last one.
            raise ConfigError(f"{path}:{number}: not a JSON record: {error.msg}") from error
    return records


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


def to_frame(records: list[dict[str, Any]]):
    """A pandas DataFrame with one row per cell and the ``COLUMNS`` columns."""
    import pandas as pd

    return pd.DataFrame([flatten(r) for r in records], columns=COLUMNS)


def write_table(records: list[dict[str, Any]], run_dir: str | Path) -> Path:
    """Write ``results.parquet`` next to the log and return its path."""
    path = Path(run_dir) / TABLE_FILE
    to_frame(records).to_parquet(path, index=False)
    return path
