"""vae_use_tiling and vae_use_slicing: engagement evidence, round trip, unsupported reasons."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, generate, loaded

from accel.features import FEATURES, get_feature
from accel.features.vae import VaeTilingConfig


@pytest.mark.parametrize("model", ["tiny-flux", "tiny-wan", "tiny-qwen-image"])
def test_tiling_engages_and_remove_restores_the_baseline(model):
    target = loaded(model)
    baseline = generate(target)
    feature = FEATURES["vae_use_tiling"]
    options = VaeTilingConfig(tile_size=32, tile_stride=16)
    assert feature.check(target.pipeline, target.device, options).supported
    handle = feature.apply(target.pipeline, options, CONTEXT)
    tiled = generate(target, [handle])
    verdict = feature.verify(handle)
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["tiled_decodes_per_run"][0] >= 1
    assert not np.array_equal(tiled[0], baseline[0])  # tiles decoded without full context differ
    handle.remove()
    assert np.array_equal(generate(target)[0], baseline[0])


def test_tiling_that_cannot_engage_fails_verification():
    target = loaded("tiny-flux")
    feature = FEATURES["vae_use_tiling"]
    handle = feature.apply(target.pipeline, VaeTilingConfig(tile_size=128), CONTEXT)
    generate(target, [handle])
    verdict = feature.verify(handle)
    handle.remove()
    assert not verdict.engaged
    assert "no tiled decode ran" in verdict.summary


def test_slicing_needs_a_batch_and_is_exact():
    target = loaded("tiny-flux")
    feature = get_feature("vae_use_slicing")
    baseline = generate(target, num_images_per_prompt=2)
    handle = feature.apply(target.pipeline, feature.parse_options(True), CONTEXT)
    sliced = generate(target, [handle], num_images_per_prompt=2)
    single = generate(target, [handle], num_images_per_prompt=1)
    verdict = feature.verify(handle)
    handle.remove()
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
