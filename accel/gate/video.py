"""What a video must reach besides its mean over frames: its worst frame (SSIM and PSNR, by class) and its worst
frame pair's temporal consistency, each check naming the video (prompt x seed) and the frame it found.

The worst frame of a lossy cell: ``video.worst_frame.lossy.<family>`` of the thresholds file (a mix of families
takes the loosest; a family missing there holds every frame to its mean limits, a frame being an image; never
stricter than the mean limits in effect, so a model's override of those loosens its frames too). Of a
lossless cell: its class's own video limits (``lossless_limits``), every frame as the mean. The temporal limit is
derived from the worst-frame PSNR limit: ``INDEPENDENT_ERRORS_DB`` below it, what errors independent from frame to
frame reach with every frame at the limit; an error that swings between frames more than that is flicker, which
the per-frame values cannot see.
"""

from __future__ import annotations

from typing import Any

from accel.gate.data import GateData
from accel.gate.limits import declared_lossy_limits, limit_text, lossless_limits, lossy_families
from accel.gate.verdict import Check
from accel.measure.video import INDEPENDENT_ERRORS_DB

VIDEO = "video"


def worst_frame_limits(
    data: GateData, record: dict[str, Any], noise_floor: dict[str, Any] | None
) -> tuple[float, float, str]:
    """(SSIM, PSNR, description) the worst frame of a video cell must reach (module docstring)."""
    families = lossy_families(record)
    if not families:
        return lossless_limits(data, record, noise_floor, VIDEO)
    overrides = (data.thresholds.get("models") or {}).get(record["model"]) or {}
    mean = {**declared_lossy_limits(), **data.thresholds["lossy"], **(overrides.get("lossy") or {})}
    frame = ((data.thresholds.get("video") or {}).get("worst_frame") or {}).get("lossy") or {}
    # Never stricter than the mean's limit in effect (a model's override of its mean limits loosens its frames too).
    limits = [{**mean[family], **(frame.get(family) or {})} for family in families]
    ssim = min(min(float(x["ssim"]), float(mean[f]["ssim"])) for f, x in zip(families, limits, strict=True))
    psnr = min(min(float(x["psnr"]), float(mean[f]["psnr"])) for f, x in zip(families, limits, strict=True))
    return ssim, psnr, f"lossy ({', '.join(families)})"


def _where(worst: dict[str, Any], pair: bool = False) -> str:
    frame = int(worst["frame"])
    return f"{worst['sample']} frames {frame}-{frame + 1}" if pair else f"{worst['sample']} frame {frame}"


def video_checks(data: GateData, record: dict[str, Any], noise_floor: dict[str, Any] | None) -> list[Check]:
    """The worst frame's SSIM and PSNR and the worst frame pair's temporal PSNR of a video cell against their
    limits, each naming where it is (frames counted from 0); none for a cell without ``video_parity``."""
    video = record.get("video_parity")
    if not video:
        return []
    ssim_min, psnr_min, kind = worst_frame_limits(data, record, noise_floor)
    checks = []
    for metric, limit in (("ssim", ssim_min), ("psnr", psnr_min)):
        worst = video.get(f"worst_{metric}")
        if worst is None:
            continue
        name = "SSIM" if metric == "ssim" else "PSNR dB"
        value = worst["value"]
        checks.append(
            Check(f"{name} worst frame, {kind}: {_where(worst)}", value >= limit, value, f">= {limit_text(limit)}")
        )
    worst = video.get("worst_temporal_psnr")
    if worst is not None:
        limit = psnr_min - INDEPENDENT_ERRORS_DB
        checks.append(
            Check(
                f"temporal PSNR dB worst frame pair, {kind}: {_where(worst, pair=True)}",
                worst["value"] >= limit,
                worst["value"],
                f">= {limit_text(limit)} (the worst-frame PSNR limit - 3.01 dB, errors independent frame to frame)",
            )
        )
    return checks
