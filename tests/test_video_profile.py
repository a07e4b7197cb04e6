"""profiles/video.yaml on mini-wan (two experts): every variant engages and its evidence shows both experts.

A cut-down copy of the profile (its first caption, one seed, one timed pass, no noise floor; the same model, steps,
frames, guidance and variants) runs through the sweep; each variant must be engaged, and its per-denoiser
evidence (``accel.features.denoiser_evidence``: block work skipped, calls through compiled code, linear layers
quantized, collectives in the attention) must show ``transformer`` and ``transformer_2`` on every timed run. The
report shows the same counts in its "Evidence per denoiser" table, and the videos' per-frame curves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from accel.features.denoiser_evidence import by_denoiser, record_by_denoiser
from accel.profile import load_profile, parse_profile
from accel.results import read_results
from accel.sweep.runner import run_sweep
from accel.yaml_bounds import load_yaml_file
from accel.zoo.mini_wan import EXPERTS

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "video.yaml"


def test_the_profile_loads_with_every_feature_family_the_issue_names():
    profile = load_profile(PROFILE)
    features = {name for variant in profile.variants for name in variant.features}
    assert features == {
        "cache_dit", "first_block_cache", "tea_cache", "mag_cache", "compile", "quantization", "context_parallel"
    }  # fmt: skip
    assert [m.source for m in profile.models] == ["mini-wan"]
    assert profile.workload.num_frames == 9 and len(profile.workload.seeds) == 2


@pytest.fixture(scope="module")
def cut_down(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    raw = load_yaml_file(PROFILE, "profile", mapping=False)
    raw["workload"] = {**raw["workload"], "prompts": raw["workload"]["prompts"][:1], "seeds": [0]}
    raw["measure"] = {
        "warmup": 0, "repeats": 1, "executor": "inline", "noise_floor": False, "timing": "sequential",
        "sweep_warmup": False, "threads": 1,
    }  # fmt: skip
    run_dir = tmp_path_factory.mktemp("video") / "run"
    here = Path.cwd()
    os.chdir(ROOT)  # the profile's calibration paths are relative to the working directory, as the CLI's
    try:
        run_sweep(parse_profile(raw, str(PROFILE)), str(PROFILE), run_dir, show_progress=False)
    finally:
        os.chdir(here)
    return run_dir, read_results(run_dir)


@pytest.mark.slow
def test_every_variant_engages_with_evidence_for_both_experts(cut_down):
    _, records = cut_down
    variants = [r for r in records if r["variant"] != "baseline"]
    assert {r["variant"] for r in variants} == {v.name for v in load_profile(PROFILE).variants}
    for record in variants:
        assert record["status"] == "ok", (record["variant"], record.get("error"), record.get("evidence"))
        evidence = record["evidence"]
        assert evidence and all(e["engaged"] for e in evidence.values()), (record["variant"], evidence)
        found = record_by_denoiser(record)
        assert set(found) == set(evidence), (record["variant"], "a feature without per-denoiser evidence")
        for feature, shown in found.items():
            assert not shown.missing(EXPERTS), (record["variant"], feature, shown)


@pytest.mark.slow
def test_the_report_shows_each_expert_s_evidence_and_the_per_frame_curves(cut_down):
    run_dir, records = cut_down
    report = (run_dir / "report.md").read_text()
    assert "### Evidence per denoiser" in report and "| transformer | transformer_2 |" in report
    assert "### Video parity per frame" in report
    for record in records:
        if record["variant"] != "baseline" and not (record.get("parity") or {}).get("bit_identical"):
            assert (run_dir / "figures" / f"video-mini-wan-{record['variant']}.png").is_file(), record["variant"]
            frames = record["video_parity"]["frames"]
            curves = next(iter(record["video_parity"]["samples"].values()))
            assert frames == 9 and len(curves["ssim"]) == len(curves["psnr"]) == 9


def test_a_denoiser_missing_on_one_run_reads_as_missing():
    evidence = {"skipped_work_per_run": [{"transformer": 0.5, "transformer_2": 0.25}, {"transformer": 0.5}]}
    shown = by_denoiser("tea_cache", evidence)
    assert shown is not None and shown.least == {"transformer": 0.5, "transformer_2": 0.0}
    assert shown.missing(EXPERTS) == ["transformer_2"]
    collectives = {"attention_collectives_by_denoiser_per_run": [{"transformer": {"all_to_all_single": 8}}]}
    read = by_denoiser("context_parallel", collectives)
    assert read is not None and read.least == {"transformer": 8.0} and read.missing(EXPERTS) == ["transformer_2"]
    assert by_denoiser("vae_use_tiling", {"skipped_work_per_run": [{"transformer": 1.0}]}) is None


def test_quantization_counts_the_layers_it_quantized_per_expert():
    """tiny-wan22 (Wan 2.2's two denoisers, random weights): int8 counts each expert's quantized layers."""
    from features_helpers import applied_runs, loaded

    verdict, _ = applied_runs(loaded("tiny-wan22"), "quantization", "int8wo", runs=2)
    shown = by_denoiser("quantization", verdict.evidence)
    assert verdict.engaged and shown is not None and not shown.missing(EXPERTS), (verdict.summary, shown)
    census = verdict.evidence["components"]
    assert shown.least == {name: float(census[name]["eligible_linears"]) for name in EXPERTS}
