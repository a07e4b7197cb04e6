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

``leave_unquantized`` picks, from the top, the fewest layers whose errors sum to ``share`` of the total: under
the additive reading, excluding them removes that share of the error. Measured on mini-flux (int8wo,
docs/diverge.md) that reading holds for the top one or two layers only: the 12-layer pick lowered SSIM, so
the ranking is the reliable part; a pick chosen by measuring is not built yet.
"""

from __future__ import annotations

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


def leave_unquantized(rows: list[LayerError], share: float = 0.5) -> list[LayerError]:
    """The fewest layers from the top of ``rows`` (largest error first) whose errors sum to at least ``share``
    of all the layers' errors."""
    total = sum(row.rel_l2 for row in rows)
    picked: list[LayerError] = []
    for row in rows:
        if total == 0 or sum(r.rel_l2 for r in picked) >= share * total:
            break
        picked.append(row)
    return picked


def sensitivity_markdown(rows: list[LayerError], method: str, share: float = 0.5, top: int = 15) -> str:
    """The table (``top`` rows: layer, its error, its share of the sum) and the ``exclude`` option to apply."""
    total = sum(row.rel_l2 for row in rows) or 1.0
    keep = leave_unquantized(rows, share)
    kept = {(row.component, row.layer) for row in keep}
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
    names = ", ".join(f"'{row.layer}'" for row in keep)
    lines += [
        "",
        f"{len(keep)} of {len(rows)} layers carry {share:.0%} of the summed error; to leave them unquantized:",
        f"  quantization: {{method: {method}, exclude: [{names}]}}",
    ]
    return "\n".join(lines)
