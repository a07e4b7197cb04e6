"""TeaCache (``tea_cache``): skip the transformer blocks on steps whose input barely changed. Lossy.

Not in diffusers, so implemented here as torch hooks, on every denoiser (Wan 2.2's two each with their own
polynomial). Each transformer call computes its family's modulated input (``accel.features.teacache_inputs``:
FLUX, HunyuanVideo, Mochi, LTX-Video, Wan, CogVideoX, as TeaCache's authors do per family); the relative L1 change
from the previous call of the same stream, rescaled by a per-model polynomial, accumulates until it passes
``rel_l1_thresh``. Below it, the blocks are skipped and the residual they added on the last computed call is
reused. Steps are counted by one clock shared by the denoisers (a new timestep value is a new step); calls of one
step with the same timestep (CFG branches called separately) are streams deciding apart, as the authors keep
Wan's even and odd calls apart. The first call of each stream and the last step are always computed, and the
state starts fresh with every run.

Coefficients, per denoiser: the user's ``coefficients``, else the polynomial fitted by ``omni-accel calibrate``
(``calibration: PATH``), else the set TeaCache's authors publish for the family (ali-vilab/TeaCache on GitHub,
TeaCache4<Model>/*.py, kept as data with the file of each in ``feature_matrix/teacache_coefficients.yaml``). A
family the hooks reach without any needs calibration (a data gap of the harness, not the model's: omni-accel
calibrate fits one); a family whose input the hooks cannot compute is the harness's gap too. Evidence: the steps
cached on each run, counted by the hook itself, and the block work the harness counted (``accel.features.work``):
cached steps that skipped nothing are "engaged, no effect".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import Field

from accel.features.base import (
    LOSSY_LIMITS,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    denoisers,
)
from accel.features.cache import SKIPS_WORK, skipped_work_verdict
from accel.features.teacache_inputs import LAYOUTS, Layout, ReuseResidual, layout_for
from accel.features.work import BlockWork

COEFFICIENTS_FILE = "teacache_coefficients.yaml"


@dataclass(frozen=True)
class PublishedSet:
    """One coefficient set TeaCache's authors publish: its name, the polynomial, and where it is published."""

    name: str
    coefficients: tuple[float, ...]
    source: str  # repository, file and commit


@functools.cache
def published_sets() -> dict[str, PublishedSet]:
    """The default published set per transformer class (aliases resolved), from ``feature_matrix``'s data file."""
    from accel.data import data_dir

    path = data_dir("feature_matrix") / COEFFICIENTS_FILE
    data = yaml.safe_load(path.read_text())
    families: dict[str, Any] = data["families"]
    found: dict[str, PublishedSet] = {}
    for name, entry in families.items():
        family = families[entry["alias_of"]] if "alias_of" in entry else entry
        chosen = family["sets"][family["default"]]
        coefficients = tuple(float(c) for c in chosen["coefficients"])
        source = f"{data['source']} {chosen['file']} at {str(data['commit'])[:12]}"
        found[name] = PublishedSet(family["default"], coefficients, source)
    return found


class TeaCacheConfig(FeatureConfig):
    """Options of ``tea_cache``."""

    rel_l1_thresh: float = Field(
        default=0.2, gt=0, description="Accumulated rescaled change allowed before recomputing; higher: faster."
    )
    coefficients: list[float] | None = Field(
        default=None,
        min_length=2,
        description="Rescaling polynomial for every denoiser, highest power first; default: the calibration's, "
        "else the published set for the transformer.",
    )
    calibration: str | None = Field(
        default=None,
        description="A calibration file (omni-accel calibrate): its fitted polynomial per denoiser.",
    )


def _rel_l1(current: torch.Tensor, previous: torch.Tensor) -> float:
    return float(((current - previous).abs().mean() / previous.abs().mean()).item())


def _timestep_key(kwargs: dict[str, Any]) -> float | None:
    timestep = kwargs.get("timestep")
    return float(timestep.float().max().item()) if isinstance(timestep, torch.Tensor) else None


@dataclass
class _Stream:
    """One stream of calls of one denoiser (a CFG branch called separately is its own stream, as TeaCache's
    authors keep Wan's even and odd calls apart)."""

    previous: torch.Tensor | None = None
    residual: torch.Tensor | None = None
    accumulated: float = 0.0
    output: torch.Tensor | None = None
    change: float | None = None


