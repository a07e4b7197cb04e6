"""Fine-tune mini-wan's VAE decoder alone on whole 9-frame videos and measure what it changes.

The encoder (hence every latent the experts were trained on) stays as committed; the decoder and its
``post_quant_conv`` learn to reconstruct the recipe's 3000 training videos (32x32 crops, batch 8, the ball's pixels
weighed ``1 + --ball-weight``, warm-up then cosine learning rate, one thread, its own generator ``--seed``). Prints
one JSON line before and one after: the VAE's round trip of the 24 held-out scenes' rendered videos x seeds 0 1
and of 24 training scenes (``mini_wan_eval.vae_round_trip_adherence``: colour and direction), and the generated
held-out videos' adherence at guidance 5 (48 videos, 20 steps, both experts). The question it answers: does a
better decoder move what the model generates, or only the round trip (docs/zoo.md, mini-wan, wave 11).

    python benchmarks/mini_wan_decoder.py [--steps 600] [--weights DIR] [--save vae.safetensors]
"""

from __future__ import annotations

import argparse
import json
import math
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
    from accel.zoo.mini_wan_model import MINI_WAN_CONFIG
    from accel.zoo.mini_wan_train import ball_weighting, make_dataset

    torch.set_num_threads(1)
    pipe = mini_wan_eval.load_pipeline(Path(args.weights) if args.weights else None)
    vae = pipe.vae
    _measure(pipe, "as committed")
    videos = torch.from_numpy(make_dataset(MINI_WAN_CONFIG["train"]["videos"], MINI_WAN_CONFIG["train"]["seed"])[0])
    vae.requires_grad_(False)
    decoder = [*vae.post_quant_conv.parameters(), *vae.decoder.parameters()]
    for parameter in decoder:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(decoder, lr=args.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    weight = ball_weighting(args.ball_weight)
    assert weight is not None
    crop, began = 32, time.perf_counter()
    vae.train()
    for step in range(args.steps):
        scale = min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in optimizer.param_groups:
            group["lr"] = args.lr * scale
        batch = videos[torch.randint(0, videos.shape[0], (8,), generator=generator)]
        y, x = (int(v) for v in torch.randint(0, videos.shape[-1] - crop + 1, (2,), generator=generator))
        batch = batch[..., y : y + crop, x : x + crop]
        with torch.no_grad():
            posterior = vae.encode(batch).latent_dist
            latent = posterior.mean + posterior.std * torch.randn(posterior.mean.shape, generator=generator)
        squared = (vae.decode(latent).sample - batch) ** 2
        weights = weight(batch).expand_as(squared)
        loss = (weights * squared).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(json.dumps({"steps": args.steps, "final_loss": round(loss.item(), 4),
                      "train_s": round(time.perf_counter() - began)}), flush=True)  # fmt: skip
    _measure(pipe, f"decoder fine-tuned {args.steps} steps")
    if args.save:
        from safetensors.torch import save_file

        save_file(vae.state_dict(), args.save)


if __name__ == "__main__":
    main()
