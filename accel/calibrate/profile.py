"""``calibrate(PROFILE, MODEL)``: a profile's model and workload, calibrated, written where asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.calibration.store import Calibration, save_calibration
from accel.errors import ConfigError


def default_path(model: str) -> Path:
    """Where a model's calibration is kept unless told: ``calibration/<model>.yaml``."""
    return Path("calibration") / f"{model}.yaml"


def _check_out(path: Path, profile: str | Path, variants: list[Any]) -> None:
    """``--out`` may not resolve to the profile, a calibration file the profile's variants read, a run's own data
    (``results.jsonl``...), a checkpoint or the zoo cache (``accel.outputs``)."""
    from accel.outputs import Protected, check_outputs

    protected = Protected()
    protected.add_input(profile, "the profile being calibrated")
    for variant in variants:
        for options in variant.features.values():
            if isinstance(options, dict) and isinstance(options.get("calibration"), str):
                protected.add_input(options["calibration"], f"a calibration file variant '{variant.name}' reads")
    check_outputs([(path, "--out")], protected)


def calibrate(profile: str | Path, model: str, out: str | Path | None = None) -> Calibration:
    """Calibrate ``model`` (a name in the profile's ``models``) on the profile's workload for that model (its
    prompts x seeds, steps and size) and write the file to ``out`` (default ``calibration/<model>.yaml``)."""
    from accel.profile import load_profile
    from accel.sweep.spec import build_requests
    from accel.targets.adapter import AdapterTarget

    loaded = load_profile(profile)
    specs = {spec.name: spec for spec in loaded.models}
    if model not in specs:
        raise ConfigError(f"{profile}: no model '{model}' under models; one of {', '.join(specs)}")
    spec = specs[model]
    if spec.target != "adapter":
        raise ConfigError(f"{profile}: model '{model}' has target {spec.target}; calibrate runs diffusers pipelines")
    workload = loaded.workload_for(spec)
    if workload.steps < 3:
        raise ConfigError(f"{profile}: calibration needs at least 3 steps (workload.steps is {workload.steps})")
    path = Path(out) if out is not None else default_path(model)
    _check_out(path, profile, loaded.variants)  # before the model loads: nothing written where it may not be
    target = AdapterTarget(spec)
    target.load()
    command = f"omni-accel calibrate {profile} --model {model} --out {path}"
    from accel.calibrate.run import calibrate_pipeline

    calibration = calibrate_pipeline(
        model, spec.source, target.pipeline, build_requests(workload), target.generate, command
    )
    save_calibration(calibration, path)
    return calibration
