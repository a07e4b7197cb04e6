"""The coverage report's tables and the cause of a refusal.

The per-feature tables and the per-model counts come from the same records and verdicts as the support
matrix; ``--check`` finds a stale copy of any of them. A refusal is traced to its cause: giving a
transformer class the ``_repeated_blocks`` it lacks turns its regional-compile cell from refused into
supported, measured through the sweep as ``make coverage`` runs it.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import small_profile
from synthetic import CLAIMS, results

from accel.gate import GateData, load_gate_data
from accel.profile import parse_profile
from accel.report.tables import HARNESS_GAP, REFUSED_LIBRARY, REFUSED_MODEL, SUPPORTED, VERDICTS, render_tables
from accel.sweep.runner import run_sweep


def _tables(records=None) -> dict[str, str]:
    return render_tables(records or results(), GateData(load_gate_data().thresholds, CLAIMS))


def _rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| **")
    ]


def test_feature_tables_agree_with_the_support_matrix_cell_by_cell():
    tables = _tables()
    assert {"family-counts", "feature-compile", "feature-tea_cache"} <= set(tables)
    compile_rows = {(r[0], r[1]): r[2] for r in _rows(tables["feature-compile"])}
    assert compile_rows[("**flux**", "compile")] == SUPPORTED
    assert compile_rows[("**flux**", "compile-full")] == REFUSED_MODEL
    assert tables["feature-compile"].startswith("`compile` (compile) works on 2 of 2 models: flux, wan.")
    tea = _rows(tables["feature-tea_cache"])
    assert tea[1][:4] == ["**wan**", "tea", HARNESS_GAP, "–"] and "published for FluxTransformer2DModel" in tea[1][4]
    # The matrix shows the same verdicts: flux's compile ✅, wan's tea 🔧 (a harness gap).
    matrix = tables["support-matrix"]
    assert (
        "compile: ✅" in matrix and "tea: not supported by omni-accel yet (a harness gap, not the model's): " in matrix
    )


def test_family_counts_add_up_to_the_single_feature_cells():
    records = results()
    counts = {row[0]: row[1:] for row in _rows(_tables(records)["family-counts"])}
    for model in ("flux", "wan"):
        numbers = [int(n) for n in counts[f"**{model}**"]]
        single = [
            r
            for r in records
            if r["model"] == model and r["variant"] not in ("baseline", "noise-floor") and len(r["features"]) == 1
        ]
        assert sum(numbers[: len(VERDICTS)]) == numbers[-1] == len(single), model
    assert counts["**flux**"][0] == "3"  # supported: compile, tea, attention


def test_check_fails_on_a_stale_feature_table(tmp_path, monkeypatch, capsys):
    from accel.cli import main

    run = tmp_path / "run"
    run.mkdir()
    records = results()
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    doc = tmp_path / "coverage.md"
    doc.write_text(
        "<!-- omni-accel:begin feature-tea_cache -->\n<!-- omni-accel:end feature-tea_cache -->\n"
        "<!-- omni-accel:begin family-counts -->\n<!-- omni-accel:end family-counts -->\n"
    )
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(doc)])
    main()
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(doc), "--check"])
    main()  # fresh: exit 0
    # The run changes (wan's TeaCache cell is gone): both injected copies are stale now.
    kept = [r for r in records if not (r["model"] == "wan" and r["variant"] == "tea")]
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in kept) + "\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1 and "stale: feature-tea_cache, family-counts" in capsys.readouterr().out


def _regional_compile_verdict(tmp_path, name: str) -> tuple[str, str]:
    variants = [{"name": "compile-regional", "features": {"compile": {"granularity": "regional", "backend": "eager"}}}]
    profile = small_profile(["tiny-pixart-sigma"], variants, height=32, width=32)
    profile["measure"].update(noise_floor=False, timing="sequential")
    run = run_sweep(parse_profile(profile), "coverage.yaml", tmp_path / name, show_progress=False)
    table = _tables(run.records)["feature-compile"]
    row = _rows(table)[0]
    return row[2], row[4]


def test_adding_repeated_blocks_flips_regional_compile_from_refused_to_supported(tmp_path, monkeypatch):
    from diffusers import PixArtTransformer2DModel

    verdict, reason = _regional_compile_verdict(tmp_path, "without")
    assert verdict == REFUSED_LIBRARY and "PixArtTransformer2DModel has no _repeated_blocks" in reason
    monkeypatch.setattr(PixArtTransformer2DModel, "_repeated_blocks", ["BasicTransformerBlock"], raising=False)
    verdict, reason = _regional_compile_verdict(tmp_path, "with")
    assert verdict == SUPPORTED, reason


def test_a_sweep_reports_an_unavailable_family_and_runs_the_others(tmp_path, monkeypatch):
    import dataclasses

    from accel import zoo

    entry = zoo.ZOO["tiny-sd15"]
    missing = dataclasses.replace(entry, requires=(*entry.requires, "diffusers.NoSuchUNet"))
    monkeypatch.setitem(zoo.ZOO, "tiny-sd15", missing)
    variants = [{"name": "model-offload", "features": {"enable_cpu_offload": True}}]
    profile = small_profile(["tiny-sd15", "tiny-pixart-sigma"], variants, height=32, width=32)
    profile["measure"].update(noise_floor=False, timing="sequential")
    run = run_sweep(parse_profile(profile), "coverage.yaml", tmp_path / "run", show_progress=False)
    by_cell = {(r["model"], r["variant"]): r for r in run.records}
    for variant in ("baseline", "model-offload"):
        record = by_cell[("tiny-sd15", variant)]
        assert record["status"] == "unsupported" and record["unsupported_scope"] == "environment", record
        assert "unavailable in this environment: diffusers.NoSuchUNet not found" in record["error"]
        assert by_cell[("tiny-pixart-sigma", variant)]["status"] == "ok"
    counts = {row[0]: row[1:] for row in _rows(_tables(run.records)["family-counts"])}
    assert counts["**tiny-sd15**"][VERDICTS.index("refused by this device")] == "1"


def test_a_class_the_build_needs_beyond_its_requires_is_reported_unavailable_and_the_run_goes_on(tmp_path, monkeypatch):
    """``requires`` lists the classes an entry's builder instantiates, by hand; a class it looks up beyond them
    (tiny-hunyuandit's AutoencoderKL and DDPMScheduler, every family's config classes) that this environment
    lacks made the builder's AttributeError abort the whole sweep while checking its inputs."""
    import dataclasses

    from accel import zoo
    from accel.zoo.pipelines.base import cls

    entry = zoo.ZOO["tiny-sd15"]

    def builder(config):
        cls("diffusers.NoSuchScheduler")  # as a builder looks its scheduler up
        return entry.builder(config)

    # Another config: another zoo directory, so the entry is built (and its builder run) here.
    changed = dataclasses.replace(entry, builder=builder, config={**entry.config, "review": "missing-class"})
    monkeypatch.setitem(zoo.ZOO, "tiny-sd15", changed)
    variants = [{"name": "model-offload", "features": {"enable_cpu_offload": True}}]
    profile = small_profile(["tiny-sd15", "tiny-pixart-sigma"], variants, height=32, width=32)
    profile["measure"].update(noise_floor=False, timing="sequential")
    run = run_sweep(parse_profile(profile), "coverage.yaml", tmp_path / "run", show_progress=False)
    by_cell = {(r["model"], r["variant"]): r for r in run.records}
    for variant in ("baseline", "model-offload"):
        record = by_cell[("tiny-sd15", variant)]
        assert record["status"] == "unsupported" and record["unsupported_scope"] == "environment", record
        assert (
            "zoo entry 'tiny-sd15' is unavailable in this environment: diffusers.NoSuchScheduler not found"
            in (record["error"])
        )
        assert by_cell[("tiny-pixart-sigma", variant)]["status"] == "ok"


