"""Deterministic synthetic results (hand-built records) for golden-file tests of tables and gates."""

from __future__ import annotations

import math
from typing import Any


def record(model: str, variant: str, features: dict[str, Any], status: str = "ok", **values: Any) -> dict[str, Any]:
    base = {
        "model": model,
        "source": model,
        "variant": variant,
        "features": features,
        "status": status,
        "error": values.pop("error", None),
        "modality": values.pop("modality", "image"),
    }
    if status == "ok":
        engaged = values.pop("engaged", True)
        speedup = values.get("speedup", 1.0)
        base.update(
            warm={"median": values.pop("latency", round(0.2 / speedup, 6)), "cv": 0.02},
            peak_host_rss_bytes=values.pop("rss", 400 * 2**20),
            evidence=values.pop("evidence", {name: {"engaged": engaged, "summary": "evidence"} for name in features}),
            outputs_stable=values.pop("outputs_stable", True),
        )
        if variant != "baseline":
            ssim, psnr = values.pop("ssim", 1.0), values.pop("psnr", math.inf)
            ratio = values.pop("speedup", 1.0)
            if "speedup_ci" not in values:
                base["paired"] = _pairs(ratio)
            base.update(
                speedup=ratio,
                speedup_ci=values.pop("speedup_ci", _claim(ratio)),
                memory_reduction=values.pop("memory_reduction", 1.0),
                parity={
                    "ssim": ssim,
                    "psnr": psnr,
                    "max_abs_diff": values.pop("max_abs_diff", implied_max_abs_diff(psnr)),
                    "bit_identical": math.isinf(psnr),
                },
            )
    base.update(values)
    return base


def implied_max_abs_diff(psnr: float) -> float:
    """The smallest largest difference a PSNR (images in [0, 1]) allows: 0.0 only where the outputs are identical
    (PSNR infinite), else the root-mean-square difference (a difference equal everywhere), at most 1. A record
    with SSIM 0.71 and a max abs diff of 0.0 contradicts itself, and a check reading max_abs_diff on such data
    cannot fail."""
    return 0.0 if math.isinf(psnr) else min(1.0, 10 ** (-psnr / 20))


# Every synthetic speedup is measured to +-5% and judged against a noise band of +-7% (measure.min_effect 0.07).
NOISE_BAND = (1 / 1.07, 1.07)


def _pairs(ratio: float) -> dict[str, Any]:
    """The 10 interleaved pairs behind ``_claim(ratio)``: ratios over ratio * [0.95, 1.05] whose median is the
    ratio and whose 95% interval (the 2nd and 9th of 10) is ``_claim``'s, so the gate re-derives the claim."""
    spread = (0.95, 0.95, 0.97, 0.98, 0.99, 1.01, 1.02, 1.03, 1.05, 1.05)
    reference_s = [ratio * factor for factor in spread]
    estimate = {"ratio": ratio, "low": round(ratio * 0.95, 6), "high": round(ratio * 1.05, 6), "n": 10, "looks": 1}
    return {"reference_s": reference_s, "variant_s": [1.0] * 10, "estimate": estimate}


def _claim(ratio: float) -> dict[str, Any]:
    from accel.measure.speedup import SpeedupEstimate, classify

    estimate = SpeedupEstimate(ratio, round(ratio * 0.95, 6), round(ratio * 1.05, 6), 0.979, 10, "interleaved")
    claim = classify(estimate, NOISE_BAND, 0.95)
    return {**estimate.to_dict(), "verdict": claim.verdict, "reason": claim.reason, "band": list(NOISE_BAND)}


