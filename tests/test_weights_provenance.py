"""A trained zoo model's records name the weights they ran (issue 40, wave 8): ``weights_sha256``, the combined
SHA-256 of the weight files (what ``zoo build`` checks against the manifest), in every cell's record and in the
report's model section."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import small_profile
from synthetic import results

from accel.profile import parse_profile
from accel.report.markdown import render, weights_line
from accel.zoo import mini_flux, mini_wan, weights_sha256


def test_the_trained_entries_hash_is_their_weight_files_and_matches_the_committed_manifest():
    for module, name in ((mini_flux, "mini-flux"), (mini_wan, "mini-wan")):
        manifest = json.loads((module.WEIGHTS_DIR / "manifest.json").read_text())
        assert weights_sha256(name) == module.weights_hash() == manifest["sha256"]
    assert weights_sha256("tiny-flux") is None  # random weights from a config: nothing trained to name
    assert weights_sha256("/some/local/checkpoint") is None


def test_a_trained_models_cells_carry_the_weights_hash_and_others_do_not():
    from accel.sweep.cell import record_head
    from accel.sweep.runner import plan

    profile = parse_profile(
        {
            "models": [{"name": "mf", "source": "mini-flux"}, {"name": "tf", "source": "tiny-flux"}],
            "workload": {"prompts": ["a red square"], "steps": 2, "height": 32, "width": 32},
            "variants": [{"name": "cache", "features": {"cache_dit": {"residual_diff_threshold": 0.2}}}],
        }
    )
    heads = [record_head(cell) for cell in plan(profile, Path("."))]
    trained = [h for h in heads if h["model"] == "mf"]
    assert trained and all(h["weights_sha256"] == weights_sha256("mini-flux") for h in trained)
    assert all("weights_sha256" not in h for h in heads if h["model"] == "tf")


def test_the_reports_model_section_shows_the_weights_hash():
    records = [r for r in results() if r["model"] == "flux"]
    sha = "ab" * 32
    for record in records:
        record["weights_sha256"] = sha
    profile = parse_profile(small_profile(["tiny-flux"]))
    text = render(profile, records, {"packages": {}, "devices": ["cpu"]}, 1.0)
    assert f"Source: `flux` · weights SHA-256 `{sha}`" in text
    assert weights_line([{"model": "m"}]) == ""
    other = {"weights_sha256": "cd" * 32}
    assert weights_line([records[0], other]) == f" · cells ran different weights, SHA-256 `{sha}`, `{'cd' * 32}`"
