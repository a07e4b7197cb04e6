"""torch.compile: regional and full, evidence from dynamo, removal, unsupported reasons."""

from __future__ import annotations

import numpy as np
import pytest
from features_helpers import CONTEXT, generate, loaded

from accel.features import FEATURES


@pytest.mark.parametrize("granularity", ["regional", "full"])
def test_compile_engages_and_remove_restores(granularity):
    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    feature = FEATURES["compile"]
    # aot_eager traces and runs the same dynamo/AOT graphs as inductor without generating C++: fast.
    options = feature.parse_options({"granularity": granularity, "backend": "aot_eager"})
    handle = feature.apply(target.pipeline, options, CONTEXT)
    compiled = generate(target, [handle])[0]
    verdict = feature.verify(handle)
    handle.remove()
    assert verdict.engaged, verdict.summary
    assert verdict.evidence["unique_graphs"] >= 1 and verdict.evidence["compiled_calls_per_run"][0] > 0
    expected_modules = 4 if granularity == "regional" else 1  # 2 double + 2 single blocks, or the transformer
    assert verdict.evidence["compiled_modules"] == expected_modules
    assert np.abs(compiled - baseline).max() < 1e-4
    assert np.array_equal(generate(target)[0], baseline)


@pytest.mark.slow
def test_inductor_regional_compile_keeps_parity():
    from accel.measure.parity import compare

    target = loaded("tiny-flux")
    baseline = generate(target)[0]
    feature = FEATURES["compile"]
    handle = feature.apply(target.pipeline, feature.parse_options("regional"), CONTEXT)
    compiled = generate(target, [handle])[0]
    verdict = feature.verify(handle)
    handle.remove()
    parity = compare(compiled, baseline)
    assert verdict.engaged and parity.ssim >= 0.999 and parity.psnr >= 40


def test_compile_options_that_cannot_run_here_say_why():
    target = loaded("tiny-flux")
    feature = FEATURES["compile"]
    support = feature.check(target.pipeline, "cpu", feature.parse_options({"mode": "reduce-overhead"}))
    assert not support.supported and "CUDA graphs" in support.reason
    target.pipeline.transformer._repeated_blocks = []
    support = feature.check(target.pipeline, "cpu", feature.parse_options("regional"))
    assert not support.supported and "has no _repeated_blocks" in support.reason
