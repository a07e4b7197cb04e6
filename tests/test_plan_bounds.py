"""Plan-time bounds (issue 25's review): every value a cell would only trip on (or run for days with) is refused by
``omni-accel plan`` with one line naming the file, the key and what is allowed, exit 2, as workload.steps (<= 10000)
and workload.height (<= 16384) already were."""

from __future__ import annotations

import pytest
from conftest import invoke, small_profile


def _plan(profile, write_profile, monkeypatch, capsys) -> tuple[int, list[str]]:
    path = write_profile(profile)
    code, _, err = invoke(monkeypatch, capsys, "plan", str(path))
    return code, err.strip().splitlines()


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("pairs", 100_000_000_000, "<= 10000"),
        ("max_pairs", 1_000_000_000_000, "<= 10000"),
        ("threads", 100_000, "<= 1024"),
        ("warmup", 1_000_000, "<= 1000"),
        ("repeats", 1_000_000, "<= 1000"),
        ("timeout_s", 1.0e300, "<= 604800"),
        ("pair_budget_s", 1.0e300, "<= 604800"),
    ],
)
def test_plan_refuses_an_unbounded_measure_value(key, value, allowed, write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["measure"] = {key: value}
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith("error: ") and "profile.yaml: " in lines[0]
    assert f"measure.{key}: Input should be less than or equal to" in lines[0] and allowed in lines[0], lines


def test_the_bounds_themselves_are_accepted(write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["measure"] = {"pairs": 10_000, "max_pairs": 10_000, "threads": 1, "warmup": 1000, "repeats": 1000}
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 0, lines


@pytest.mark.parametrize(
    "key, value, instead",
    [
        # workload.steps is bounded (<= 10000); a call_kwargs value went around it and the report said 2 steps
        ("num_inference_steps", 1_000_000, "workload.steps"),
        ("height", 1_048_576_000, "workload.height"),
        ("num_images_per_prompt", 100_000_000, "workload.num_images_per_prompt"),
        ("num_videos_per_prompt", 100_000_000, "workload.num_images_per_prompt"),
        ("guidance_scale", 7.0, "workload.guidance_scale"),
        ("max_area", 5, "workload.height and workload.width"),
        ("prompt", "x", "workload.prompts"),
        ("generator", 3, "workload.seeds"),
    ],
)
def test_call_kwargs_cannot_set_what_the_workload_sets(key, value, instead, write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0]["call_kwargs"] = {key: value}
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert f"profile.yaml: models[0].call_kwargs: '{key}' comes from {instead} on every call" in lines[0], lines


def test_call_kwargs_output_type_is_the_harnesss(write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0]["call_kwargs"] = {"output_type": "pil"}
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and "models[0].call_kwargs: 'output_type' is set by omni-accel" in lines[0]


# A synthetic FLUX is checked without building anything (a zoo name not built yet is left to the sweep).
SYNTHETIC_FLUX = "synthetic:flux.1-dev?depth=1&width=4"


def test_a_misspelt_adapter_call_kwarg_is_refused_at_plan(write_profile, monkeypatch, capsys):
    """It used to reach every cell of the model and fail it with the pipeline's TypeError."""
    profile = small_profile()
    profile["models"][0].update(source=SYNTHETIC_FLUX, call_kwargs={"max_sequence_lenght": 32})
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert "models[0].call_kwargs: unknown key 'max_sequence_lenght': FluxPipeline's call has no such" in lines[0]
    assert "Did you mean 'max_sequence_length'?" in lines[0] and "Allowed keys: " in lines[0]
    # the workload's keys are not offered
    assert "num_inference_steps" not in lines[0].split("Allowed keys: ")[1]


def test_a_real_adapter_call_kwarg_passes_plan(write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0].update(source=SYNTHETIC_FLUX, call_kwargs={"max_sequence_length": 32, "true_cfg_scale": 1.0})
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 0, lines


@pytest.mark.parametrize(
    "call_kwargs, message",
    [
        # a native pipeline reads two keys; anything else was silently ignored
        ({"true_cfg_scal": 2.0}, "unknown key 'true_cfg_scal' for target native"),
        ({"max_sequence_length": 100_000}, "max_sequence_length: 100000 is not allowed: expected a whole number > 0"),
        ({"max_sequence_length": "long"}, "max_sequence_length: 'long' is not allowed"),
        ({"true_cfg_scale": float("inf")}, "true_cfg_scale: inf is not allowed: expected a finite number >= 0"),
        ({"true_cfg_scale": True}, "true_cfg_scale: True is not allowed"),
    ],
)
def test_native_call_kwargs_are_checked(call_kwargs, message, write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0].update(target="native", call_kwargs=call_kwargs)
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, (code, lines)
    assert f"models[0].call_kwargs: {message}" in lines[0], lines


def test_native_call_kwargs_it_reads_pass(write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0].update(target="native", call_kwargs={"true_cfg_scale": 2.5, "max_sequence_length": 32})
    code, lines = _plan(profile, write_profile, monkeypatch, capsys)
    assert code == 0, lines
