"""Quantization sensitivity (``accel.diverge.sensitivity``) and the quantization feature's ``exclude`` option:
excluded layers stay in float and are not counted as eligible, an unknown name is refused, the table ranks the
layers by their error alone and leaves the pipeline as it was, and its top layers left unquantized bring the
output closer to the baseline than its bottom ones do."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from features_helpers import REQUEST, loaded

from accel import apply
from accel.diverge.capture import Capture
from accel.diverge.compare import metrics
from accel.diverge.sensitivity import (
    MIN_GAIN,
    grow_while_gaining,
    layer_sensitivity,
    measured_pick,
    sensitivity_markdown,
)
from accel.errors import ConfigError
from accel.features import FEATURES
from accel.features.quant import _is_quantized

CALL = dataclasses.replace(REQUEST, steps=3)


def _config(exclude=()):
    return FEATURES["quantization"].parse_options({"method": "int8wo", "exclude": list(exclude)})


@pytest.fixture(scope="module")
def flux():
    return loaded("tiny-flux")


def test_excluded_layers_stay_float_and_are_not_counted(flux):
    transformer = flux.pipeline.transformer
    with apply(flux.pipeline, _config(["proj_out", "transformer_blocks.0.ff.net.2"]), num_inference_steps=3) as a:
        flux.generate(CALL)
        verdict = a.verdicts()["quantization"]
        assert not _is_quantized(transformer.proj_out.weight)
        assert not _is_quantized(transformer.transformer_blocks[0].ff.net[2].weight)
        assert _is_quantized(transformer.transformer_blocks[0].ff.net[0].proj.weight)
    assert verdict.engaged and verdict.evidence["quantized_share_per_run"] == [1.0], verdict


def test_an_unknown_excluded_name_is_refused_before_anything_is_quantized(flux):
    with pytest.raises(ConfigError, match="no linear layer of transformer"):
        apply(flux.pipeline, _config(["proj_outt"]), num_inference_steps=3)
    assert not any(_is_quantized(p) for p in flux.pipeline.transformer.parameters())


def _final_latents(target) -> torch.Tensor:
    with Capture(target.pipeline) as trace:
        target.generate(CALL)
    return trace.steps[-1].prev_sample


@pytest.fixture(scope="module")
def table(flux):
    """The call's images before and after the table was computed, and the table."""
    before = flux.generate(CALL)
    rows = layer_sensitivity(flux, CALL, "int8wo")
    return before, flux.generate(CALL), rows


def test_the_table_ranks_layers_and_its_top_layers_matter_more_than_its_bottom_ones(flux, table):
    before, after, rows = table
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True)), "the pipeline was not restored"
    assert not any(_is_quantized(p) for p in flux.pipeline.transformer.parameters())
    linears = [n for n, m in flux.pipeline.transformer.named_modules() if isinstance(m, torch.nn.Linear)]
    assert sorted(r.layer for r in rows) == sorted(linears)
    errors = [r.rel_l2 for r in rows]
    assert errors == sorted(errors, reverse=True) and errors[0] > 0

    reference = _final_latents(flux)
    k = 3
    distances = {}
    for label, exclude in (("top", rows[:k]), ("bottom", rows[-k:]), ("none", [])):
        with apply(flux.pipeline, _config([r.layer for r in exclude]), num_inference_steps=CALL.steps):
            distances[label] = metrics(reference, _final_latents(flux)).rel_l2
    assert distances["top"] < distances["bottom"], distances
    assert distances["top"] < distances["none"], distances


