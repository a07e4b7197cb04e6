"""vae_use_tiling and vae_use_slicing: engagement evidence, round trip, unsupported reasons."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import applied_runs, generate, loaded

from accel import apply
from accel.features import FEATURES, VaeSlicingConfig, VaeTilingConfig


@pytest.mark.parametrize("model", ["tiny-flux", "tiny-wan", "tiny-qwen-image"])
def test_tiling_engages_and_remove_restores_the_baseline(model):
    target = loaded(model)
    baseline = generate(target)
    verdict, (tiled,) = applied_runs(target, "vae_use_tiling", {"tile_size": 32, "tile_stride": 16})
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["tiled_decodes_per_run"][0] >= 1
    assert not np.array_equal(tiled[0], baseline[0])  # tiles decoded without full context differ
    assert np.array_equal(generate(target)[0], baseline[0])


def test_tiling_that_cannot_engage_fails_verification():
    target = loaded("tiny-flux")
    verdict, _ = applied_runs(target, "vae_use_tiling", {"tile_size": 128})
    assert not verdict.engaged
    assert "no tiled decode ran" in verdict.summary


def test_slicing_needs_a_batch_and_is_exact():
    target = loaded("tiny-flux")
    baseline = generate(target, num_images_per_prompt=2)
    with apply(target.pipeline, VaeSlicingConfig()) as applied:
        sliced = generate(target, num_images_per_prompt=2)
        single = generate(target, num_images_per_prompt=1)
        verdict = applied.verdicts()["vae_use_slicing"]
    assert verdict.evidence["slices_per_run"] == [2, 1]
    assert not verdict.engaged and "batch 1" in verdict.summary  # the second run did not slice
    for a, b in zip(sliced, baseline, strict=True):
        assert np.abs(a - b).max() < 1e-5
    assert len(single) == 1
    assert not target.pipeline.vae.use_slicing


def test_pipeline_without_vae_is_unsupported_with_a_reason():
    class NoVae:
        pass

    support = FEATURES["vae_use_tiling"].check(NoVae(), "cpu", VaeTilingConfig())
    assert not support.supported and "has no vae with enable_tiling" in support.reason
