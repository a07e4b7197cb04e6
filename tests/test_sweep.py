"""End-to-end sweeps on the tiny zoo: results, parity, images, report, executors."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import small_profile

from accel.profile import parse_profile
from accel.results import read_results
from accel.sweep import runner
from accel.sweep.runner import run_sweep

VARIANTS = [
    {"name": "tiling", "features": {"vae_use_tiling": {"tile_size": 32, "tile_stride": 16}}},
    {"name": "attn-native", "features": {"attention_backend": "native"}},
    {"name": "too-big-tiles", "features": {"vae_use_tiling": {"tile_size": 256}}},
    {"name": "flash", "features": {"attention_backend": "flash"}},
]


@pytest.fixture(scope="module")
def inline_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("inline")
    profile = parse_profile(small_profile(["tiny-flux", "tiny-wan"], VARIANTS, num_images_per_prompt=1))
    return run_sweep(profile, "test.yaml", run_dir, show_progress=False)


def _by_key(records):
    return {(r["model"], r["variant"]): r for r in records}


def test_every_cell_is_logged_once_in_plan_order(inline_run):
    logged = read_results(inline_run.run_dir)
    variants = ["baseline", "noise-floor"] + [x["name"] for x in VARIANTS]
    expected = [(m, v) for m in ("tiny-flux", "tiny-wan") for v in variants]
    assert [(r["model"], r["variant"]) for r in logged] == expected
    table = pd.read_parquet(inline_run.run_dir / "results.parquet")
    assert list(zip(table["model"], table["variant"], strict=True)) == expected


def test_statuses_parity_and_evidence(inline_run):
    records = _by_key(inline_run.records)
    for model in ("tiny-flux", "tiny-wan"):
        base = records[(model, "baseline")]
        assert base["status"] == "ok" and base["warm"]["n"] == 1 and base["cold_s"] >= base["load_s"] > 0
        same = records[(model, "attn-native")]
        assert same["status"] == "ok" and same["parity"]["bit_identical"]
        assert math.isinf(same["parity"]["psnr"]) and same["parity"]["ssim"] == pytest.approx(1.0)
        assert same["speedup"] > 0
        tiled = records[(model, "tiling")]
        assert tiled["status"] == "ok" and tiled["evidence"]["vae_use_tiling"]["engaged"]
        assert tiled["parity"]["ssim"] < 1.0 and math.isfinite(tiled["parity"]["psnr"])
        not_engaged = records[(model, "too-big-tiles")]
        assert not_engaged["status"] == "failed" and "no tiled decode ran" in not_engaged["error"]
        flash = records[(model, "flash")]
        assert flash["status"] == "unsupported" and "flash_attn not installed" in flash["error"]


def test_images_and_report(inline_run):
    run_dir = inline_run.run_dir
    record = _by_key(inline_run.records)[("tiny-wan", "tiling")]
    from PIL import Image

    image = Image.open(run_dir / record["images"][0])
    assert image.size == (5 * 64, 64)  # a 5-frame strip
    report = inline_run.report_path.read_text()
    assert "## tiny-flux" in report and "## tiny-wan" in report
    assert (
        "| tiling | vae_use_tiling |" in report and "tiled decode ran on" in report
    )  # the timed pass, the stage pass and the interleaved pairs' variant calls
    assert "| inf |" in report  # PSNR of the bit-identical variant
    assert "5-pixel border excluded" in report  # the pinned parity definition
    environment = json.loads((run_dir / "environment.json").read_text())
    assert environment["packages"]["diffusers"].startswith("0.42")


def test_a_crash_loses_nothing_already_measured(tmp_path, monkeypatch):
    profile = parse_profile(small_profile(variants=VARIANTS[:2]))
    from accel.sweep import executors

    calls = []

    def crash_on_second(spec):
        def compute():
            calls.append(spec.variant)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return executors.run_inline(spec)

        return executors.Pending(compute)

    monkeypatch.setattr(executors, "get_executor", lambda *args, **kwargs: crash_on_second)
    from accel.errors import Interrupted

    with pytest.raises(Interrupted, match=r"interrupted: 1 cell\(s\) recorded in .* are kept; continue with 'omni-"):
        run_sweep(profile, "test.yaml", tmp_path, show_progress=False)
    logged = read_results(tmp_path)
    assert [r["variant"] for r in logged] == ["baseline"]


def test_process_executor_matches_inline_and_records_timeouts(tmp_path, inline_run):
    variants = [VARIANTS[0]]
    profile = parse_profile(
        {**small_profile(["tiny-flux"], variants, num_images_per_prompt=1), "measure": {"warmup": 0, "repeats": 1}}
    )
    result = run_sweep(profile, "test.yaml", tmp_path / "process", show_progress=False)
    process_tiling = _by_key(result.records)[("tiny-flux", "tiling")]
    inline_tiling = _by_key(inline_run.records)[("tiny-flux", "tiling")]
    assert process_tiling["status"] == "ok"
    assert process_tiling["parity"] == inline_tiling["parity"]  # same numbers in a fresh worker

    timeout_profile = parse_profile(
        {**small_profile(["tiny-flux"]), "measure": {"executor": "process", "timeout_s": 0.05, "repeats": 1}}
    )
    timed_out = run_sweep(timeout_profile, "test.yaml", tmp_path / "timeout", show_progress=False)
    assert timed_out.records[0]["status"] == "failed"
    assert timed_out.records[0]["error"].startswith("timeout: the cell ran longer than 0.05 s")


def test_plan_puts_each_baseline_first(tmp_path):
    profile = parse_profile(small_profile(["tiny-flux", "tiny-wan"], VARIANTS[:1]))
    cells = runner.plan(profile, tmp_path)
    assert [c.key for c in cells] == [
        "tiny-flux/baseline",
        "tiny-flux/noise-floor",
        "tiny-flux/tiling",
        "tiny-wan/baseline",
        "tiny-wan/noise-floor",
        "tiny-wan/tiling",
    ]


def test_a_model_with_its_own_workload_runs_it_in_every_cell_and_is_compared_on_it(tmp_path):
    """ModelSpec.workload: keys over the profile's (a pipeline that gives one output per prompt runs with one);
    its baseline and variants generate that, parity compares those outputs, the report says so."""
    import numpy as np

    profile = small_profile(["tiny-flux"], [{"name": "slice", "features": {"vae_use_slicing": True}}])
    profile["workload"]["num_images_per_prompt"] = 2
    profile["measure"]["noise_floor"] = False
    profile["models"].append({"name": "one-each", "source": "tiny-flux", "workload": {"num_images_per_prompt": 1}})
    result = run_sweep(parse_profile(profile), "p.yaml", tmp_path, show_progress=False)
    outputs = {}
    for record in result.records:
        with np.load(tmp_path / record["outputs_file"]) as arrays:
            outputs[(record["model"], record["variant"])] = sorted(set(arrays.files) - {"__reference__"})
    two, one = ["p0_s0_n0", "p0_s0_n1"], ["p0_s0_n0"]
    assert outputs == {("tiny-flux", "baseline"): two, ("tiny-flux", "slice"): two,
                       ("one-each", "baseline"): one, ("one-each", "slice"): one}  # fmt: skip
    one_each = next(r for r in result.records if r["model"] == "one-each" and r["variant"] == "slice")
    assert one_each["parity"]["bit_identical"] is True, one_each["parity"]
    # Slicing a batch of one does nothing: the feature says so instead of claiming to have engaged.
    assert "one slice" in one_each["evidence"]["vae_use_slicing"]["summary"], one_each["evidence"]
    sliced = next(r for r in result.records if r["model"] == "tiny-flux" and r["variant"] == "slice")
    assert sliced["evidence"]["vae_use_slicing"]["engaged"] is True, sliced["evidence"]
    assert "Workload of one-each: the profile's, with num_images_per_prompt 1" in result.report_path.read_text()
