"""Running a calibration: the calibration prompts through the model, once per cache, every step computed.

1. TeaCache, recording (``tea_cache``'s own hooks, never skipping): per step and CFG stream, the relative L1
   change of the modulated input and of the denoiser's output; the polynomial is fitted on the pairs.
2. MagCache through diffusers' own calibration mode (``MagCacheConfig(calibrate=True)``), one denoiser at a time
   with its own step count; the ratio lists diffusers logs at the end of each run are averaged.
3. FirstBlockCache at a threshold nothing passes: the residual change its head hook computes, per step.
4. Cache-DiT at a threshold nothing passes: the residual differences ``cache_dit.summary`` reports per step.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import io
import logging
from collections.abc import Callable, Iterator
from typing import Any

from accel.calibrate.fit import average_ratios, fit_tea_cache
from accel.calibration.store import Calibration, DenoiserCalibration, Percentiles, SignalRange
from accel.features.base import denoisers

NEVER = 1e-12  # a threshold no signal falls below: every step computed, every signal observed
MAG_LOGGER = "diffusers.hooks.mag_cache"
MAG_PREFIX = "MagCache Calibration Results: "


def _versions() -> dict[str, str]:
    import importlib.metadata as metadata

    found = {}
    for package in ("diffusers", "torch", "cache-dit"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    return found


def _each(requests: list[Any], generate: Callable[[Any], Any], around: Callable[[], Any] | None = None) -> None:
    for request in requests:
        if around is None:
            generate(request)
            continue
        with around():
            generate(request)


def tea_cache_pairs(pipeline: Any, requests: list[Any], generate: Callable[[Any], Any]) -> dict[str, Any]:
    """Per denoiser: the (input change, output change) pairs per run and stream, and its steps per run."""
    from accel.features.teacache import TeaCacheConfig, _TeaCacheHandle

    steps = requests[0].steps
    handle = _TeaCacheHandle(pipeline, TeaCacheConfig(), steps, record=True)
    try:
        for request in requests:
            handle.begin_run()
            generate(request)
            handle.end_run()
    finally:
        handle.remove()
    found: dict[str, Any] = {}
    for name in handle.models:
        runs = [list(streams) for run in handle.runs for streams in run.get("pairs", {}).get(name, {}).values()]
        counts = {len(run.get("steps", {}).get(name, [])) for run in handle.runs}
        found[name] = {"runs": runs, "steps": max(counts) if counts else 0}
    return found


@contextlib.contextmanager
def _mag_log() -> Iterator[list[list[float]]]:
    """The ratio lists diffusers' MagCache calibration logs, captured (its print to stdout silenced)."""
    captured: list[list[float]] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith(MAG_PREFIX):
                captured.append([float(v) for v in ast.literal_eval(message[len(MAG_PREFIX) :])])

    logger = logging.getLogger(MAG_LOGGER)
    handler, level, propagate = _Capture(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield captured
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def mag_cache_ratios(model: Any, steps: int, requests: list[Any], generate: Callable[[Any], Any]) -> list[list[float]]:
    """The ratio lists diffusers' MagCache calibration mode logs for ``model`` (``steps``: its steps per run)."""
    from diffusers import MagCacheConfig

    model.enable_cache(MagCacheConfig(calibrate=True, num_inference_steps=steps))
    try:
        with _mag_log() as captured:
            _each(requests, generate)
    finally:
        model.disable_cache()
    return captured


def first_block_diffs(pipeline: Any, requests: list[Any], generate: Callable[[Any], Any]) -> dict[str, list[float]]:
    """Per denoiser: the residual change diffusers' FirstBlockCache head hook compares with its threshold."""
    from diffusers import FirstBlockCacheConfig
    from diffusers.hooks.first_block_cache import FBCHeadBlockHook

    found: dict[str, list[float]] = {}
    models = {name: m for name, m in denoisers(pipeline).items() if hasattr(m, "enable_cache")}
    for name, model in models.items():
        model.enable_cache(FirstBlockCacheConfig(threshold=NEVER))
        diffs = found.setdefault(name, [])
        for module in model.modules():
            registry = getattr(module, "_diffusers_hook", None)
            for hook in registry.hooks.values() if registry is not None else ():
                if isinstance(hook, FBCHeadBlockHook):
                    hook._should_compute_remaining_blocks = _recording(hook, diffs)
    try:
        _each(requests, generate)
    finally:
        for model in models.values():
            model.disable_cache()
    return found


def _recording(hook: Any, diffs: list[float]) -> Callable[[Any], bool]:
    original = hook._should_compute_remaining_blocks

    def decide(residual: Any) -> bool:
        previous = hook.state_manager.get_state().head_block_residual
        if previous is not None:  # diffusers' own formula (first_block_cache.py)
            diffs.append(float(((residual - previous).abs().mean() / previous.abs().mean()).item()))
        return bool(original(residual))

    return decide


def cache_dit_diffs(pipeline: Any, requests: list[Any], generate: Callable[[Any], Any]) -> dict[str, list[float]]:
    """Per denoiser: the residual differences ``cache_dit.summary`` reports (every step computed)."""
    from accel.features import FEATURES
    from accel.features.applied import apply

    config = FEATURES["cache_dit"].parse_options({"residual_diff_threshold": NEVER, "max_warmup_steps": 1})
    names = list(denoisers(pipeline))
    found: dict[str, list[float]] = {name: [] for name in names}
    with apply(pipeline, config, num_inference_steps=requests[0].steps) as applied:
        _each(requests, generate)
        for run in applied.handles[0].runs:
            for name, diffs in zip(names, run.get("residual_diffs", []), strict=False):
                found[name] += diffs
    return found


def _fields(name: str, diffs: list[float], signal: str) -> SignalRange | None:
    return SignalRange(signal=signal, observed=Percentiles.of(diffs)) if diffs else None


def calibrate_pipeline(
    model: str, source: str, pipeline: Any, requests: list[Any], generate: Callable[[Any], Any], command: str
) -> Calibration:
    """Calibrate every cache on ``pipeline`` over ``requests`` (``generate`` runs one); the file's content."""
    import accel
    from accel.features.teacache_inputs import layout_for

    models = denoisers(pipeline)
    sections: dict[str, dict[str, Any]] = {n: {"transformer_class": type(m).__name__} for n, m in models.items()}
    missing: dict[str, dict[str, str]] = {name: {} for name in models}
    unhooked = [name for name, m in models.items() if layout_for(m) is None]
    steps_of: dict[str, int] = {}
    if unhooked:
        for name in models:
            missing[name]["tea_cache"] = (
                f"harness: tea_cache's hooks cannot compute the modulated input of {type(models[unhooked[0]]).__name__}"
            )
    else:
        for name, found in tea_cache_pairs(pipeline, requests, generate).items():
            steps_of[name] = found["steps"]
            sections[name]["tea_cache"] = fit_tea_cache(found["runs"], found["steps"])
    for name, module in models.items():
        if not hasattr(module, "enable_cache"):
            missing[name]["mag_cache"] = f"{type(module).__name__} has no enable_cache() (diffusers' CacheMixin)"
            continue
        ratios = mag_cache_ratios(module, steps_of.get(name, requests[0].steps), requests, generate)
        if ratios:
            sections[name]["mag_cache"] = average_ratios(ratios)
        else:
            missing[name]["mag_cache"] = "diffusers' MagCache calibration logged no ratios (no block list it hooks)"
    for name, diffs in first_block_diffs(pipeline, requests, generate).items():
        sections[name]["first_block_cache"] = _fields(name, diffs, "first block residual change")
    for name, diffs in cache_dit_diffs(pipeline, requests, generate).items():
        sections[name]["cache_dit"] = _fields(name, diffs, "residual diff")
    first = requests[0]
    return Calibration(
        model=model,
        source=source,
        pipeline=type(pipeline).__name__,
        prompts=list(dict.fromkeys(r.prompt for r in requests)),
        seeds=list(dict.fromkeys(r.seed for r in requests)),
        steps=first.steps,
        height=first.height,
        width=first.width,
        num_frames=first.num_frames if first.num_frames > 1 else None,
        guidance_scale=first.guidance_scale,
        command=command,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        harness_version=accel.__version__,
        library_versions=_versions(),
        denoisers={name: DenoiserCalibration(**sections[name], not_calibrated=missing[name]) for name in models},
    )
