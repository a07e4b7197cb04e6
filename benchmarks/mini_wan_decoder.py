"""Fine-tune mini-wan's VAE decoder alone on whole 9-frame videos and measure what it changes.

The encoder (hence every latent the experts were trained on) stays as committed; the decoder and its
``post_quant_conv`` learn to reconstruct the recipe's 3000 training videos: the recipe's own stage
(``mini_wan_train._train_decoder``, ``train.vae_decoder``: 32x32 crops, batch 8, the ball's pixels weighed
``1 + --ball-weight``, warm-up then cosine learning rate), here on one thread from its own generator ``--seed``. Prints
one JSON line before and one after: the VAE's round trip of the 24 held-out scenes' rendered videos x seeds 0 1
and of 24 training scenes (``mini_wan_eval.vae_round_trip_adherence``: colour and direction), and the generated
held-out videos' adherence at guidance 5 (48 videos, 20 steps, both experts). The question it answers: does a
better decoder move what the model generates, or only the round trip (docs/zoo.md, mini-wan, wave 11). Since wave
13 the recipe runs that stage itself: on the committed weights this is a second fine-tune of its decoder.

    python benchmarks/mini_wan_decoder.py [--steps 600] [--weights DIR] [--save vae.safetensors]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from accel.sweep.preload import quiet_libraries


def _measure(pipe: Any, tag: str) -> None:
    import torch

    from accel.measure import mini_wan_eval
    from accel.zoo import video_world

    pipe.vae.eval()
    training = video_world.training_scenes()
    seen = [training[(i * 37) % len(training)] for i in range(24)]
    with torch.no_grad():
        held = mini_wan_eval.vae_round_trip_adherence(pipe.vae, list(video_world.HELD_OUT_SCENES), [0, 1])
        trained = mini_wan_eval.vae_round_trip_adherence(pipe.vae, seen, [0, 1])
        generated = mini_wan_eval.held_out_adherence(pipe, list(video_world.HELD_OUT_SCENES), [0, 1], 5.0)
    kinds = ("background", "colour", "direction", "persistence", "overall")
    print(json.dumps({
        "tag": tag,
        "round_trip_held_out": {k: round(held[k], 3) for k in ("colour", "direction")},
        "round_trip_training": {k: round(trained[k], 3) for k in ("colour", "direction")},
        "generated_held_out_guidance_5": {k: round(generated[k], 3) for k in kinds},
    }), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--ball-weight", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--weights", default=None, help="a training's output (omni-accel zoo train --out DIR)")
    parser.add_argument("--save", default=None, help="write the fine-tuned VAE here (safetensors)")
    args = parser.parse_args()
    quiet_libraries()

    import torch

    from accel.measure import mini_wan_eval
    from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog
    from accel.zoo.mini_wan_model import MINI_WAN_CONFIG
    from accel.zoo.mini_wan_train import _train_decoder, make_dataset

    torch.set_num_threads(1)
    pipe = mini_wan_eval.load_pipeline(Path(args.weights) if args.weights else None)
    vae = pipe.vae
    _measure(pipe, "as committed")
    videos = torch.from_numpy(make_dataset(MINI_WAN_CONFIG["train"]["videos"], MINI_WAN_CONFIG["train"]["seed"])[0])
    # The recipe's ``train.vae_decoder`` (in the committed recipe since wave 13, so this fine-tunes a decoder the
    # recipe already fine-tuned; a weights directory without the stage is measured the same way), else the
    # whole-video VAE stage's settings, the keys ``_train_decoder`` reads.
    train_cfg = MINI_WAN_CONFIG["train"]
    cfg = {**train_cfg.get("vae_decoder", train_cfg["vae_videos"]), "steps": args.steps, "lr": args.lr}
    cfg["ball_weight"] = args.ball_weight
    began = time.perf_counter()
    result = _train_decoder(vae, videos, cfg, torch.Generator().manual_seed(args.seed), ThreadPicker([1]),
                            TrainLog(None), progress=False)  # fmt: skip
    print(json.dumps({"steps": args.steps, "final_loss": round(result["final_loss"], 4),
                      "train_s": round(time.perf_counter() - began)}), flush=True)  # fmt: skip
    _measure(pipe, f"decoder fine-tuned {args.steps} steps")
    if args.save:
        from safetensors.torch import save_file

        save_file(vae.state_dict(), args.save)


if __name__ == "__main__":
    main()
