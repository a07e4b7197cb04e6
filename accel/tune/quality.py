"""Quality evidence of a tuned cell beyond its record: SSIM's interval over the samples.

The record keeps SSIM's mean and minimum over the samples (``parity``); a constraint on SSIM's lower interval
bound needs each sample's SSIM, read back from the round's outputs (``outputs/<model>/<variant>.npz``) and
compared with the baseline's, as the sweep compared them. The interval is Student's t at 95% over the samples
(one sample: the interval is that sample's value alone).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

CONFIDENCE = 0.95


def t_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` with Student's t interval at ``confidence``."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def attach_ssim_interval(record: dict[str, Any], run_dir: Path, keys: list[str]) -> None:
    """Add ``parity.ssim_ci`` ([low, high]) to a measured variant's record from the round's outputs; leaves a
    record that already has one, or whose outputs are missing, as it is."""
    import numpy as np

    from accel.measure.parity import ssim_frames
    from accel.results import outputs_path
    from accel.sweep.spec import BASELINE

    parity = record.get("parity")
    if not isinstance(parity, dict) or "ssim_ci" in parity:
        return
    baseline = outputs_path(run_dir, record["model"], BASELINE)
    candidate = outputs_path(run_dir, record["model"], record["variant"])
    if not (baseline.is_file() and candidate.is_file()):
        return
    with np.load(baseline) as reference, np.load(candidate) as outputs:
        values = [float(ssim_frames(outputs[key], reference[key]).mean()) for key in keys if key in outputs]
    if values:
        _, low, high = t_interval(values)
        parity["ssim_ci"] = [low, high]
