"""The run's log file (``RUN/omni-accel.log``): the third-party warnings and library log lines that the quiet
start keeps off the terminal (issue 41), kept instead of thrown away.

``quiet_libraries`` attaches one handler (``HELD``) to the libraries' loggers and to ``py.warnings`` (Python
warnings routed through logging). Quiet, the libraries' lines stop there; with ``--verbose`` they also go on to
the terminal as before. The handler holds what it receives until a sweep names its log file
(``start_run_log``), writes the held lines there, and appends every later line. A cell's worker process
(``executor: process``) keeps its own lines in a scratch file beside its record (``start_worker_log``), each
naming the cell and the worker; the sweep appends them to the run's log when the worker ends
(``relay_worker_log``), a worker that crashed included. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import logging
from pathlib import Path

LOG_FILE = "omni-accel.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class HeldLog(logging.Handler):
    """Holds formatted lines until a log file is named, then appends each line to that file."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(FORMAT))
        self.held: list[str] = []
        self.path: Path | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Hold the line, or append it to the run's log file once there is one."""
        try:
            line = self.format(record)
            if self.path is None:
                self.held.append(line)
                return
            try:
                with self.path.open("a", encoding="utf-8") as log:
                    log.write(line + "\n")
            except OSError:  # the run directory went away: hold it again
                self.held.append(line)
        except Exception:  # a log line must never stop a sweep
            self.handleError(record)

    def add(self, lines: list[str]) -> None:
        """Lines formatted elsewhere (a worker's): appended to the log file, or held until there is one."""
        if self.path is None:
            self.held.extend(lines)
            return
        try:
            with self.path.open("a", encoding="utf-8") as log:
                log.writelines(line + "\n" for line in lines)
        except OSError:  # the run directory went away: hold them again
            self.held.extend(lines)

    def start(self, path: Path) -> None:
        """Write the held lines to ``path`` (appending: a resumed run keeps its earlier log) and send later ones
        there too."""
        with path.open("a", encoding="utf-8") as log:
            log.writelines(line + "\n" for line in self.held)
        self.held.clear()
        self.path = path


HELD = HeldLog()


# Loggers whose warnings are held rather than dropped: those with no handler of their own (torch's ``torch``
# logger, diffusers, transformers and cache_dit print through their own handlers, so they stay at ERROR when quiet).
HELD_LOGGERS = ("torchao", "torch.utils._pytree", "accelerate", "py.warnings")


def hold_library_logs(verbose: bool) -> None:
    """Route ``HELD_LOGGERS``' warnings (Python warnings among them) to ``HELD``; quiet (not ``verbose``), only
    there; with ``verbose`` they also reach the terminal."""
    logging.captureWarnings(False)  # again, in case something (pytest, a caller) replaced showwarning since
    logging.captureWarnings(True)
    for name in HELD_LOGGERS:
        logger = logging.getLogger(name)
        if HELD not in logger.handlers:
            logger.addHandler(HELD)
        logger.propagate = verbose
        logger.setLevel(logging.WARNING)
    root = logging.getLogger()
    if verbose and not root.handlers:
        # logging's last resort (stderr) serves only a line no handler took, and HELD takes every one: without a
        # handler of the root's own, --verbose would show nothing (a worker process, a CLI that set none)
        root.addHandler(logging.StreamHandler())


def start_run_log(run_dir: Path) -> Path:
    """Start the run's log file in ``run_dir``: what was held so far, then every later line."""
    path = run_dir / LOG_FILE
    HELD.start(path)
    return path


def start_worker_log(path: Path, cell: str) -> None:
    """In a cell's worker: send this process's held lines to ``path`` (a scratch file the sweep reads back), each
    naming ``cell`` and the worker's pid. What the worker inherited held from the forkserver's imports is
    dropped: the same imports' lines are the sweep's own, already in its log."""
    HELD.held.clear()
    label = cell.replace("%", "%%")
    HELD.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [cell {label}, worker %(process)d] %(name)s: %(message)s")
    )
    HELD.start(path)


def relay_worker_log(path: Path) -> None:
    """In the sweep: append the lines a worker kept in ``path`` (``start_worker_log``) to the run's log."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # the worker logged nothing (or never started)
        return
    if text:
        HELD.add(text.splitlines())


def stop_run_log() -> None:
    """Hold the lines again (the run's log file is about to be removed with the run directory)."""
    HELD.path = None
