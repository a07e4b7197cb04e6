"""TeaCache (``tea_cache``): skip the transformer blocks on steps whose input barely changed. Lossy.

Not in diffusers, so implemented here as torch hooks. Each transformer call computes the timestep-
modulated input of the first block; the relative L1 change from the previous call, rescaled by a
per-model polynomial fitted by the TeaCache authors, accumulates until it passes ``rel_l1_thresh``.
Below it, the blocks are skipped and the residual they added on the last computed step is reused.
The first and last steps of a run are always computed, and the state starts fresh with every run.

Coefficients: the sets TeaCache's authors publish per family (ali-vilab/TeaCache on GitHub, TeaCache4<Model>/*.py),
kept as data with the file of each in ``feature_matrix/teacache_coefficients.yaml`` (FLUX's are the values vLLM-Omni
ships too). A family without a published set needs calibration (the harness's gap, not the model's); a family with
one whose input the hooks here do not compute yet (they compute FLUX's modulated input) is refused as the harness's
gap, naming the published set. Evidence: the steps cached on each run, counted by the hook itself, and the block
work the harness counted (``accel.features.work``): cached steps that skipped nothing are "engaged, no effect".
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
)
from accel.features.cache import SKIPS_WORK, skipped_work_verdict
from accel.features.work import BlockWork

COEFFICIENTS_FILE = "teacache_coefficients.yaml"
# What the hooks touch: any transformer with these (FLUX's layout) can run TeaCache given coefficients.
HOOK_POINTS = ("x_embedder", "time_text_embed", "transformer_blocks", "single_transformer_blocks")


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
        description="Rescaling polynomial, highest power first; default: the published set for the transformer.",
    )


class _ReuseResidual(torch.nn.Module):
    """Stands in for the skipped blocks: adds the cached residual to the image stream."""

    def __init__(self, residual: torch.Tensor) -> None:
        super().__init__()
        self.residual = residual

    def forward(
        self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, **_: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return encoder_hidden_states, hidden_states + self.residual


class _TeaCacheHandle(Handle):
    def __init__(self, transformer: Any, options: TeaCacheConfig, steps: int) -> None:
        super().__init__()
        self.transformer = transformer
        self.threshold = options.rel_l1_thresh
        coefficients: Any
        if options.coefficients is not None:
            self.coefficients_source = "user-supplied"
            coefficients = options.coefficients
        else:
            published = published_sets()[type(transformer).__name__]
            self.coefficients_source = f"published for {published.name} (ali-vilab/TeaCache)"
            self.coefficients_file = published.source
            coefficients = list(published.coefficients)
        self.rescale = np.poly1d(coefficients)
        self.steps = steps
        self.double_blocks = transformer.transformer_blocks
        self.single_blocks = transformer.single_transformer_blocks
        self._reset()
        self.work = BlockWork({"transformer": transformer}, str(next(transformer.parameters()).device))
        self.hooks = [
            transformer.register_forward_pre_hook(self._decide, with_kwargs=True),
            transformer.register_forward_hook(self._restore),
            self.double_blocks[0].register_forward_pre_hook(self._record_input, with_kwargs=True),
            self.single_blocks[-1].register_forward_hook(self._record_output),
        ]

    def _reset(self) -> None:
        self.call = 0
        self.accumulated = 0.0
        self.previous: torch.Tensor | None = None
        self.residual: torch.Tensor | None = None
        self.block_input: torch.Tensor | None = None
        self.skipping = False

    def begin_run(self) -> None:
        super().begin_run()
        self._reset()  # a fresh cache context for every run
        self.work.begin()

    def end_run(self) -> None:
        self.current["work"] = self.work.end()

    def _modulated_input(self, kwargs: dict[str, Any]) -> torch.Tensor:
        t = self.transformer
        hidden = t.x_embedder(kwargs["hidden_states"])
        timestep = kwargs["timestep"].to(hidden.dtype) * 1000
        guidance = kwargs.get("guidance")
        if guidance is None:
            temb = t.time_text_embed(timestep, kwargs["pooled_projections"])
        else:
            temb = t.time_text_embed(timestep, guidance.to(hidden.dtype) * 1000, kwargs["pooled_projections"])
        modulated: torch.Tensor = t.transformer_blocks[0].norm1(hidden, emb=temb)[0]
        return modulated

    @torch.no_grad()
    def _decide(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        modulated = self._modulated_input(kwargs)
        step = self.call
        self.call += 1
        previous, residual = self.previous, self.residual
        self.previous = modulated
        if previous is None or residual is None or step >= self.steps - 1:  # compute: nothing to reuse, or last
            self.accumulated = 0.0
            return
        change = ((modulated - previous).abs().mean() / previous.abs().mean()).item()
        self.accumulated += float(self.rescale(change))
        if self.accumulated >= self.threshold:  # compute: the input changed too much since the last computed step
            self.accumulated = 0.0
            return
        self.skipping = True
        self.current.setdefault("cached_steps", []).append(step)
        module.transformer_blocks = torch.nn.ModuleList()
        module.single_transformer_blocks = torch.nn.ModuleList([_ReuseResidual(residual)])

    def _restore(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self.skipping:
            module.transformer_blocks = self.double_blocks
            module.single_transformer_blocks = self.single_blocks
            self.skipping = False

    def _record_input(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.block_input = kwargs["hidden_states"]

    def _record_output(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self.residual = output[1] - self.block_input

    def remove(self) -> None:
        self.work.remove()
        for hook in self.hooks:
            hook.remove()
        self._restore(self.transformer, (), None)


class TeaCache(Feature[TeaCacheConfig, _TeaCacheHandle]):
    """TeaCache for FLUX-style transformers: published coefficients (FLUX) or the user's own."""

    name = "tea_cache"
    reach = Reach.FIRST_DENOISER
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
        transformer = getattr(pipeline, "transformer", None)
        name = type(transformer).__name__
        published = published_sets().get(name)
        missing = [part for part in HOOK_POINTS if not hasattr(transformer, part)]
        if missing:
            if published is not None:
                return Support.no(
                    f"harness: tea_cache's hooks compute the modulated input of FLUX-style transformers only "
                    f"({', '.join(HOOK_POINTS)}; {name} has no {missing[0]}); TeaCache's authors publish coefficients "
                    f"for {name} ({published.name}: {published.source}), hooks for its input are not written yet",
                    Owner.HARNESS,
                )
            return Support.no(
                f"harness: tea_cache hooks FLUX-style transformers ({', '.join(HOOK_POINTS)}); {name} has no "
                f"{missing[0]}, and needs calibration: TeaCache's authors publish no coefficients for it",
                Owner.HARNESS,
            )
        if options.coefficients is None and published is None:
            return Support.no(
                f"harness: needs calibration: TeaCache's authors publish no coefficients for {name} (published: "
                f"{', '.join(sorted(published_sets()))}); fit a polynomial for it and give it as coefficients: [...], "
                "highest power first",
                Owner.HARNESS,
            )
        return Support.yes()

    def apply(self, pipeline: Any, options: TeaCacheConfig, context: RunContext) -> _TeaCacheHandle:
        return _TeaCacheHandle(pipeline.transformer, options, context.steps)

    def verify(self, handle: _TeaCacheHandle) -> Verdict:
        per_run = [run.get("cached_steps", []) for run in handle.runs]
        evidence = {"cached_steps_per_run": per_run, "coefficients": getattr(handle, "coefficients_source", None)}
        if getattr(handle, "coefficients_file", None):
            evidence["coefficients_file"] = handle.coefficients_file
        verdict = skipped_work_verdict(handle.runs, self.name, cached=[len(steps) for steps in per_run])
        verdict.evidence.update(evidence)
        verdict.summary += f"; coefficients: {evidence['coefficients']}"
        return verdict
