"""Resuming a run: what was already measured, and refusing a profile that changed since.

The results log is append-only and each record is fsynced, so a sweep killed at any point leaves every
finished cell on disk; at most the line being written when the process died is cut short, and that
line is dropped (its cell is measured again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.errors import ConfigError
from accel.profile import Profile, fingerprint_of, load_profile
from accel.results import RESULTS_FILE, load_results
from accel.yaml_bounds import load_yaml_file

RESOLVED_PROFILE_FILE = "profile.resolved.yaml"
# The (model, variant) cells the run's profile planned, written when the sweep starts: what the gate counts
# as unmeasured without planning (and parsing) the variants again.
PLANNED_CELLS_FILE = "cells.planned.json"


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in old:
                out.append(f"{where} added")
            elif key not in new:
                out.append(f"{where} removed")
            else:
                out += _differences(old[key], new[key], where)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def resolved_profile(run_dir: Path) -> Profile:
    """The profile a run was started with."""
    path = run_dir / RESOLVED_PROFILE_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_PROFILE_FILE}); nothing to resume")
    return load_profile(path)


def check_same_profile(run_dir: Path, profile: Profile) -> None:
    """Refuse to resume with a profile whose content differs from the run's, naming what changed.

    The run's resolved profile is compared as data first (it was written from a validated profile): only
    when that differs is it validated again (a newer omni-accel may fill defaults the file lacks), so a
    resume plans its variants once, when the CLI loads the profile."""
    path = run_dir / RESOLVED_PROFILE_FILE
    try:
        written = load_yaml_file(path, "profile", mapping=False) if path.is_file() else None
    except ConfigError:
        written = None
    if written is not None and fingerprint_of(written) == profile.fingerprint():
        return
    before = resolved_profile(run_dir)
    if before.fingerprint() == profile.fingerprint():
        return
    changes = _differences(before.model_dump(mode="json"), profile.model_dump(mode="json"))
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
    raise ConfigError(
        f"{run_dir}: the profile changed since this run started ({shown}); its results would not be comparable. "
        "Resume with the original profile, or start a new run directory"
    )


def measured_records(run_dir: Path) -> list[dict[str, Any]]:
    """Complete records of a run; a last line cut short by a crash is dropped and trimmed from the file."""
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        return []
    results = load_results(path)
    if results.cut_line is not None:
        with path.open("r+b") as handle:
            handle.truncate(results.complete_bytes)
    return _without_reruns(path, results.records)


# In ``timing``: set on a failed multi-process cell that lost a rank to a signal (``accel.sweep.ranks``).
RERUN_ON_RESUME = "rerun_on_resume"


def _without_reruns(path: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` less those marked ``timing.rerun_on_resume``, which are also taken out of the results file (rewritten
    atomically) so that their new record is the cell's only one."""
    import json
    import os

    kept = [record for record in records if not (record.get("timing") or {}).get(RERUN_ON_RESUME)]
    if len(kept) == len(records):
        return records
    lines = [line for line in path.read_text().splitlines(keepends=True) if line.strip()]
    lines = [line for line in lines if not (json.loads(line).get("timing") or {}).get(RERUN_ON_RESUME)]
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(lines))
    os.replace(partial, path)
    return kept