def results() -> list[dict[str, Any]]:
    """Two models: flux on a GPU in bfloat16, wan on a CPU in float32; lossless and lossy cells, failures,
    cells that did not run, two settings of one feature, and measured pairs."""
    gpu = {"device": "cuda", "device_name": "NVIDIA H200", "dtype": "bfloat16"}
    cpu = {"device": "cpu", "device_name": "AMD EPYC 7763 64-Core Processor", "dtype": "float32", "modality": "video"}
    return [
        record("flux", "baseline", {}, latency=0.2, **gpu),
        record("flux", "noise-floor", {}, role="noise_floor", ssim=1.0, psnr=math.inf, speedup=0.98, **gpu),
        record("flux", "compile", {"compile": "regional"}, speedup=1.5, ssim=0.9995, psnr=52.0, **gpu),
        record(
            "flux",
            "compile-full",
            {"compile": "full"},
            status="unsupported",
            unsupported_scope="model",
            error="compile: full-graph compile breaks on this transformer's RoPE cache",
            **gpu,
        ),
        record("flux", "tea", {"tea_cache": 0.4}, speedup=1.8, ssim=0.97, psnr=33.0, **gpu),
        record("flux", "fbc-loose", {"first_block_cache": 0.9}, speedup=2.5, ssim=0.71, psnr=21.0, **gpu),
        record("flux", "tiling", {"vae_use_tiling": {"tile_size": 32}}, speedup=0.3, ssim=0.33, psnr=15.9, **gpu),
        record(
            "flux",
            "flash",
            {"attention_backend": "flash"},
            status="unsupported",
            unsupported_scope="environment",
            error="attention_backend: package flash_attn not installed: pip install 'omni-accel[gpu]'",
            **gpu,
        ),
        record("flux", "offload", {"enable_cpu_offload": True}, speedup=0.5, memory_reduction=1.6, **gpu),
        record(
            "flux",
            "tea+offload",
            {"tea_cache": 0.4, "enable_cpu_offload": True},
            speedup=0.9,
            ssim=0.97,
            psnr=33.0,
            **gpu,
        ),
        # Tiling is claimed unsupported on flux; the claim does not cover the quantization beside it.
        record(
            "flux",
            "int8+tiling",
            {"quantization": "int8wo", "vae_use_tiling": {"tile_size": 32}},
            speedup=0.4,
            ssim=0.33,
            psnr=15.8,
            **gpu,
        ),
        record("wan", "baseline", {}, latency=0.3, **cpu),
        record("wan", "noise-floor", {}, role="noise_floor", ssim=1.0, psnr=math.inf, speedup=1.01, **cpu),
        record("wan", "compile", {"compile": "regional"}, speedup=1.2, ssim=1.0, psnr=131.0, **cpu),
        # "Lossless" in float32 at 36 dB: far below what float32 delivers.
        record("wan", "attn-math", {"attention_backend": "_native_math"}, speedup=0.9, ssim=0.999, psnr=36.0, **cpu),
        record("wan", "offload", {"enable_cpu_offload": True}, speedup=0.6, **cpu),
        record("wan", "slicing", {"vae_use_slicing": True}, speedup=1.0, outputs_stable=False, **cpu),
        record(
            "wan", "pab", {"pyramid_attention_broadcast": {}}, speedup=1.3, ssim=0.95, psnr=30.0, evidence={}, **cpu
        ),
        record(
            "wan",
            "tea",
            {"tea_cache": 0.4},
            status="unsupported",
            unsupported_scope="model",
            refused_by="harness",  # coefficients TeaCache's authors publish for Wan that omni-accel lacks
            error="tea_cache: TeaCache coefficients are published for FluxTransformer2DModel only",
            **cpu,
        ),
        record(
            "wan",
            "taylorseer",
            {"taylorseer_cache": {}},
            status="failed",
            error="taylorseer_cache: taylorseer_cache enabled but a run computed every step (0 cached)",
            **cpu,
        ),
    ]


CLAIMS = {
    "flux": {"vae_use_tiling": {"supported": False, "note": "tiny VAE"}},
    "wan": {"tea_cache": {"supported": False}, "taylorseer_cache": {"supported": False}},
}
