"""The run's log file (``RUN/omni-accel.log``): the third-party warnings and library log lines that the quiet
start keeps off the terminal (issue 41), kept instead of thrown away.

``quiet_libraries`` attaches one handler (``HELD``) to the libraries' loggers and to ``py.warnings`` (Python
warnings routed through logging). Quiet, the libraries' lines stop there; with ``--verbose`` they also go on to
the terminal as before. The handler holds what it receives until a sweep names its log file
(``start_run_log``), writes the held lines there, and appends every later line. Importing this module imports
nothing heavy.
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


def start_run_log(run_dir: Path) -> Path:
    """Start the run's log file in ``run_dir``: what was held so far, then every later line."""
    path = run_dir / LOG_FILE
    HELD.start(path)
    return path


def stop_run_log() -> None:
    """Hold the lines again (the run's log file is about to be removed with the run directory)."""
    HELD.path = None
