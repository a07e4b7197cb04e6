"""How long one training step of a mini-wan expert takes, eager and through ``torch.compile``, alone and side by side.

The step is the expert stage's own (``mini_wan_train._train_expert``: batch 64 of the recipe's latent shape, the
ball-weighted rectified-flow loss, AdamW, the EMA), on random latents and caption embeddings of the committed
shapes, one torch thread. Each mode runs in fresh processes: ``alone`` one process, ``side by side`` two at once
(as the recipe trains its two experts). Prints the median seconds a step after the first ``--warm`` steps (which
pay the compile) and the eager / compiled ratio for each. Run it on an idle machine: the ratio is measured in one
run, side by side, and the absolute times move with the host.

    python benchmarks/mini_wan_step_time.py [--steps 200] [--warm 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

from accel.sweep.preload import quiet_libraries


def _time_steps(compile: bool, steps: int, warm: int, queue: multiprocessing.Queue) -> None:
    """Train a fresh expert for ``warm + steps`` steps on one thread; put the median of the timed steps."""
    import torch

    from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog
    from accel.zoo.mini_wan_model import MINI_WAN_CONFIG, build_components
    from accel.zoo.mini_wan_train import _train_expert

    torch.set_num_threads(1)
    config = {**MINI_WAN_CONFIG, "train": {**MINI_WAN_CONFIG["train"]}}
    config["train"]["expert"] = {**config["train"]["expert"], "compile": compile, "steps": warm + steps}
    config["train"]["expert"]["steps_by_expert"] = {}
    model = build_components(MINI_WAN_CONFIG)["transformer"]
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(512, 8, 3, 8, 8, generator=generator)
    masks = (torch.rand(512, 1, 3, 8, 8, generator=generator) < 0.15).float()
    embeds = torch.randn(64, 16, 64, generator=generator)
    index = torch.randint(0, 63, (512,), generator=generator)
    stamps: list[float] = []
    _train_expert(
        "transformer", model, latents, masks, embeds, index, 63, config, generator, ThreadPicker([1]), TrainLog(None),
        progress=False, on_step=lambda step, ema: stamps.append(time.perf_counter()),
    )  # fmt: skip
    queue.put(statistics.median(b - a for a, b in zip(stamps[warm:], stamps[warm + 1 :], strict=False)))


def _run(compile: bool, processes: int, steps: int, warm: int) -> list[float]:
    """Median step seconds of each of ``processes`` forked trainers run at once."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_time_steps, args=(compile, steps, warm, queue)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per trainer")
    parser.add_argument("--warm", type=int, default=10, help="untimed first steps (the compile)")
    args = parser.parse_args()
    quiet_libraries()
    for label, processes in (("alone", 1), ("side by side", 2)):
        eager = statistics.mean(_run(False, processes, args.steps, args.warm))
        compiled = statistics.mean(_run(True, processes, args.steps, args.warm))
        print(
            f"{label}: eager {eager:.4f} s a step, compiled {compiled:.4f} s a step: {eager / compiled:.2f}x "
            f"({args.steps} steps after {args.warm}, one thread a trainer)",
            flush=True,
        )


if __name__ == "__main__":
    main()
