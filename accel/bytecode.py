"""Byte-compile what a sweep imports, once, right after installation (``make sweep``'s setup).

pip byte-compiles every file it installs, one after another: on a fresh 2-core machine that was about 90 of
the 140 s the runtime dependencies took to install, mostly for modules a sweep never imports. The Makefile
installs with ``pip install --no-compile`` and runs ``python -m accel.bytecode`` instead: two interpreters
import, at once, the modules a sweep's parent, forkserver and workers import, with bytecode writing on even
where ``PYTHONDONTWRITEBYTECODE`` is set (as on our machines: without cached bytecode, every worker would
compile torch again). A module imported later and not cached here is compiled when it is imported.

Nothing in ``pip`` or ``compileall`` compiles by what is imported, and ``compileall`` over the whole
environment took 52 s on the same machine (this: about 35 s).
"""

from __future__ import annotations

import os
import subprocess
import sys

# Two groups of about equal import time, one interpreter each (both import torch). The second also compiles the
# whole ``accel`` package (small, and a cell imports most of it).
IMPORT_GROUPS: tuple[tuple[str, ...], ...] = (
    # The forkserver's preload: torch, diffusers, the zoo's pipeline classes and what they import.
    ("accel.sweep.preload",),
    # The sweep's parent (CLI, profile, checks, parity, gate, report, tables) and what a cell's features import.
    (
        "accel.cli",
        "accel.features",
        "cache_dit",
        "diffusers.guiders",
        "torch.utils.flop_counter",
        "torchmetrics.functional.image",
        "matplotlib.pyplot",
        "matplotlib.backends.backend_agg",
        "pandas",
        "pyarrow.parquet",
        "PIL.Image",
        "PIL.PngImagePlugin",
        "psutil",
        "rich.progress",
    ),
)
COMPILE_ACCEL = "import compileall, accel; compileall.compile_dir(accel.__path__[0], quiet=2)"


def main() -> int:
    """Import every group in its own interpreter, at once; 1 (with the error) when an import failed."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # an import must not initialise a GPU here
    commands = ["import " + ", ".join(group) for group in IMPORT_GROUPS]
    commands[-1] += "; " + COMPILE_ACCEL
    children = [
        subprocess.Popen(
            [sys.executable, "-c", command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    failed = 0
    for group, child in zip(IMPORT_GROUPS, children, strict=True):
        _, errors = child.communicate()
        if child.returncode != 0:
            failed = 1
            last = errors.strip().splitlines()[-1] if errors.strip() else f"exit {child.returncode}"
            print(f"accel.bytecode: importing {', '.join(group)} failed: {last}", file=sys.stderr)
    return failed


if __name__ == "__main__":
    sys.exit(main())
