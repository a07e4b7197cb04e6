"""mini-flux's training cost per step, stage by stage, at the real batch sizes, with 2 and then 1 torch thread.

Runs 40 text, 40 VAE and 60 transformer steps from the seeded initialisation on 512 images (a few minutes)
and prints seconds per step and the full training's stages projected from them (config step counts). A
projection, not a timed end-to-end run: data generation and latent encoding (about a minute) are not in it.

    OMP_NUM_THREADS=2 python benchmarks/mini_flux_step_times.py
"""

from __future__ import annotations

import copy
import time

import torch
from diffusers import FluxPipeline

from accel.zoo import mini_flux as m
from accel.zoo import mini_flux_train as train


def main() -> None:
    cfg = copy.deepcopy(m.MINI_FLUX_CONFIG)
    t = cfg["train"]
    for threads in (2, 1):
        torch.set_num_threads(threads)
        c = m.build_components(cfg)
        g = torch.Generator().manual_seed(0)
        log = m.TrainLog(None)
        pick = m.ThreadPicker([threads])
        images, captions = m.make_dataset(512, 0)
        images = torch.from_numpy(images)
        r = {}
        s = time.perf_counter()
        train._train_text_encoders(c, dict(t["text"], steps=40), g, pick, log, False)
        r["text"] = (time.perf_counter() - s) / 40
        s = time.perf_counter()
        train._train_vae(c["vae"], images, dict(t["vae"], steps=40), g, pick, log, False)
        r["vae"] = (time.perf_counter() - s) / 40
        lat = train._encode_latents(c["vae"], images)
        pipe = FluxPipeline(**c)
        s = time.perf_counter()
        train._train_transformer(pipe, lat, captions, dict(t["transformer"], steps=60), g, pick, log, False)
        r["transformer"] = (time.perf_counter() - s) / 60
        total = sum(r[k] * t[k]["steps"] for k in r) / 60
        print(
            f"threads {threads}: s/step "
            + ", ".join(f"{k} {v:.3f}" for k, v in r.items())
            + f"; projected stages total {total:.1f} min"
        )


if __name__ == "__main__":
    main()
