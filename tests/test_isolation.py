"""In-process (inline) mode resets global state: a baseline after heavy variants is bit-identical."""

from __future__ import annotations

from conftest import small_profile

from accel.profile import parse_profile
from accel.sweep.runner import run_sweep


def test_baseline_after_cached_quantized_compiled_variants_is_bit_identical(tmp_path):
    variants = [
        {
            "name": "cached-quantized-compiled",
            "features": {
                "quantization": "int8wo",
                "cache_dit": {"residual_diff_threshold": 0.5, "max_warmup_steps": 1},
                "compile": {"granularity": "regional", "backend": "aot_eager"},
                "attention_backend": "_native_math",
            },
        },
        {"name": "first-block-cache", "features": {"first_block_cache": 0.5}},
        {"name": "baseline-again", "features": {}},
    ]
    profile = parse_profile(small_profile(["tiny-flux"], variants, steps=6))
    records = {r["variant"]: r for r in run_sweep(profile, "t.yaml", tmp_path, show_progress=False).records}
    heavy = records["cached-quantized-compiled"]
    assert heavy["status"] == "ok", heavy.get("error")
    assert all(e["engaged"] for e in heavy["evidence"].values())
    assert records["first-block-cache"]["status"] == "ok", records["first-block-cache"].get("error")
    again = records["baseline-again"]
    assert again["parity"]["bit_identical"], again["parity"]
