"""The run's log file (issue 41, item 6): the third-party warnings the quiet start keeps off the terminal are
kept in ``RUN/omni-accel.log`` (and shown with ``--verbose``), not thrown away."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings

import pytest
import yaml
from conftest import small_profile

from accel.sweep import runlog
from accel.sweep.quiet import quiet_libraries


@pytest.fixture
def held(monkeypatch):
    """A fresh held log for the test (the session's own stays as it was)."""
    fresh = runlog.HeldLog()
    monkeypatch.setattr(runlog, "HELD", fresh)
    loggers = {name: logging.getLogger(name) for name in runlog.HELD_LOGGERS}
    saved = {name: (list(lg.handlers), lg.propagate, lg.level) for name, lg in loggers.items()}
    yield fresh
    for name, (handlers, propagate, level) in saved.items():
        loggers[name].handlers[:] = handlers
        loggers[name].propagate, loggers[name].level = propagate, level
    quiet_libraries()  # the session's setting again (conftest)


@pytest.mark.parametrize("verbose", [False, True])
def test_library_warnings_are_kept_for_the_log_and_shown_only_when_verbose(held, tmp_path, capsys, verbose):
    terminal: list[str] = []  # what reaches the root logger: what a terminal shows (logging's last resort)
    root_handler = logging.Handler()
    root_handler.emit = lambda record: terminal.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(root_handler)
    quiet_libraries(verbose)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)  # pytest's own catch_warnings replaced showwarning for this test
        logging.getLogger("torchao").warning("Failed to load _C_mxfp8 (a library's import-time line)")
        warnings.warn("a deprecated enum (a Python warning)", UserWarning, stacklevel=1)
    logging.getLogger().removeHandler(root_handler)
    shown = capsys.readouterr().err + "".join(terminal)
    assert ("_C_mxfp8" in shown and "deprecated enum" in shown) == verbose, shown
    log = runlog.start_run_log(tmp_path)
    logging.getLogger("torch.utils._pytree").warning("after the log started")
    text = log.read_text()
    for line in ("_C_mxfp8", "deprecated enum", "after the log started"):
        assert line in text, text


def _third_party_lines() -> list[str]:
    """What importing the libraries prints in this environment with nothing silenced (may be nothing)."""
    code = "import torch, torchao, diffusers"
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    return [line for line in done.stderr.splitlines() if line.strip()]


def test_a_sweeps_run_directory_keeps_the_import_warnings_it_did_not_print(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(small_profile()))
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [sys.executable, "-m", "accel", "sweep", str(profile), "--out", str(run), "--executor", "inline"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    log = (run / runlog.LOG_FILE).read_text()
    for line in _third_party_lines():  # each library line kept off the terminal is in the log
        message = re.sub(r"^[A-Z]\d{4} [\d:.]+ \d+ \S+\] ", "", line)  # torch's own prefix (W1206 06:27:52 ...)
        assert message not in done.stdout + done.stderr, line
        assert message in log, (line, log)


WORKER_SCRIPT = """
import sys
from pathlib import Path
from accel.profile import parse_profile
from accel.sweep import runlog
from accel.sweep.quiet import quiet_libraries
from accel.sweep.runner import plan
from accel.sweep.workers import run_in_process
import yaml

quiet_libraries(verbose=sys.argv[3] == "1")
run = Path(sys.argv[2])
run.mkdir()
runlog.start_run_log(run)
cell = plan(parse_profile(yaml.safe_load(Path(sys.argv[1]).read_text())), run)[0]
print("status:", run_in_process(cell, 600)["status"])
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_warning_in_a_cells_worker_lands_in_the_runs_log_naming_the_cell(tmp_path, verbose):
    """executor: process: a warning raised in the worker is in the run's log, the line naming the cell and the
    worker; on the terminal only with --verbose."""
    profile = small_profile(["tiny-flux"], [], steps=1)
    profile["measure"] = {"warmup": 0, "repeats": 1, "noise_floor": False, "pairs": 1}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile))
    env = {
        **os.environ,
        "OMNI_ACCEL_FAULT": "warn:tiny-flux/baseline",
        "OMNI_ACCEL_VERBOSE": "1" if verbose else "0",
    }
    command = [
        sys.executable,
        "-c",
        WORKER_SCRIPT,
        str(tmp_path / "p.yaml"),
        str(tmp_path / "run"),
        env["OMNI_ACCEL_VERBOSE"],
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert "status: ok" in done.stdout, done.stdout + done.stderr[-2000:]
    message = "omni-accel test fault: a library's warning in the cell's worker"
    log = (tmp_path / "run" / runlog.LOG_FILE).read_text()
    lines = [line for line in log.splitlines() if message in line and "py.warnings" in line]  # not its source line
    assert len(lines) == 1, log
    assert re.search(r"\[cell tiny-flux/baseline, worker \d+\] py\.warnings", lines[0]), lines[0]
    assert (message in done.stdout + done.stderr) == verbose, done.stderr[-2000:]
