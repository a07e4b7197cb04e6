"""``omni-accel features SOURCE``: which features can run on a checkpoint's pipeline, and who refuses the
others (library, model, device, harness), asked of each feature without applying anything."""

from __future__ import annotations

import json

import pytest
from conftest import invoke

import accel.targets.adapter
from accel.features import FEATURES


def verdicts(monkeypatch, capsys, source: str) -> dict[tuple[str, str], dict]:
    """The ``--json`` rows of ``features SOURCE`` on a CPU, by (feature, options)."""
    monkeypatch.setattr(accel.targets.adapter, "resolve_device", lambda device: "cpu")
    code, out, err = invoke(monkeypatch, capsys, "features", source, "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["source"] == source and payload["device"] == "cpu"
    rows = {(row["feature"], row["options"]): row for row in payload["features"]}
    # Every registered feature is asked, with each Literal choice of its primary option.
    assert {feature for feature, _ in rows} == set(FEATURES)
    assert len(rows) == sum(len(feature.option_values() or [None]) for feature in FEATURES.values())
    return rows


def test_tiny_flux_compiles_regionally_and_refuses_sequential_offload_on_the_cpu(monkeypatch, capsys):
    rows = verdicts(monkeypatch, capsys, "tiny-flux")
    assert rows[("compile", "granularity=regional")]["verdict"] == "can run"
    offload = rows[("enable_sequential_cpu_offload", "(defaults)")]
    assert (offload["verdict"], offload["owner"]) == ("refused by device", "device")
    assert "needs an accelerator" in offload["reason"]
    # Outside the ranks the sweep starts, context parallelism is not refused: the rows say how many it needs.
    parallel = rows[("context_parallel", "(defaults)")]
    assert parallel["verdict"] == "can run" and "in 2 ranks" in parallel["reason"], parallel


def test_tiny_sd15_is_judged_on_its_unet(monkeypatch, capsys):
    rows = verdicts(monkeypatch, capsys, "tiny-sd15")
    assert rows[("compile", "granularity=regional")]["verdict"] == "can run"
    cache = rows[("first_block_cache", "(defaults)")]
    assert cache["verdict"] == "refused by library" and "unet (UNet2DConditionModel)" in cache["reason"], cache
    parallel = rows[("context_parallel", "(defaults)")]
    assert parallel["owner"] == "harness" and "StableDiffusionPipeline" in parallel["reason"], parallel


def test_tiny_wan22_context_parallel_is_the_harness_gap_of_its_second_denoiser(monkeypatch, capsys):
    rows = verdicts(monkeypatch, capsys, "tiny-wan22")
    parallel = rows[("context_parallel", "(defaults)")]
    assert parallel["verdict"] == "refused by harness", parallel
    assert "transformer_2 would run untouched" in parallel["reason"]
    # A cache reaches both denoisers: the reach check refuses only what would leave one untouched.
    assert rows[("first_block_cache", "(defaults)")]["verdict"] == "can run"


def test_the_table_names_the_pipeline_and_counts_what_can_run(monkeypatch, capsys):
    monkeypatch.setattr(accel.targets.adapter, "resolve_device", lambda device: "cpu")
    code, out, err = invoke(monkeypatch, capsys, "features", "tiny-flux")
    assert code == 0, err
    assert "verdict (FluxPipeline, cpu)" in out and "refused by device" in out
    rows = verdicts(monkeypatch, capsys, "tiny-flux")
    runs = sum(row["verdict"] == "can run" for row in rows.values())
    assert f"{runs} of {len(rows)} feature options can run on tiny-flux (FluxPipeline) on cpu" in out


@pytest.mark.parametrize("source", ["tiny-flx", "no/such/checkpoint", "EMPTY"])
def test_a_bad_source_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, source):
    if source == "EMPTY":  # a directory that is not a diffusers checkpoint
        source = str(tmp_path)
    code, out, err = invoke(monkeypatch, capsys, "features", source)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: features.source: ") and source in err


def test_json_without_a_source_is_a_usage_error(monkeypatch, capsys):
    code, out, err = invoke(monkeypatch, capsys, "features", "--json")
    assert code == 2 and out == "" and "--json needs a SOURCE" in err
