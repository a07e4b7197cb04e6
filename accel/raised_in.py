"""Where a cell's crash was raised: the code that owns a failure, as a refusal names its owner.

A failed cell's error alone ("RuntimeError: chunk expects at least a 1-dimensional tensor") does not say whose
code failed: diffusers' FasterCache splitting a 0-d timestep, a model's forward handed a cached tensor of another
shape by a library hook, or omni-accel's own code. ``raised_in`` walks the exception's traceback to the innermost
frame outside torch and Python's own library (torch raises for its callers' arguments) and names its package
(``diffusers``, ``transformers``, ``cache_dit``, ``torchao``, ``omni-accel``, ...), file and function.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path
from typing import Any

HARNESS = "omni-accel"
# Packages whose frames are passed over: they raise for what their caller handed them.
PASSED_OVER = ("torch", "typing_extensions")
# omni-accel's own package folder, wherever it is installed (editable or in site-packages): a frame is the
# harness's only when its file is inside it, not when some other folder on its path is named ``accel``.
HARNESS_ROOT = Path(os.path.realpath(__file__)).parent


def _package(filename: str) -> tuple[str, str] | None:
    """(package, path inside it) of a frame's file; None for torch's and the standard library's own frames."""
    if filename.startswith("<"):  # exec'd or generated code (<string>, <eval_with_key>): no file of anyone's
        return None
    path = Path(filename)
    real = Path(os.path.realpath(filename))  # a relative name would resolve against the working directory
    if real.is_relative_to(HARNESS_ROOT):
        return HARNESS, (Path(HARNESS_ROOT.name) / real.relative_to(HARNESS_ROOT)).as_posix()
    parts = path.parts
    if "site-packages" in parts or "dist-packages" in parts:
        index = max(i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages"))
        inside = parts[index + 1 :]
        if not inside or inside[0] in PASSED_OVER:
            return None
        return inside[0], "/".join(inside[1:]) or inside[0]
    stdlib = sysconfig.get_paths().get("stdlib", "")
    if stdlib and filename.startswith(stdlib):
        return None
    return path.stem, path.name


def raised_in(error: BaseException) -> dict[str, Any] | None:
    """The innermost frame of ``error``'s traceback outside torch and the standard library: ``package``,
    ``where`` (file:line in function). None when every frame is theirs."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        owner = _package(frame.filename)
        if owner is not None:
            package, inside = owner
            return {"package": package, "where": f"{inside}:{frame.lineno} in {frame.name}"}
    return None


def failure_owner_words(raised: dict[str, Any] | None) -> str:
    """How a table names where a failed cell's error was raised ("" when unknown)."""
    if not raised:
        return ""
    if raised.get("package") == HARNESS:
        return f"failed inside omni-accel ({raised.get('where')}), a harness defect: "
    return f"failed inside {raised.get('package')} ({raised.get('where')}): "
