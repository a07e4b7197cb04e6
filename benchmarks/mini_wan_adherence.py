"""mini-wan's prompt adherence on the held-out combinations, with both experts and with every step on one.

Assembles the committed mini-wan (or a retrain's ``--weights``) into a ``WanPipeline``, generates every
held-out caption (combinations never seen in training) for each seed, scores each video against its
caption's ground truth (``accel.measure.video_adherence``: background colour, ball colour, direction of
motion, persistence) and prints, per guidance scale and expert setting, each attribute kind's share with a
95% interval, and what one-expert runs lost against both experts video by video.

    python benchmarks/mini_wan_adherence.py [--seeds 0 1 2] [--cfg 1 5] [--cfg2 3] [--steps 20] [--weights DIR]
        [--experts both transformer transformer_2] [--seen] [--diagnose] [--swap vae=FILE] [--boundary 0.65]

``--experts transformer`` runs every step on the high-noise expert, ``transformer_2`` every step on the
low-noise one (the pipeline's ``boundary_ratio`` moved; ``accel.measure.mini_wan_eval.only_expert``). ``--cfg 1``
runs without classifier-free guidance; above 1 with an empty negative prompt (the pipeline's default). ``--cfg2``
guides the low-noise expert's steps apart (``WanPipeline``'s ``guidance_scale_2``; every pair is run).
``--seen`` scores as many training combinations (new seeds) instead. ``--swap vae=FILE`` (or ``transformer``,
``transformer_2``) scores with one component's weights taken from a file (``mini_wan_decoder.py --save``,
``mini_wan_direction.py --save``); ``--boundary`` moves the experts' switch at inference, a diagnosis only.
``--diagnose`` first prints what limits
the model: the VAE's round trip of the scenes' rendered videos (``vae_round_trip_adherence``), what the
pipeline keeps of other rendered videos handed to it noised to the experts' switch, to sigma 0.75, 0.6 and 0.5,
and at 0 (their round trip; ``finish_from_truth``, at the last ``--cfg`` / ``--cfg2``) and whether each expert
reads a direction word and a colour word at a noise level of its own (``caption_preference``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from accel.sweep.preload import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=None, help="a training's output (omni-accel zoo train --out DIR)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cfg", type=float, nargs="+", default=[1.0, 5.0])
    low_noise = "the low-noise expert's guidance (WanPipeline's guidance_scale_2); default: --cfg's"
    parser.add_argument("--cfg2", type=float, nargs="+", default=None, help=low_noise)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--experts", nargs="+", default=["both", "transformer", "transformer_2"])
    parser.add_argument("--seen", action="store_true", help="score training combinations instead")
    parser.add_argument("--diagnose", action="store_true", help="first the VAE round trip and the word responses")
    swap = "COMPONENT=FILE: load a component's weights from a safetensors file (e.g. mini_wan_decoder.py --save)"
    parser.add_argument("--swap", nargs="+", default=[], metavar="COMPONENT=FILE", help=swap)
    moved = "move the experts' switch at inference (a diagnosis: the experts then run sigmas they never learnt)"
    parser.add_argument("--boundary", type=float, nargs="+", default=[None], help=moved)
    args = parser.parse_args()
    quiet_libraries()

    import torch

    from accel.measure import mini_wan_eval
    from accel.measure.adherence import paired_loss
    from accel.measure.video_adherence import VIDEO_ATTRIBUTES
    from accel.zoo import video_world

    torch.set_num_threads(args.threads)
    pipe = mini_wan_eval.load_pipeline(Path(args.weights) if args.weights else None)
    for item in args.swap:
        component, _, path = item.partition("=")
        if component not in ("vae", "transformer", "transformer_2", "text_encoder") or not path:
            parser.error(f"--swap {item}: expected COMPONENT=FILE, COMPONENT one of vae, transformer, transformer_2, "
                         "text_encoder")  # fmt: skip
        from safetensors.torch import load_file

        getattr(pipe, component).load_state_dict(load_file(path))
        print(f"{component}: weights from {path}")
    scenes = list(video_world.HELD_OUT_SCENES)
    if args.seen:
        training = video_world.training_scenes()
        scenes = [training[(i * 37) % len(training)] for i in range(len(scenes))]
    which = "seen" if args.seen else "held-out"
    if args.diagnose:
        trip = mini_wan_eval.vae_round_trip_adherence(pipe.vae, scenes, args.seeds)
        print(
            f"VAE round trip of {which} rendered videos: " + ", ".join(f"{k} {trip[k]:.3f}" for k in VIDEO_ATTRIBUTES)
        )
        guidance = (args.cfg[-1], (args.cfg2 or args.cfg)[-1])
        for sigma in sorted({pipe.config.boundary_ratio, 0.75, 0.6, 0.5, 0.0}, reverse=True):
            kept = mini_wan_eval.finish_from_truth(pipe, scenes, args.seeds, sigma, *guidance, steps=args.steps)
            print(
                f"{which} rendered videos noised to sigma {kept['start_sigma']:.3f} and finished by the pipeline "
                f"(guidance {guidance[0]:g} / {guidance[1]:g}): "
                + ", ".join(f"{k} {kept[k]:.3f}" for k in VIDEO_ATTRIBUTES)
            )
        base = video_world.VideoScene("blue", "red", "left")
        for word, other in (("direction", video_world.VideoScene("blue", "red", "right")),
                            ("colour", video_world.VideoScene("blue", "green", "left"))):  # fmt: skip
            for expert, sigma in (("transformer", 0.85), ("transformer_2", 0.5)):
                r = mini_wan_eval.caption_preference(pipe, base, other, expert, sigma)
                print(f"{expert} at sigma {sigma}, {word} word: wrong/right caption MSE {r['ratio']:.3f}, "
                      f"right caption closer on {r['right_closer']:.2f} of draws")  # fmt: skip
    print(f"{which}: {len(scenes)} captions x {len(args.seeds)} seeds, {args.steps} steps")
    trained = pipe.config.boundary_ratio
    settings = [(b, cfg, cfg2) for b in args.boundary for cfg in args.cfg for cfg2 in (args.cfg2 or [None])]
    for boundary, cfg, cfg2 in settings:
        pipe.register_to_config(boundary_ratio=trained if boundary is None else boundary)
        switch = "" if boundary is None else f", switch at {boundary:g} (trained at {trained:g})"
        both: dict[str, dict[str, int]] = {}
        for experts in args.experts:
            began = time.perf_counter()
            with mini_wan_eval.only_expert(pipe, None if experts == "both" else experts):
                summary = mini_wan_eval.held_out_adherence(pipe, scenes, args.seeds, cfg, args.steps, cfg2)
            seconds = (time.perf_counter() - began) / summary["n"]
            parts = ", ".join(
                f"{k} {summary[k]:.3f} [{summary[f'{k}_ci'][0]:.2f}, {summary[f'{k}_ci'][1]:.2f}]"
                for k in (*VIDEO_ATTRIBUTES, "overall")
            )
            label = f"cfg {cfg:g}" if cfg2 is None else f"cfg {cfg:g} / {cfg2:g} (high / low noise)"
            print(f"{label}{switch}, experts {experts}: {parts}; {seconds:.2f} s a video")
            if experts == "both":
                both = summary["per_image"]
            elif both:
                paired = paired_loss(both, summary["per_image"])
                kinds = ", ".join(f"{k} {v:.3f}" for k, v in paired["by_kind"].items())
                print(f"  vs both experts, video by video: lost {paired['loss']:.3f} ({kinds}), "
                      f"gained {paired['gained']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
