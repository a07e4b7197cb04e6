"""mini-flux's training loop: the thread count re-chosen under contention, the log, the schedule, the step loop.

The machinery every training stage of ``accel.zoo.mini_flux_train`` runs in, apart from what it learns:
``ThreadPicker`` (1 or 2 torch threads, whichever is faster at the moment), ``TrainLog`` (the lines of
``train_log.txt``), the warmup-then-cosine learning rate and the loop that runs a stage's steps.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


class ThreadPicker:
    """Choose the torch thread count that is fastest right now, re-measured every ``every`` steps.

    Under contention two threads can be several times slower than one (OpenMP barriers wait for a busy
    core); on an idle machine two are faster. While other processes kept at least ``BUSY_CORES`` cores busy
    since the last check (the machine's CPU time minus this process's: its own threads do not count, as
    they would in the load average) it keeps one thread; otherwise each probe times ``probe`` real training
    steps per candidate.
    """

    BUSY_CORES = 0.5

    def __init__(self, candidates: list[int], every: int = 250, probe: int = 2):
        self.candidates = candidates
        self.every = every
        self.probe = probe
        self.current = candidates[0]
        self._probing = False
        self._times: dict[int, list[float]] = {}
        self._since = self._cpu_snapshot()

    @staticmethod
    def _cpu_snapshot() -> tuple[float, float, float]:
        """(wall clock, the machine's busy CPU seconds, this process's CPU seconds)."""
        import psutil

        from accel.cpu_time import machine_busy_seconds

        own = psutil.Process().cpu_times()
        return time.perf_counter(), machine_busy_seconds(), own.user + own.system

    def _busy(self) -> bool:
        """Whether other processes kept ``BUSY_CORES`` or more busy since the last call."""
        (wall0, machine0, own0), (wall1, machine1, own1) = self._since, self._cpu_snapshot()
        self._since = (wall1, machine1, own1)
        wall = wall1 - wall0
        return wall > 0 and max(0.0, (machine1 - machine0) - (own1 - own0)) / wall >= self.BUSY_CORES

    def before_step(self, step: int) -> None:
        """Set the thread count for ``step``."""
        window = self.probe * len(self.candidates)
        if len(self.candidates) > 1:
            if step % self.every == 0:
                self._probing = not self._busy()
                if not self._probing:
                    self.current = self.candidates[0]
            if self._probing and step % self.every < window:
                self.current = self.candidates[(step % self.every) % len(self.candidates)]
        torch.set_num_threads(self.current)

    def after_step(self, step: int, seconds: float) -> None:
        """Record a probe step's time; pick the fastest candidate when the probe is complete."""
        window = self.probe * len(self.candidates)
        if not self._probing or step % self.every >= window:
            return
        self._times.setdefault(self.current, []).append(seconds)
        if step % self.every == window - 1:
            self.current = min(self._times, key=lambda n: statistics.median(self._times[n]))
            self._times = {}
            self._probing = False


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _thread_candidates(threads: int | None) -> list[int]:
    if threads:
        return [threads]
    return [1, 2] if usable_cores() >= 2 else [1]


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _begin_step(
    optimizer: torch.optim.Optimizer, step: int, cfg: dict[str, Any], count: int, generator: torch.Generator
) -> torch.Tensor:
    """Every stage's step starts alike: set the scheduled learning rate, then draw the batch's indices."""
    for group in optimizer.param_groups:
        group["lr"] = _lr_at(step, cfg["steps"], cfg["lr"], cfg["warmup"])
    return torch.randint(0, count, (cfg["batch"],), generator=generator)


class TrainLog:
    """Lines written to a log file (and kept) as training goes."""

    def __init__(self, path: Path | None):
        self.path = path
        self.lines: list[str] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def write(self, line: str) -> None:
        """Append one line."""
        self.lines.append(line)
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(line + "\n")


def _loop(
    name: str,
    steps: int,
    step_fn: Callable[[int], float],
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
    model: str = "mini-flux",
) -> dict[str, float]:
    """Run ``step_fn`` for ``steps`` steps with a progress bar (named after ``model``); returns the final loss and
    timing."""
    from tqdm import tqdm

    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(total=steps, desc=f"{model} {name}", disable=not progress, dynamic_ncols=True)
    for step in range(steps):
        picker.before_step(step)
        began = time.perf_counter()
        loss = step_fn(step)
        picker.after_step(step, time.perf_counter() - began)
        losses.append(loss)
        recent = sum(losses[-50:]) / len(losses[-50:])
        bar.update(1)
        bar.set_postfix(loss=f"{recent:.4f}", threads=picker.current)
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log.write(
                f"{name} step {step + 1}/{steps} loss {recent:.5f} threads {picker.current} "
                f"elapsed {time.perf_counter() - start:.0f}s"
            )
    bar.close()
    tail = losses[-50:]
    return {"final_loss": sum(tail) / len(tail), "seconds": time.perf_counter() - start}