def test_a_builder_these_versions_break_fails_its_family_and_the_run_goes_on(tmp_path, monkeypatch):
    """A zoo builder that raises with the installed libraries (a constructor a newer diffusers changed) aborted
    the whole sweep while its inputs were checked: now that family's cells fail naming the error, the versions
    and what to do, and the other families run."""
    import dataclasses

    from accel import zoo

    entry = zoo.ZOO["tiny-sd15"]

    def builder(config):
        raise TypeError("UNet2DConditionModel.__init__() got an unexpected keyword argument 'review'")

    # Another config: another zoo directory, so the entry is built (and its builder run) here.
    changed = dataclasses.replace(entry, builder=builder, config={**entry.config, "review": "changed-constructor"})
    monkeypatch.setitem(zoo.ZOO, "tiny-sd15", changed)
    profile = small_profile(["tiny-sd15", "tiny-pixart-sigma"], [], height=32, width=32)
    profile["measure"].update(noise_floor=False, timing="sequential")
    run = run_sweep(parse_profile(profile), "coverage.yaml", tmp_path / "run", show_progress=False)
    by_cell = {(r["model"], r["variant"]): r for r in run.records}
    failed = by_cell[("tiny-sd15", "baseline")]
    assert failed["status"] == "failed", failed
    assert "zoo entry 'tiny-sd15' could not be built with diffusers" in failed["error"], failed["error"]
    assert "TypeError: UNet2DConditionModel.__init__() got an unexpected keyword argument 'review'" in failed["error"]
    assert by_cell[("tiny-pixart-sigma", "baseline")]["status"] == "ok"