def test_the_pick_grows_from_the_top_while_it_measurably_helps_and_stops_at_the_first_layer_that_does_not(flux, table):
    """The layers to leave unquantized are chosen by measuring (final latents against the unquantized call):
    every layer added lowered the error, the one after the pick did not (or the limit was reached), and the
    pick's own error is the lowest measured. The pipeline is left unquantized."""
    rows = table[2]
    limit = 4
    pick = measured_pick(flux, CALL, rows, "int8wo", limit=limit)
    assert not any(_is_quantized(p) for p in flux.pipeline.transformer.parameters())
    k = len(pick.layers)
    assert pick.layers == rows[:k] and [t for t, _ in pick.tried] == list(range(len(pick.tried)))
    errors = [e for _, e in pick.tried]
    # every layer in the pick cut the error by at least MIN_GAIN of what was left; the next one did not
    gains = [later <= earlier * (1 - MIN_GAIN) for earlier, later in itertools.pairwise(errors)]
    assert all(gains[:k]), errors
    assert k == limit or (len(errors) == k + 2 and errors[k + 1] > errors[k] * (1 - MIN_GAIN)), (k, errors)
    assert k >= 1 and errors[k] < errors[0], errors  # tiny-flux: the top layer helps
    # from the bottom of the table: the least sensitive layer brings no real gain, and the pick stops there
    bottom = measured_pick(flux, CALL, rows[::-1], "int8wo", limit=limit)
    assert len(bottom.layers) < limit and len(bottom.tried) == len(bottom.layers) + 2, bottom.tried
    assert bottom.tried[-1][1] > bottom.tried[-2][1] * (1 - MIN_GAIN), bottom.tried
    # measured again through the feature: the pick's exclusion is closer to the unquantized call than none
    reference = _final_latents(flux)
    distances = {}
    for label, exclude in (("pick", pick.layers), ("none", [])):
        with apply(flux.pipeline, _config([r.layer for r in exclude]), num_inference_steps=CALL.steps):
            distances[label] = metrics(reference, _final_latents(flux)).rel_l2
    assert distances["pick"] < distances["none"], distances
    table = sensitivity_markdown(rows, "int8wo", pick)
    assert f"exclude: [{', '.join(repr(r.layer) for r in pick.layers)}]" in table
    assert f"top 0: {errors[0]:.3g}" in table


def test_the_cli_refuses_sensitivity_without_a_quantization_variant(monkeypatch, capsys, write_profile):
    from conftest import invoke, small_profile

    path = write_profile(small_profile(["tiny-flux"], [{"name": "tea", "features": {"tea_cache": 0.4}}]))
    code, _, err = invoke(monkeypatch, capsys, "diverge", str(path), "--model", "tiny-flux", "--sensitivity")
    assert code == 2 and "--variant" in err, err
    code, _, err = invoke(
        monkeypatch, capsys, "diverge", str(path), "--model", "tiny-flux", "--variant", "tea", "--sensitivity"
    )
    assert code == 2 and "has no quantization feature" in err, err


def test_the_pick_stops_at_the_first_layer_that_cuts_the_error_by_less_than_the_minimum_gain():
    # mini-flux's measured prefix errors (docs/diverge.md): gains of 39%, 15%, then 1%, 2%, 7%, 6%
    errors = [0.00445, 0.00272, 0.00231, 0.00229, 0.00225, 0.00209, 0.00197, 0.00198]
    best, tried = grow_while_gaining(lambda k: errors[k], limit=7)
    assert best == 2 and tried == [(k, errors[k]) for k in range(4)]
    assert grow_while_gaining(lambda k: errors[k], limit=7, min_gain=0.0)[0] == 6  # any gain: six layers
    assert grow_while_gaining(lambda k: errors[k], limit=1)[0] == 1  # the limit holds
    assert grow_while_gaining(lambda k: [1.0, 0.95][k], limit=1)[0] == 0  # 5% is too little


def test_a_quantization_variant_without_components_is_measured_on_every_denoiser():
    # `quantization: int8wo` names no components: the feature quantizes every denoiser, so the table (and the
    # tune's exclusion, which calls this) covers both of Wan 2.2's experts, not a crash on components=None.
    from conftest import small_profile

    from accel.diverge.run import sensitivity
    from accel.profile import parse_profile

    data = small_profile(["tiny-wan22"], [{"name": "q", "features": {"quantization": "int8wo"}}])
    data["workload"]["steps"] = 2
    rows, method, pick = sensitivity(parse_profile(data), "tiny-wan22", "q")
    assert method == "int8wo" and {row.component for row in rows} == {"transformer", "transformer_2"}
    assert pick.tried and pick.tried[0][0] == 0