def coefficients_for(
    name: str, transformer: Any, options: TeaCacheConfig
) -> tuple[list[float], str, str | None] | None:
    """The polynomial for denoiser ``name``: the user's, the calibration's, else the published set (None: none).
    Returns (coefficients, where they come from, the file)."""
    if options.coefficients is not None:
        return list(options.coefficients), "user-supplied", None
    if options.calibration is not None:
        from accel.calibration.store import load_calibration

        fit = load_calibration(options.calibration).tea_cache_fit(name)
        if fit is not None:
            return list(fit.coefficients), f"calibrated (R² {fit.r2:.3f})", options.calibration
    published = published_sets().get(type(transformer).__name__)
    if published is None:
        return None
    return list(published.coefficients), f"published for {published.name} (ali-vilab/TeaCache)", published.source


class _TeaCacheHandle(Handle):
    """TeaCache on every denoiser: a shared step clock, a decision per denoiser and stream.

    ``record``: calibration mode; never skips, records per step the input change and the output change."""

    def __init__(self, pipeline: Any, options: TeaCacheConfig, steps: int, record: bool = False) -> None:
        super().__init__()
        self.threshold = options.rel_l1_thresh
        self.steps = steps
        self.record = record
        self.models = denoisers(pipeline)
        self.layouts: dict[str, Layout] = {}
        self.rescale: dict[str, np.poly1d] = {}
        self.coefficients_source: dict[str, str] = {}
        self.coefficients_files: dict[str, str] = {}
        self.original: dict[str, dict[str, Any]] = {}
        self.hooks: list[Any] = []
        for name, model in self.models.items():
            layout = layout_for(model)
            assert layout is not None, f"tea_cache: check() admits {type(model).__name__} without a layout"
            self.layouts[name] = layout
            chosen = coefficients_for(name, model, options)
            coefficients, source, file = chosen if chosen is not None else ([1.0, 0.0], "none (recording)", None)
            self.rescale[name] = np.poly1d(coefficients)
            self.coefficients_source[name] = source
            if file:
                self.coefficients_files[name] = file
            self.original[name] = {part: getattr(model, part) for part in layout.block_lists}
            first = self.original[name][layout.block_lists[0]][0]
            last = self.original[name][layout.block_lists[-1]][-1]
            self.hooks += [
                model.register_forward_pre_hook(functools.partial(self._decide, name), with_kwargs=True),
                model.register_forward_hook(functools.partial(self._restore, name)),
                first.register_forward_pre_hook(self._record_input, with_kwargs=True),
                last.register_forward_hook(functools.partial(self._record_output, name)),
            ]
        self._reset()
        self.work = BlockWork(self.models, str(next(next(iter(self.models.values())).parameters()).device))

    def _reset(self) -> None:
        self.step = -1
        self.stream = 0
        self.last_key: float | None = None
        self.streams: dict[tuple[str, int], _Stream] = {}
        self.active: _Stream | None = None
        self.active_key: tuple[str, int] = ("", 0)
        self.block_input: torch.Tensor | None = None
        self.skipping: str | None = None

    def begin_run(self) -> None:
        super().begin_run()
        self._reset()  # a fresh cache context for every run
        self.work.begin()

    def end_run(self) -> None:
        self.current["work"] = self.work.end()

    def _clock(self, kwargs: dict[str, Any]) -> int:
        """Advance the shared step clock: a new timestep value is a new step, the same one another stream."""
        key = _timestep_key(kwargs)
        if key is None or key != self.last_key:
            self.step += 1
            self.stream = 0
        else:
            self.stream += 1
        self.last_key = key
        return self.stream

    @torch.no_grad()
    def _decide(self, name: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        layout = self.layouts[name]
        key = (name, self._clock(kwargs))
        stream = self.streams.setdefault(key, _Stream())
        self.active, self.active_key = stream, key
        seen = self.current.setdefault("steps", {}).setdefault(name, [])
        if self.step not in seen:
            seen.append(self.step)
        modulated = layout.modulated(module, kwargs)
        previous, residual = stream.previous, stream.residual
        stream.previous = modulated
        stream.change = None if previous is None else _rel_l1(modulated, previous)
        if self.record or previous is None or residual is None or self.step >= self.steps - 1:
            stream.accumulated = 0.0  # compute: recording, nothing to reuse, or the last step
            return
        assert stream.change is not None
        rescaled = float(self.rescale[name](stream.change))
        stream.accumulated += rescaled
        self.current.setdefault("distances", {}).setdefault(name, []).append(stream.accumulated)
        if stream.accumulated >= self.threshold:  # compute: the input changed too much since the last computed
            stream.accumulated = 0.0
            return
        self.skipping = name
        cached = self.current.setdefault("cached_steps", [])
        if self.step not in cached:  # a step is cached when a call of it skipped (each CFG stream decides)
            cached.append(self.step)
        self.current.setdefault("cached_steps_by_denoiser", {}).setdefault(name, []).append(self.step)
        for part in layout.block_lists[:-1]:
            setattr(module, part, torch.nn.ModuleList())
        setattr(module, layout.block_lists[-1], torch.nn.ModuleList([ReuseResidual(residual, layout.output)]))

    def _restore(self, name: str, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self.skipping == name:
            for part, blocks in self.original[name].items():
                setattr(module, part, blocks)
            self.skipping = None
        if self.record and self.active is not None:
            sample = output.sample if hasattr(output, "sample") else output[0]
            stream = self.active
            if stream.output is not None and stream.change is not None:
                change = _rel_l1(sample.detach(), stream.output)
                streams = self.current.setdefault("pairs", {}).setdefault(name, {})
                streams.setdefault(self.active_key[1], []).append((stream.change, change))
            stream.output = sample.detach()

    def _record_input(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.block_input = args[0] if args else kwargs["hidden_states"]

    def _record_output(self, name: str, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self.active is not None and self.block_input is not None:
            self.active.residual = self.layouts[name].image_output(output) - self.block_input

    def remove(self) -> None:
        self.work.remove()
        for hook in self.hooks:
            hook.remove()
        for name, model in self.models.items():
            for part, blocks in self.original[name].items():
                setattr(model, part, blocks)


class TeaCache(Feature[TeaCacheConfig, _TeaCacheHandle]):
    """TeaCache on every denoiser whose modulated input the hooks compute: published, calibrated or own
    coefficients."""

    name = "tea_cache"
    reach = Reach.EVERY_DENOISER
    denoiser_evidence = ("skipped_work_per_run", "block work skipped (share)")
    family = "cache"
    feature_class = FeatureClass.LOSSY
    stage = Stage.CACHE
    config_cls = TeaCacheConfig
    lossy_limits = LOSSY_LIMITS
    roofline_exempt = SKIPS_WORK
    needs_steps = True  # the last step is always computed
    primary_option = "rel_l1_thresh"
    description = "TeaCache (timestep-embedding-aware step skipping), implemented as hooks"

    def check(self, pipeline: Any, device: str, options: TeaCacheConfig) -> Support:
        present = denoisers(pipeline)
        if not present:
            return Support.no(f"{type(pipeline).__name__} has no transformer to hook", Owner.MODEL)
        for component, transformer in present.items():
            name = type(transformer).__name__
            published = published_sets().get(name)
            if layout_for(transformer) is None:
                families = ", ".join(sorted({layout.family for layout in LAYOUTS.values()}))
                known = "; TeaCache's authors publish coefficients for it" if published is not None else ""
                return Support.no(
                    f"harness: tea_cache's hooks cannot compute the modulated input of {name} ({component}); "
                    f"they compute it for {families}{known}",
                    Owner.HARNESS,
                )
            if coefficients_for(component, transformer, options) is None:
                return Support.no(
                    f"needs calibration: omni-accel calibrate PROFILE --model MODEL, then calibration: PATH "
                    f"(TeaCache's authors publish no coefficients for {name}; published: "
                    f"{', '.join(sorted(published_sets()))}); or give coefficients: [...], highest power first",
                    Owner.HARNESS,  # the hooks compute this family's input: coefficients are a data gap
                )
        if options.calibration is not None:
            from accel.features.calibration import calibration_refusal

            refusal = calibration_refusal(self.name, pipeline, options)
            if refusal is not None:
                return refusal
        return Support.yes()

    def apply(self, pipeline: Any, options: TeaCacheConfig, context: RunContext) -> _TeaCacheHandle:
        return _TeaCacheHandle(pipeline, options, context.steps)

    def verify(self, handle: _TeaCacheHandle) -> Verdict:
        per_run = [run.get("cached_steps", []) for run in handle.runs]
        sources = handle.coefficients_source
        described = "; ".join(f"{name}: {source}" for name, source in sources.items())
        single = len(sources) == 1
        evidence: dict[str, Any] = {
            "cached_steps_per_run": per_run,
            "coefficients": next(iter(sources.values())) if single else dict(sources),
        }
        if handle.coefficients_files:
            files = handle.coefficients_files
            evidence["coefficients_file"] = next(iter(files.values())) if single else dict(files)
        if not single:
            by_denoiser = [run.get("cached_steps_by_denoiser", {}) for run in handle.runs]
            evidence["cached_steps_by_denoiser_per_run"] = by_denoiser
        verdict = skipped_work_verdict(handle.runs, self.name, cached=[len(steps) for steps in per_run])
        verdict.evidence.update(evidence)
        verdict.summary += "; coefficients: " + (next(iter(sources.values())) if single else described)
        return verdict
