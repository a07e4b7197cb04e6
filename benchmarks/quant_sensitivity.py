"""int8 weight-only on mini-flux: SSIM against the unquantized baseline with every Linear layer of the
transformer quantized, and with the sensitivity table's top layers left unquantized (``exclude``).

The table is computed on the workload's first request (``accel.diverge.sensitivity``); SSIM is measured on the
whole workload of profiles/quickstart.yaml (every prompt and image), so the exclusion is judged on prompts it
was not chosen on too. Prints the table, then one line per configuration: layers excluded, mean SSIM, minimum.

    PYTHONPATH=. python benchmarks/quant_sensitivity.py [--top 1 2 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from accel import apply
from accel.diverge.sensitivity import layer_sensitivity, measured_pick, sensitivity_markdown
from accel.features import FEATURES
from accel.measure.parity import aggregate, compare
from accel.profile import load_profile
from accel.sweep.spec import build_requests
from accel.targets.build import make_target

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "quickstart.yaml"


def outputs(target, requests) -> list[np.ndarray]:
    return [image for request in requests for image in target.generate(request)]


def ssim_of(target, requests, reference, exclude: list[str]) -> tuple[float, float]:
    config = FEATURES["quantization"].parse_options({"method": "int8wo", "exclude": exclude})
    with apply(target.pipeline, config, num_inference_steps=requests[0].steps):
        produced = outputs(target, requests)
    parity = aggregate([compare(out, ref) for out, ref in zip(produced, reference, strict=True)])
    return parity.ssim, parity.ssim_min


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, nargs="*", default=[1, 2, 4], help="also exclude exactly these many")
    args = parser.parse_args()
    profile = load_profile(PROFILE)
    spec = next(m for m in profile.models if m.name == "mini-flux")
    requests = build_requests(profile.workload_for(spec))
    target = make_target(spec)
    target.load()
    reference = outputs(target, requests)
    rows = layer_sensitivity(target, requests[0], "int8wo")
    pick = measured_pick(target, requests[0], rows, "int8wo")
    print(sensitivity_markdown(rows, "int8wo", pick))
    print()
    chosen = [row.layer for row in pick.layers]
    configs = [("all layers quantized", [])]
    configs += [(f"top {k} excluded", [row.layer for row in rows[:k]]) for k in args.top]
    configs += [(f"measured pick excluded ({len(chosen)})", chosen)]
    configs += [(f"bottom {k} excluded (control)", [row.layer for row in rows[-k:]]) for k in args.top]
    print(f"mini-flux, {len(reference)} images ({len(requests)} requests, {requests[0].steps} steps), int8wo:")
    for label, exclude in configs:
        mean, low = ssim_of(target, requests, reference, exclude)
        print(f"  {label:<34} SSIM {mean:.4f} (min {low:.4f})  exclude={exclude}")


if __name__ == "__main__":
    main()