# Steps a cache variant of the coverage profile always computes before it may skip (a run's warm-up), from its
# options as the profile sets them. PAB and FasterCache reuse by timestep range, not by a count: not listed.
COVERAGE_WARMUP = {
    "cache_dit": lambda options, steps: options.max_warmup_steps,
    "first_block_cache": lambda options, steps: 1,
    "tea_cache": lambda options, steps: 2,  # the first and the last step
    "mag_cache": lambda options, steps: int(options.retention_ratio * steps + 0.5),  # diffusers' mag_cache.py
    "taylorseer_cache": lambda options, steps: options.disable_cache_before_step,
}
# A cache that alternates computing and reusing (TaylorSeer's cache_interval 2, PAB's block skip range 2, TeaCache
# resetting its accumulator at each computed step) skips at most every other step: four steps after the warm-up
# give it two or more to skip in every run.
STEPS_LEFT_TO_SKIP = 4


def _coverage_profile():
    from pathlib import Path

    from accel.profile import load_profile

    return load_profile(Path(__file__).resolve().parent.parent / "profiles" / "coverage.yaml")


def test_the_coverage_workload_leaves_every_cache_steps_to_skip_after_its_warmup():
    from accel.features import FEATURES

    profile = _coverage_profile()
    steps = profile.workload.steps
    checked = set()
    for variant in profile.variants:
        for name, raw in variant.features.items():
            if name in COVERAGE_WARMUP:
                warmup = COVERAGE_WARMUP[name](FEATURES[name].parse_options(raw), steps)
                assert steps - warmup >= STEPS_LEFT_TO_SKIP, f"{variant.name}: {warmup} of {steps} steps are warm-up"
                checked.add(name)
    assert checked == set(COVERAGE_WARMUP), checked  # every cache of the table was found in the profile


def test_the_coverage_tiling_cell_tiles_half_the_image_with_diffusers_default_overlap():
    from diffusers import AutoencoderKL

    from accel.zoo.pipelines.base import kl_vae_config

    profile = _coverage_profile()
    (options,) = [v.features["vae_use_tiling"] for v in profile.variants if "vae_use_tiling" in v.features]
    overlap = AutoencoderKL(**kl_vae_config(4)).tile_overlap_factor  # diffusers' default share of a tile
    assert options["tile_size"] * 2 == min(profile.workload.height, profile.workload.width), options
    assert options["tile_stride"] == options["tile_size"] * (1 - overlap), (options, overlap)
