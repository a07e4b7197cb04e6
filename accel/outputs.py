"""Where a command may write: one rule for every output path (``gate --junit/--summary``, ``table --inject``,
``sweep --out``, ``tune --out``, ``calibrate --out``, ``diverge --out``, ``roofline --json``, the pytest plugin's
``--accel-out``, ``zoo train --out``).

An output path may not resolve (through links, ``Path.resolve``) to an input of the command, to a file or
folder a run owns (``results.jsonl``, ``results.parquet``, ``outputs/``, ``steps/``, ``images/``,
``profile.resolved.yaml``, ``environment.json``...), to the profile being run, or to anything inside a checkpoint
directory (a folder holding ``model_index.json``) or the zoo cache. The check runs before anything is written,
and a refusal is one line naming the option, the path and why (exit 2): ``gate RUN --junit RUN/results.jsonl``
used to write its XML over the records it judged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from accel.errors import ConfigError

# Files and folders a sweep writes into its run directory (accel.sweep.runner, accel.report): the run's data.
RUN_FILES = (
    "results.jsonl",
    "results.parquet",
    "profile.resolved.yaml",
    "environment.json",
    "cells.planned.json",
    "report.md",
    ".omni-accel.lock",
    "omni-accel.log",
)
RUN_FOLDERS = ("outputs", "steps", "images", "figures")
CHECKPOINT_MARKER = "model_index.json"


def _resolved(path: Path | str) -> Path:
    """``path`` made absolute through every link; a link loop resolves as far as it goes (never raises)."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return Path(os.path.abspath(Path(path).expanduser()))


@dataclass
class Protected:
    """What a command's outputs may not resolve to: ``files`` (resolved path -> why) and ``folders`` (resolved
    folder -> why: nothing inside it may be written)."""

    files: dict[Path, str] = field(default_factory=dict)
    folders: dict[Path, str] = field(default_factory=dict)
    zoo_allowed: bool = False  # ``zoo train`` writes into the zoo cache (not into a built entry: a checkpoint)

    def add_input(self, path: Path | str | None, what: str) -> None:
        """Protect one input of the command (``what``: "the results", "the claims file", ...)."""
        if path is not None:
            self.files.setdefault(_resolved(path), f"it is {what}, an input of this command")

    def add_run(self, run_dir: Path | str) -> None:
        """Protect every file and folder a run directory owns (``RUN_FILES``, ``RUN_FOLDERS``)."""
        root = _resolved(run_dir)
        for name in RUN_FILES:
            self.files.setdefault(root / name, f"it is the run's {name}")
        for name in RUN_FOLDERS:
            self.folders.setdefault(root / name, f"it is inside the run's {name}/")


def _zoo_root() -> Path:
    from accel.zoo import zoo_root

    return _resolved(zoo_root())


def why_protected(path: Path | str, protected: Protected) -> str | None:
    """Why writing ``path`` would destroy something (see the module docstring), or None when it may be written."""
    target = _resolved(path)
    if target in protected.files:
        return protected.files[target]
    for folder, why in protected.folders.items():
        if target == folder or folder in target.parents:
            return why
    for parent in target.parents:  # any run directory's own data, whichever command writes (roofline --json)
        if (parent / "results.jsonl").is_file() or (parent / "profile.resolved.yaml").is_file():
            relative = target.relative_to(parent)
            if str(relative) in RUN_FILES or relative.parts[0] in RUN_FOLDERS:
                return f"it is the run's {relative} (a run directory: {parent})"
    zoo = _zoo_root()
    if target == zoo or (zoo in target.parents and not protected.zoo_allowed):
        return f"it is inside the zoo cache ({zoo}), which holds the zoo's checkpoints"
    for parent in [target, *target.parents]:
        if (parent / CHECKPOINT_MARKER).is_file():
            return f"it is inside the checkpoint directory {parent} (it holds {CHECKPOINT_MARKER})"
    return None


def check_outputs(outputs: Iterable[tuple[Path | None, str]], protected: Protected) -> None:
    """Refuse, before anything is written, an output (path, option) that resolves to something ``protected``
    holds, or two options naming one file: a ConfigError naming the option, the path and why."""
    seen: dict[Path, str] = {}
    for path, option in outputs:
        if path is None:
            continue
        why = why_protected(path, protected)
        if why:
            raise ConfigError(f"{option} {path}: refusing to write there: {why}; choose another path")
        target = _resolved(path)
        if target in seen:
            raise ConfigError(f"{option} {path}: {seen[target]} writes the same file; give each its own path")
        seen[target] = option


def check_files(directory: Path, names: Iterable[str], option: str, inputs: Mapping[str, Path | str | None]) -> None:
    """The files (or folders) ``names`` a command writes in ``directory`` (``tune --out``: recommended.yaml,
    tune.md...; ``diverge --out``): none may resolve to one of its ``inputs`` (what -> path: "the profile being
    tuned" -> the profile), into a run's own data, a checkpoint or the zoo cache. Refused before anything is
    written."""
    protected = Protected()
    for what, path in inputs.items():
        protected.add_input(path, what)
    check_outputs([(directory / name, option) for name in names], protected)


def check_run_dir(run_dir: Path, option: str, profile: Path | str | None, resume: bool = False) -> None:
    """A sweep's run directory: it may not be a file, and none of the files the sweep writes there may resolve
    to the profile being run or into a checkpoint or the zoo cache. A resumed run keeps its
    profile.resolved.yaml (it is read, never rewritten), so that file may be the profile."""
    protected = Protected()
    protected.add_input(profile, "the profile being run")
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{option} {run_dir}: refusing to write there: it is a file, not a run directory")
    check_outputs([(run_dir, option)], protected)
    root = _resolved(run_dir)
    for name in (*RUN_FILES, *RUN_FOLDERS):
        if resume and name == "profile.resolved.yaml":
            continue
        # The run's own files are the sweep's to write (a resumed run appends to its results.jsonl); one that is
        # a link is judged where it leads (into another run, a checkpoint, the profile).
        target = _resolved(run_dir / name)
        why = protected.files.get(target)
        if why is None and target != root / name:
            why = why_protected(target, protected)
        if why:
            raise ConfigError(f"{option} {run_dir}: refusing to write {name} there: {why}; choose another directory")


def check_training_dir(out: Path, option: str, committed: Path) -> None:
    """``zoo train --out``: a new folder, or one of its own, that is not (through links) the ``committed``
    weights or inside them, a run directory or anything inside one, a checkpoint or the zoo cache's root; a
    folder inside the zoo cache (its default, ``<zoo>/<name>-training``) is allowed."""
    protected = Protected(zoo_allowed=True)
    protected.folders[_resolved(committed)] = (
        f"it holds the committed weights ({committed}); train elsewhere, check the run, then copy its files there"
    )
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{option} {out}: refusing to write there: it is a file, not a folder")
    target = _resolved(out)
    if any((target / name).is_file() for name in ("results.jsonl", "profile.resolved.yaml")):
        raise ConfigError(f"{option} {out}: refusing to write there: it is a run directory; choose another path")
    check_outputs([(out, option)], protected)
