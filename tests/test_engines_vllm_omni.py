"""vLLM-Omni as a target, end to end on the CPU: its environment is built when missing (a few minutes,
about 4 GB, from PyPI), then a reduced engines profile runs and is checked against the library.

Each finding the manual (docs/engines.md) states about vLLM-Omni is asserted here from what vLLM-Omni itself printed or
produced during the run (its error messages, its log lines, its images), never from the mapping's wording."""

from __future__ import annotations

import os

import pytest
from conftest import small_profile

from accel.engines import vllm_omni
from accel.engines.mapping import load_mapping
from accel.profile import parse_profile
from accel.sweep.runner import run_sweep

pytestmark = pytest.mark.slow
CACHES = ("tea-cache", "cache-dit", "mag-cache")


@pytest.fixture(scope="module")
def engines_run(tmp_path_factory):
    if os.environ.get("OMNI_ACCEL_SKIP_ENGINES") == "1":
        pytest.skip("OMNI_ACCEL_SKIP_ENGINES=1: the vLLM-Omni environment is not built in this run")
    vllm_omni.create_environment()  # idempotent; builds only when missing
    profile = small_profile(
        ["tiny-flux"],
        [
            {"name": "tea-cache", "features": {"tea_cache": 0.4}},
            {"name": "cache-dit", "features": {"cache_dit": {"residual_diff_threshold": 0.5, "max_warmup_steps": 2}}},
            {"name": "mag-cache", "features": {"mag_cache": {"threshold": 0.5}}},
            {"name": "attn-sdpa", "features": {"attention_backend": "native"}},
            {"name": "model-offload", "features": {"enable_cpu_offload": True}},
            {"name": "group-offload", "features": {"group_offload": {}}},
        ],
        steps=8,
    )
    profile["models"] = [
        {"name": "library", "source": "tiny-flux", "target": "adapter"},
        {"name": "native", "source": "tiny-flux", "target": "native"},
        {"name": "omni-native", "source": "tiny-flux", "target": "vllm-omni"},
        {"name": "omni-adapter", "source": "tiny-flux", "target": "vllm-omni-adapter"},
    ]
    profile["measure"] = {"warmup": 0, "repeats": 1, "executor": "process", "noise_floor": False,
                          "reference_model": "library", "timeout_s": 900}  # fmt: skip
    run_dir = tmp_path_factory.mktemp("engines")
    return run_sweep(parse_profile(profile), "engines.yaml", run_dir, show_progress=False)


def _cell(run, model, variant):
    return next(r for r in run.records if (r["model"], r["variant"]) == (model, variant))


def test_every_target_matches_the_library(engines_run):
    for model in ("native", "omni-native", "omni-adapter"):
        baseline = _cell(engines_run, model, "baseline")
        assert baseline["status"] == "ok", (model, baseline.get("error"))
        parity = baseline["parity_vs_reference"]
        assert parity["ssim"] >= 0.999, (model, parity)  # the engines' 8-bit output rounds by <= 1/255
    assert _cell(engines_run, "native", "baseline")["parity_vs_reference"]["bit_identical"]


@pytest.mark.parametrize("variant", CACHES)
def test_the_diffusers_path_refuses_every_cache_backend_in_its_own_words(engines_run, variant):
    name = variant.replace("-", "_")
    cell = _cell(engines_run, "omni-adapter", variant)
    assert (cell["status"], cell["unsupported_scope"], cell["decided"]) == ("unsupported", "model", "measured")
    assert cell["error"] == (
        f"{name}: refused by vLLM-Omni on vllm-omni-adapter: Cache backend '{name}' is not supported with the "
        "diffusers backend. TeaCache/Cache-DiT require hooking into individual transformer blocks."
    )
    assert cell["error"].split(": ", 2)[2] in (engines_run.run_dir / cell["engine_log"]).read_text()


@pytest.mark.parametrize(
    ("variant", "line"),
    [
        ("tea-cache", "TeaCache applied with rel_l1_thresh=0.4, transformer_class=FluxTransformer2DModel"),
        ("cache-dit", "Cache-dit enabled successfully on FluxPipeline"),
        ("mag-cache", "MagCache: Applying FluxMagCacheStrategy for 'FluxTransformer2DModel'"),
    ],
)
def test_the_native_path_engages_each_cache_with_its_log_line_and_an_effect(engines_run, variant, line):
    cell = _cell(engines_run, "omni-native", variant)
    assert cell["status"] == "ok", cell.get("error")
    evidence = cell["evidence"][variant.replace("-", "_")]
    assert evidence["engaged"] and evidence["engine_log"] == line
    assert not cell["parity"]["bit_identical"]  # an effect its default path cannot produce


def test_the_attention_setting_engages_on_the_native_path_only(engines_run):
    native = _cell(engines_run, "omni-native", "attn-sdpa")
    assert native["status"] == "ok", native.get("error")
    assert native["evidence"]["attention_backend"]["engine_log"] == (
        "Resolved diffusion attention backend 'SDPA' for role='self' via attention_config.default"
    )
    # The diffusers path runs diffusers' attention: vLLM-Omni accepts the setting and shows nothing of it.
    adapter = _cell(engines_run, "omni-adapter", "attn-sdpa")
    assert adapter["status"] == "failed" and adapter["decided"] == "measured"
    assert (
        adapter["error"]
        == "no evidence of engagement: attention_backend: accepted by vLLM-Omni; no log line of it engaging"
    )


def test_model_offload_is_enabled_on_a_cpu_with_nothing_to_offload_to(engines_run):
    cell = _cell(engines_run, "omni-native", "model-offload")
    assert cell["status"] == "ok", cell.get("error")
    assert cell["evidence"]["enable_cpu_offload"]["engine_log"].startswith(
        "Model-level offloading enabled: transformer <-> text_encoder, text_encoder_2"
    )
    assert cell["parity"]["bit_identical"] and cell["device"] == "cpu"


def test_mapping_decisions_are_declared_and_never_run(engines_run):
    for model in ("omni-native", "omni-adapter"):
        cell = _cell(engines_run, model, "group-offload")
        assert (cell["status"], cell["decided"]) == ("unsupported", "declared")
        assert "engine_log" not in cell
    assert "(declared, not measured)" in engines_run.report_path.read_text()


def test_engine_cells_are_measured_from_outside(engines_run):
    omni = _cell(engines_run, "omni-native", "baseline")
    assert omni["cold_s"] > omni["warm"]["median"] > 0 and omni["process_wall_s"] >= omni["cold_s"]
    report = engines_run.report_path.read_text()
    assert "## Targets against `library`" in report and "| omni-adapter | vllm-omni-adapter |" in report


def test_each_cited_message_source_is_a_module_of_the_installed_engine():
    if vllm_omni.environment_info() is None:
        pytest.skip(f"the vLLM-Omni environment is not installed: {vllm_omni.CREATE_COMMAND}")
    site = next((vllm_omni.environment_dir() / "lib").glob("python*/site-packages"))
    mapping = load_mapping()
    entries = [e.get("evidence") for e in mapping["features"].values()]
    entries += [e for path in mapping["paths"].values() for e in (path.get("refuses") or {}).values()]
    entries += [e for d in mapping["devices"].values() for kind in ("refuses", "skips") for e in d[kind].values()]
    sources = {entry["source"] for entry in entries if entry}
    assert sources and all((site / source).is_file() for source in sources), sources
