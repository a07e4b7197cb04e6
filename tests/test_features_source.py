"""``omni-accel features SOURCE``: which features can run on a checkpoint's pipeline, and who refuses the
others (library, model, device, harness), asked of each feature without applying anything."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import invoke

import accel.targets.adapter
from accel.features import FEATURES
from accel.features.base import Feature, FeatureClass, FeatureConfig, Owner, Stage, Support
from accel.features.survey import survey


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
    # diffusers refuses tensor parallelism on a CPU before any pipeline is asked (the probe's refusal).
    assert rows[("tensor_parallel", "(defaults)")]["owner"] == "library"
    # Outside the ranks the sweep starts, context parallelism is not refused: the rows say how many it needs.
    parallel = rows[("context_parallel", "(defaults)")]
    assert parallel["verdict"] == "can run" and "in 2 ranks" in parallel["reason"], parallel


def test_tiny_wan22_a_first_denoiser_feature_is_the_harness_gap_of_its_second_denoiser(monkeypatch, capsys):
    """A feature that reaches the first denoiser only (the built-ins reach both now: narrowed here) is refused
    by the harness on tiny-wan22, naming the denoiser it would leave untouched."""
    from accel.features.base import Reach

    monkeypatch.setattr(type(FEATURES["first_block_cache"]), "reach", Reach.FIRST_DENOISER)
    rows = verdicts(monkeypatch, capsys, "tiny-wan22")
    cache = rows[("first_block_cache", "(defaults)")]
    assert cache["verdict"] == "refused by harness", cache
    assert "transformer_2 would run untouched" in cache["reason"]


def test_tiny_sd15_is_judged_on_its_unet(monkeypatch, capsys):
    rows = verdicts(monkeypatch, capsys, "tiny-sd15")
    assert rows[("compile", "granularity=regional")]["verdict"] == "can run"
    cache = rows[("first_block_cache", "(defaults)")]
    assert cache["verdict"] == "refused by library" and "unet (UNet2DConditionModel)" in cache["reason"], cache
    parallel = rows[("context_parallel", "(defaults)")]
    assert parallel["owner"] == "harness" and "StableDiffusionPipeline" in parallel["reason"], parallel


def test_tiny_wan22_context_parallel_reaches_its_second_denoiser(monkeypatch, capsys):
    rows = verdicts(monkeypatch, capsys, "tiny-wan22")
    parallel = rows[("context_parallel", "(defaults)")]  # each denoiser split through its own _cp_plan
    assert parallel["verdict"] == "can run" and "in 2 ranks" in parallel["reason"], parallel
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


class _Options(FeatureConfig):
    pass


class _Stub(Feature[_Options, Any]):
    """A feature whose probe and check answer as told, recording the dtype its probe was given."""

    family = "stub"
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.CACHE
    config_cls = _Options
    description = "a stub"

    def __init__(self, name: str, probe: Support, check: Support) -> None:
        self.name = name  # type: ignore[misc]
        self.answers = (probe, check)
        self.dtypes: list[str | None] = []

    def probe(self, device: str, options: _Options, dtype: str | None = None) -> Support:
        self.dtypes.append(dtype)
        return self.answers[0]

    def check(self, pipeline: Any, device: str, options: _Options) -> Support:
        return self.answers[1]

    def apply(self, pipeline: Any, options: _Options, context: Any) -> Any:
        raise AssertionError("survey applies nothing")

    def verify(self, handle: Any) -> Any:
        raise AssertionError("survey applies nothing")


def test_survey_asks_probe_with_the_pipelines_dtype_then_check_and_names_an_unnamed_owner_by_scope():
    import torch

    pipeline = SimpleNamespace(transformer=torch.nn.Linear(2, 2).to(torch.bfloat16))
    stubs = {
        "kernel": _Stub("kernel", Support.no("no kernel for it"), Support.yes()),
        "blocks": _Stub("blocks", Support.yes(), Support.no("no blocks to cache")),
        "library": _Stub("library", Support.yes(), Support.no("the library refuses", Owner.LIBRARY)),
        "fine": _Stub("fine", Support.yes(), Support.yes()),
    }
    rows = {row.feature: row for row in survey(pipeline, "cpu", stubs)}
    assert [(rows[n].verdict, rows[n].owner, rows[n].reason) for n in stubs] == [
        ("refused by device", "device", "no kernel for it"),  # a probe's refusal naming no owner: the device's
        ("refused by model", "model", "no blocks to cache"),  # a check's: the model's
        ("refused by library", "library", "the library refuses"),
        ("can run", None, ""),
    ]
    assert all(stub.dtypes == ["bfloat16"] for stub in stubs.values())


def test_a_synthetic_source_is_judged_on_its_shapes_without_weights(monkeypatch, capsys):
    import accel.zoo.synthetic

    built = []
    real = accel.zoo.synthetic.build_pipeline
    monkeypatch.setattr(accel.zoo.synthetic, "build_pipeline", lambda *args: built.append(args[1]) or real(*args))
    rows = verdicts(monkeypatch, capsys, "synthetic:flux.1-dev?depth=1")
    assert built == ["meta"]  # FLUX.1-dev's published widths: no random weights allocated
    assert rows[("compile", "granularity=regional")]["verdict"] == "can run"
    assert rows[("faster_cache", "(defaults)")]["verdict"] == "refused by library"
