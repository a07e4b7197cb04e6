"""Runs one cell inside vLLM-Omni's own environment. Standalone: imports nothing from omni-accel.

    python vllm_omni_runner.py SPEC.json

SPEC: {"checkpoint", "dtype", "engine_kwargs", "requests": [{"prompt", "seed", "steps", "height", "width",
"guidance_scale", "max_sequence_length"}], "warmup", "repeats", "outputs"}. Writes the last pass's
images (float32 in [0, 1], one array per request) to ``outputs`` (.npz) and prints one JSON line on
stdout prefixed with ``OMNI_ACCEL_RESULT `` holding the timings measured here.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    import numpy as np
    from vllm_omni import Omni
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    started = time.perf_counter()
    omni = Omni(model=spec["checkpoint"], dtype=spec["dtype"], **spec["engine_kwargs"])
    init_s = time.perf_counter() - started
    samples: list[float] = []
    calls: list[float] = []
    images: dict[str, np.ndarray] = {}
    try:
        for repeat in range(spec["warmup"] + spec["repeats"]):
            for index, request in enumerate(spec["requests"]):
                params = OmniDiffusionSamplingParams(
                    num_inference_steps=request["steps"],
                    height=request["height"],
                    width=request["width"],
                    guidance_scale=request["guidance_scale"],
                    seed=request["seed"],
                    max_sequence_length=request["max_sequence_length"],
                )
                begun = time.perf_counter()
                outputs = omni.generate([request["prompt"]], params, use_tqdm=False)
                elapsed = time.perf_counter() - begun
                calls.append(elapsed)
                if repeat >= spec["warmup"]:
                    samples.append(elapsed)
                image = outputs[0].images[0].convert("RGB")
                images[f"r{index}"] = np.asarray(image, dtype=np.float32)[None] / 255.0
    finally:
        omni.close()
    np.savez(spec["outputs"], **images)  # type: ignore[arg-type]  # numpy's stub matches **images to allow_pickle
    result = {"init_s": init_s, "first_call_s": calls[0], "all_calls_s": calls, "warm_samples": samples}
    print("OMNI_ACCEL_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
