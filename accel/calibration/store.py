"""The calibration file: one YAML per model, what ``omni-accel calibrate`` measured and fitted, loadable with pydantic.

Per denoiser (``transformer``, and ``transformer_2`` where a pipeline has two): TeaCache's rescaling polynomial with
its fit quality, MagCache's magnitude ratios from diffusers' calibration mode, and the observed range of each
cache's decision signal on the calibration prompts (percentiles), which ``accel.calibrate.threshold_status`` reads
to call a threshold inert before anything is timed.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from accel.errors import ConfigError

FORMAT_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Percentiles(_Strict):
    """The spread of observed values: min, 10th, 50th, 90th percentile, max, and how many there were."""

    min: float
    p10: float
    p50: float
    p90: float
    max: float
    count: int = Field(ge=1)

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        """The percentiles of ``values`` (at least one)."""
        data = np.asarray(values, dtype=float)
        p10, p50, p90 = (float(v) for v in np.percentile(data, [10, 50, 90]))
        return cls(min=float(data.min()), p10=p10, p50=p50, p90=p90, max=float(data.max()), count=len(values))

    def line(self) -> str:
        """``min .. p50 .. max`` for messages."""
        return f"min {self.min:.4g}, p10 {self.p10:.4g}, p50 {self.p50:.4g}, p90 {self.p90:.4g}, max {self.max:.4g}"


class TeaCacheFit(_Strict):
    """TeaCache's rescaling polynomial fitted on this model (numpy.poly1d order, highest power first)."""

    coefficients: list[float] = Field(min_length=2)
    degree: int = Field(ge=1)
    points: int = Field(ge=2, description="(input change, output change) pairs the fit used.")
    r2: float = Field(description="Coefficient of determination of the fit on its points (1: perfect).")
    residual_rms: float = Field(ge=0)
    residual_max: float = Field(ge=0)
    input_change: Percentiles = Field(description="Relative L1 change of the modulated input per step.")
    output_change: Percentiles = Field(description="Relative L1 change of the denoiser's output per step.")
    rescaled_change: Percentiles = Field(
        description="The polynomial at each input change: the distance one step adds (TeaCache's decision signal)."
    )
    run_total_max: float = Field(description="The largest sum of rescaled changes of one run's skippable steps.")


class MagCacheCalibration(_Strict):
    """MagCache's magnitude ratios per step from diffusers' calibration mode, averaged over the runs."""

    mag_ratios: list[float] = Field(min_length=1)
    steps: int = Field(ge=1, description="This denoiser's steps per run at the calibration's step count.")
    runs: int = Field(ge=1, description="Ratio lists averaged (a run's CFG branches each give one).")
    error: Percentiles = Field(description="|1 - ratio| per step after the first: the error MagCache accumulates.")


class SignalRange(_Strict):
    """The observed range of a cache's decision signal (compared with its threshold) on the calibration runs."""

    signal: str
    observed: Percentiles


class DenoiserCalibration(_Strict):
    """What was calibrated on one denoiser; a feature that could not be calibrated says why instead."""

    transformer_class: str
    tea_cache: TeaCacheFit | None = None
    mag_cache: MagCacheCalibration | None = None
    first_block_cache: SignalRange | None = None
    cache_dit: SignalRange | None = None
    not_calibrated: dict[str, str] = Field(default_factory=dict, description="Feature -> why it has no section.")


class Calibration(_Strict):
    """One model's calibration file."""

    format_version: int = FORMAT_VERSION
    model: str
    source: str
    pipeline: str
    prompts: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    steps: int = Field(ge=2)
    height: int
    width: int
    num_frames: int | None = None
    guidance_scale: float
    command: str = Field(description="The command that reproduces this file.")
    date: str
    harness_version: str
    library_versions: dict[str, str]
    denoisers: dict[str, DenoiserCalibration] = Field(min_length=1)

    def tea_cache_fit(self, denoiser: str) -> TeaCacheFit | None:
        """The fitted polynomial of ``denoiser`` (None: not calibrated)."""
        section = self.denoisers.get(denoiser)
        return section.tea_cache if section is not None else None

    def to_yaml(self) -> str:
        """The file's text."""
        header = f"# omni-accel calibration of {self.model}; reproduce with: {self.command}\n"
        return header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, width=120)


def save_calibration(calibration: Calibration, path: str | Path) -> Path:
    """Write ``calibration`` to ``path`` (folders created)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(calibration.to_yaml())
    load_calibration.cache_clear()
    return target


@functools.cache
def load_calibration(path: str | Path) -> Calibration:
    """The calibration file at ``path``; a ConfigError that says how to make one otherwise."""
    from pydantic import ValidationError

    from accel.yaml_bounds import load_yaml_file

    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(
            f"calibration file {path} not found (from {Path.cwd()}); make it with "
            "omni-accel calibrate PROFILE --model MODEL --out FILE, or give its absolute path"
        )
    data = load_yaml_file(file, "calibration", advice="regenerate it with omni-accel calibrate")
    try:
        return Calibration.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            f"{path}: not a calibration file ({error.error_count()} problems, first: "
            f"{'.'.join(str(p) for p in error.errors()[0]['loc'])}: {error.errors()[0]['msg']}); "
            "regenerate it with omni-accel calibrate"
        ) from error
