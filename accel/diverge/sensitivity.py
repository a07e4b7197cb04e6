"""Quantization sensitivity per layer: which Linear layers of a denoiser cost the most when quantized, and the
ones to leave unquantized (the ``quantization`` feature's ``exclude`` option).

Method: each layer *alone* quantized. One unquantized call of the request is captured
(``accel.diverge.capture.Capture``); then, layer by layer, that one layer is quantized with torchao (the
feature's own ``torchao_config``, ``quantize_`` with a ``filter_fn`` naming it), every captured denoiser call is
replayed on its recorded inputs, and the denoiser output's relative L2 against the recorded output, averaged
over the calls, is that layer's error; then its weight is put back. Chosen over leave-one-out (everything
quantized but one layer) because it is as cheap (one replay of the calls per layer either way) and sounder at
this size: quantization errors of small weights add up nearly linearly, so a layer's error alone is its share
of the total, whereas leave-one-out reads each layer as the small difference of two large, nearly equal
errors, which the other layers' noise swamps. Replaying recorded inputs (not rerunning the pipeline) measures
each layer on the same trajectory, with no feedback through the scheduler, and costs denoiser calls only.

``measured_pick`` chooses the layers to leave unquantized by measuring, not by adding the table's errors: the
whole denoiser quantized (the ``quantization`` feature with ``exclude``) while the table's top 0, 1, 2, ...
layers are left out, each prefix run through the pipeline on the request, its final latents against the
unquantized call's (relative L2); the pick grows while that error falls and stops at the first layer that does
not lower it. The additive reading (the fewest top layers whose errors sum to half the total) was the rule
before: on mini-flux (int8wo) its 12 layers *lowered* SSIM against quantizing everything (0.9986 vs 0.9993),
since errors of different layers partly cancel and leaving some in float removes the cancellation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from accel.diverge.capture import Capture, denoisers
from accel.diverge.compare import metrics, tensors_of


@dataclass(frozen=True)
class LayerError:
    """One Linear layer of ``component`` (dotted ``layer`` name inside it) and the denoiser output's mean
    relative L2 over the captured calls when it alone is quantized."""

    component: str
    layer: str
    rel_l2: float


def _restore(module: torch.nn.Module, name: str, layer: torch.nn.Module, weight: Any) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = module.get_submodule(parent_name) if parent_name else module
    setattr(parent, leaf, layer)  # a config may replace the module, not only its weight
    layer.weight = weight


@torch.no_grad()
def layer_sensitivity(
    target: Any, request: Any, method: str = "int8wo", components: tuple[str, ...] = ("transformer",)
) -> list[LayerError]:
    """Every Linear layer of the denoiser ``components`` of the loaded, unaccelerated ``target``, by error when
    it alone is quantized with ``method`` (a ``quantization`` method), largest first. The pipeline is left as
    it was."""
    from torchao.quantization import quantize_

    from accel.errors import ConfigError
    from accel.features.quant import torchao_config

    pipeline = target.pipeline
    found = denoisers(pipeline)
    missing = [c for c in components if c not in found]
    if missing:
        raise ConfigError(
            f"sensitivity: {', '.join(missing)} is not a denoiser of this pipeline (denoisers: "
            f"{', '.join(found) or 'none'}); the table replays denoiser calls: quantize a denoiser"
        )
    with Capture(pipeline) as trace:
        target.generate(request)
    rows = []
    for component in components:
        module = found[component]
        calls = [call for call in trace.calls if call.denoiser == component]
        linears = {name: m for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
        for name, layer in linears.items():
            weight = layer.weight
            quantize_(module, torchao_config(method), filter_fn=lambda m, n, name=name: n == name)
            try:
                errors = [
                    metrics(call.output, tensors_of(module(*call.args, **call.kwargs))[0]).rel_l2 for call in calls
                ]
            finally:
                _restore(module, name, layer, weight)
            rows.append(LayerError(component, name, sum(errors) / len(errors) if errors else 0.0))
    return sorted(rows, key=lambda row: row.rel_l2, reverse=True)


@dataclass(frozen=True)
class Pick:
    """The layers to leave unquantized (``layers``, from the table's top) and what was measured: for each prefix
    length tried (0: everything quantized), the final latents' relative L2 against the unquantized call."""

    layers: list[LayerError]
    tried: list[tuple[int, float]]


# A layer joins the pick only if leaving it in float cuts the final latents' error by this share of what is left.
# Measured on mini-flux (docs/diverge.md): "any gain" picked 6 layers on one request's latents (gains of 1-9% after
# the second) and was no better than quantizing everything over the workload's images (SSIM 0.9992 against
# 0.9993), while the top 2 (gains of 39% and 15%) raised it to 0.9996 (worst image 0.9952 -> 0.9969): small gains
# on one request do not carry over to other prompts.
MIN_GAIN = 0.1


@torch.no_grad()
def measured_pick(
    target: Any,
    request: Any,
    rows: list[LayerError],
    method: str = "int8wo",
    components: tuple[str, ...] = ("transformer",),
    limit: int = 8,
    min_gain: float = MIN_GAIN,
) -> Pick:
    """The table's top layers to leave unquantized, grown one at a time while the pipeline's final latents come
    closer to the unquantized call's, and stopped at the first layer that does not cut the error by at least
    ``min_gain`` of what was left (at most ``limit`` layers; one pipeline call per prefix tried). The pipeline is
    left unquantized."""
    from accel.features import FEATURES, apply

    def final_latents() -> torch.Tensor:
        with Capture(target.pipeline) as trace:
            target.generate(request)
        return trace.steps[-1].prev_sample

    def error(exclude: list[LayerError]) -> float:
        options = {"method": method, "components": list(components), "exclude": [row.layer for row in exclude]}
        config = FEATURES["quantization"].parse_options(options)
        with apply(target.pipeline, config, num_inference_steps=request.steps):
            return metrics(reference, final_latents()).rel_l2

    reference = final_latents()
    best, tried = grow_while_gaining(lambda k: error(rows[:k]), min(limit, len(rows)), min_gain)
    return Pick(rows[:best], tried)


def grow_while_gaining(
    error: Callable[[int], float], limit: int, min_gain: float = MIN_GAIN
) -> tuple[int, list[tuple[int, float]]]:
    """The prefix length to keep: grown from 0 while each next length cuts ``error`` by at least ``min_gain`` of
    the best so far (at most ``limit``), with every ``(length, error)`` measured."""
    best, tried = 0, [(0, error(0))]
    for k in range(1, limit + 1):
        tried.append((k, error(k)))
        if tried[-1][1] > tried[best][1] * (1 - min_gain):
            break  # this layer left in float brings too little: stop
        best = k
    return best, tried


def sensitivity_markdown(rows: list[LayerError], method: str, pick: Pick, top: int = 15) -> str:
    """The table (``top`` rows: layer, its error, its share of the sum, whether ``pick`` leaves it unquantized),
    the measured errors of the prefixes tried and the ``exclude`` option to apply."""
    total = sum(row.rel_l2 for row in rows) or 1.0
    kept = {(row.component, row.layer) for row in pick.layers}
    lines = [
        f"Quantization sensitivity ({method}, each layer alone quantized; denoiser output, mean relative L2):",
        "",
        "| # | component | layer | rel-L2 | share | leave unquantized |",
        "|---|---|---|---|---|---|",
    ]
    for index, row in enumerate(rows[:top]):
        mark = "yes" if (row.component, row.layer) in kept else ""
        lines.append(
            f"| {index + 1} | {row.component} | {row.layer} | {row.rel_l2:.3g} | {row.rel_l2 / total:.1%} | {mark} |"
        )
    measured = ", ".join(f"top {k}: {value:.3g}" for k, value in pick.tried)
    names = ", ".join(f"'{row.layer}'" for row in pick.layers)
    lines += [
        "",
        f"Everything quantized but the table's top k, final latents' relative L2 to the unquantized call: {measured}.",
        f"Leaving the top {len(pick.layers)} of {len(rows)} layers unquantized measured best (the next layer cut "
        f"the error by less than {MIN_GAIN:.0%}); to apply it:",
        f"  quantization: {{method: {method}, exclude: [{names}]}}",
    ]
    return "\n".join(lines)
