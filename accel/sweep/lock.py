"""One sweep at a time per run directory: a lock file holding the owner's PID, host and start time.

The lock is an ``flock`` on ``RUN_DIR/.omni-accel.lock``, held for the sweep's lifetime: the kernel
releases it when the owner exits, however it exits, so a lock left by a killed sweep (SIGKILL, out of
memory, a closed terminal) is stale by construction and the next ``--resume`` takes it over. A second
sweep or resume while the owner is alive is refused (exit 2) with the owner's PID and host. Without it,
two sweeps started into one directory both ran and recorded every cell twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from accel.errors import ConfigError

LOCK_FILE = ".omni-accel.lock"


def describe_owner(owner: dict[str, Any]) -> str:
    """``pid 1234 on host gpu-7 (omni-accel sweep ..., started 2026-11-30 17:02:11 UTC)``."""
    started = owner.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')} ({owner.get('command', '?')}, started {when})"


class RunLock:
    """The lock of one run directory; ``acquire`` it before reading or writing results, ``release`` after."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.fd: int | None = None
        self.stale_owner: dict[str, Any] | None = None  # the killed sweep whose lock was taken over

    def acquire(self) -> None:
        """Take the lock or raise a ConfigError naming the live owner; records this process as the owner."""
        for _ in range(5):  # the owner may remove the file between our open and our flock: try again
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                raise ConfigError(
                    f"{self.run_dir}: in use by another sweep: {describe_owner(owner)}; wait for it to finish, or "
                    f"stop it and continue with 'omni-accel sweep --resume {self.run_dir}'"
                ) from None
            if self._same_file(fd):
                break
            os.close(fd)
        else:  # pragma: no cover - needs five lost races in a row
            raise ConfigError(f"{self.run_dir}: could not take the run directory's lock ({self.path})")
        previous = _read_owner(fd)
        if previous:
            self.stale_owner = previous
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": " ".join(["omni-accel", *sys.argv[1:]])[:200],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        os.fsync(fd)
        self.fd = fd

    def release(self) -> None:
        """Remove the lock file and let go of the lock (idempotent)."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise ConfigError(
                f"{self.path}: cannot create the run directory's lock: {error.strerror or error}"
            ) from error

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False


def _read_owner(fd: int) -> dict[str, Any]:
    try:
        owner = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {"pid": "?", "host": "?", "command": "unreadable lock file"}
    return owner if isinstance(owner, dict) else {}
