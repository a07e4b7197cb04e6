"""mini-flux's prompt adherence on the held-out combinations, at several true-CFG scales.

Loads the committed mini-flux through plain ``DiffusionPipeline.from_pretrained`` (the zoo directory),
generates every held-out prompt (combinations never seen in training) for each seed, scores each image
against its caption's ground truth and prints, per guidance setting, each attribute kind's share with a
95% interval, and the median time of one call. ``--grid`` saves the first images as one PNG.

    python benchmarks/mini_flux_adherence.py [--seeds 0 1 2] [--cfg 1 2 3] [--steps 20] [--source DIR | --weights DIR]
        [--seen] [--grid grid.png] [--features '{"cache_dit": {"residual_diff_threshold": 0.5}}' ...]

``--cfg 1`` is the pipeline's default (no true CFG; mini-flux is guided by training); ``>1`` runs true CFG
with an empty negative prompt.
``--seen`` scores the same number of training combinations (new seeds) instead. ``--features`` takes one
or more variants' features (the profile's YAML/JSON form): the plain pipeline runs first, then each variant
applied through ``accel.apply`` (and removed after it), each printing how many steps a cache reused and, as
the gate counts it, the share of attributes it lost against the plain pipeline image by image (gains on
other images do not offset it) and the share it gained.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from accel.sweep.preload import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=None, help="checkpoint directory (default: the zoo's mini-flux)")
    parser.add_argument("--weights", default=None, help="a training's output (omni-accel zoo train --out DIR)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cfg", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seen", action="store_true", help="score training combinations instead")
    parser.add_argument("--grid", default=None, help="save the first 16 images (first cfg) to this PNG")
    parser.add_argument("--features", nargs="+", default=[], help="variants' features as YAML, each applied in turn")
    args = parser.parse_args()
    quiet_libraries()

    import torch
    from diffusers import DiffusionPipeline

    from accel import zoo
    from accel.measure.adherence import ATTRIBUTES, paired_loss, score, summarise
    from accel.zoo import world

    torch.set_num_threads(args.threads)
    if args.weights:  # weights a retrain wrote, assembled as the zoo assembles the committed ones
        import diffusers

        from accel.zoo import mini_flux

        entry = zoo.get_entry("mini-flux")
        components = mini_flux.build_mini_flux(entry.config, weights_dir=Path(args.weights))
        pipe = getattr(diffusers, entry.pipeline_class)(**components)
    else:
        pipe = DiffusionPipeline.from_pretrained(args.source or str(zoo.build("mini-flux")))
    pipe.set_progress_bar_config(disable=True)
    scenes = list(world.HELD_OUT_SCENES)
    if args.seen:
        training = world.training_scenes()
        scenes = [training[(i * 97) % len(training)] for i in range(len(scenes))]
    prompts = [scene.caption(i) for i, scene in enumerate(scenes)]
    expected = [scene.named_by(i) for i, scene in enumerate(scenes)]
    print(
        f"{'seen' if args.seen else 'held-out'}: {len(prompts)} prompts x {len(args.seeds)} seeds, {args.steps} steps"
    )
    variants: list[str | None] = [None, *args.features] if args.features else [None]
    baseline: dict[str, dict[str, int]] = {}
    for features in variants:
        applied = None
        if features is not None:
            import yaml

            from accel import apply
            from accel.features import validate_variant_features

            configs = validate_variant_features(yaml.safe_load(features), "--features")
            applied = apply(pipe, *configs.values(), num_inference_steps=args.steps)
            print(f"features {features}:")
        elif args.features:
            print("baseline (no features):")
        for cfg in args.cfg:
            scores, keys, times, images = [], [], [], []
            for seed in args.seeds:
                for i, (scene, prompt) in enumerate(zip(expected, prompts, strict=True)):
                    extra = {"true_cfg_scale": cfg, "negative_prompt": ""} if cfg > 1 else {}
                    began = time.perf_counter()
                    image = pipe(
                        prompt,
                        height=64,
                        width=64,
                        num_inference_steps=args.steps,
                        max_sequence_length=32,
                        generator=torch.Generator().manual_seed(seed),
                        **extra,
                    ).images[0]
                    times.append(time.perf_counter() - began)
                    scores.append(score(scene, image))
                    keys.append(f"cfg{cfg:g}_p{i}_s{seed}")
                    images.append(image)
            summary = summarise(scores, keys)
            parts = ", ".join(
                f"{k} {summary[k]:.3f} [{summary[f'{k}_ci'][0]:.2f}, {summary[f'{k}_ci'][1]:.2f}]"
                for k in (*ATTRIBUTES, "overall")
            )
            named = [s for s in scores if "position" in s]
            open_ = [s for s in scores if "position" not in s]
            all_three = sum(s["background"] * s["colour"] * s["position"] for s in named) / max(1, len(named))
            print(f"cfg {cfg:g}: {parts}; background+colour+position all right {all_three:.3f}; "
                  f"median call {statistics.median(times) * 1e3:.0f} ms")  # fmt: skip
            print(f"  position named: overall {summarise(named)['overall']:.3f} ({len(named)} images); "
                  f"position open: overall {summarise(open_)['overall']:.3f} ({len(open_)} images)")  # fmt: skip
            if features is None:
                baseline.update(summary["per_image"])
            else:
                paired = paired_loss(baseline, summary["per_image"])
                print(f"  vs baseline, image by image: lost {paired['loss']:.3f}, gained {paired['gained']:.3f} "
                      f"({paired['images']} images)")  # fmt: skip
            if applied is not None:
                print("  " + "; ".join(f"{name}: {e['summary']}" for name, e in applied.evidence().items()))
            if args.grid and cfg == args.cfg[0] and features is None:
                from PIL import Image

                sheet = Image.new("RGB", (64 * 8, 64 * 2), "white")
                for i, image in enumerate(images[:16]):
                    sheet.paste(image, (64 * (i % 8), 64 * (i // 8)))
                sheet.resize((128 * 8, 128 * 2), Image.NEAREST).save(args.grid)
        if applied is not None:
            applied.remove()


if __name__ == "__main__":
    main()
