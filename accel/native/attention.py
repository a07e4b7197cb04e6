"""The native attention layer: one dispatch point for every native transformer.

Inputs are (batch, sequence, heads, head_dim), as in vLLM-Omni's attention layer. Backends: the SDPA
variants (``native`` lets torch choose; ``_native_math``, ``_native_flash``, ``_native_efficient``,
``_native_cudnn`` pin one kernel), and, where installed, ``flash`` (flash-attn), ``xformers`` and
``sage`` (sageattention). Availability checks and their reasons are the feature catalogue's
(``accel.features.attention``), so the adapter and native targets say the same thing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SDPA_KERNELS = {
    "_native_math": SDPBackend.MATH,
    "_native_flash": SDPBackend.FLASH_ATTENTION,
    "_native_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "_native_cudnn": SDPBackend.CUDNN_ATTENTION,
}


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    out = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
    return out.transpose(1, 2)


def _pinned_sdpa(kernel: SDPBackend) -> Callable[..., torch.Tensor]:
    def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(kernel):
            return _sdpa(query, key, value)

    return attend


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    from flash_attn import flash_attn_func

    out: torch.Tensor = flash_attn_func(query, key, value)
    return out


def _xformers(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    import xformers.ops

    out: torch.Tensor = xformers.ops.memory_efficient_attention(query, key, value)
    return out


def _sage(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    from sageattention import sageattn

    out: torch.Tensor = sageattn(query, key, value, tensor_layout="NHD")
    return out


BACKENDS: dict[str, Callable[..., torch.Tensor]] = {
    "native": _sdpa,
    **{name: _pinned_sdpa(kernel) for name, kernel in SDPA_KERNELS.items()},
    "flash": _flash,
    "xformers": _xformers,
    "sage": _sage,
}


# Each backend's slot in a layer's dispatch counter.
BACKEND_INDEX = {name: index for index, name in enumerate(BACKENDS)}


class Attention(torch.nn.Module):
    """Scaled dot-product attention over (batch, sequence, heads, head_dim) through the chosen backend.

    ``backend`` is per layer (no process-global state). While ``count_calls`` is on (the attention
    feature turns it on), ``calls`` counts dispatches per backend: the evidence that feature reads.

    The counter is a non-persistent int64 buffer (one slot per backend) added to in place: an ordinary
    graph op that torch.compile traces through, with no guard on its value (a Python counter, or one kept
    out of the graph with ``torch.compiler.disable``, broke every compiled block in two: 6 graph breaks on
    tiny-flux and an eager fallback). It follows the layer's device and is not in the state dict.
    """

    dispatch_counts: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.backend = "native"
        self.count_calls = False
        self.register_buffer("dispatch_counts", torch.zeros(len(BACKENDS), dtype=torch.int64), persistent=False)

    @property
    def calls(self) -> dict[str, int]:
        """Dispatches per backend since the last ``reset_calls`` (backends never dispatched left out)."""
        counts = self.dispatch_counts.tolist()
        return {name: int(counts[index]) for name, index in BACKEND_INDEX.items() if counts[index]}

    def reset_calls(self) -> None:
        """Start counting from zero (read and reset outside compiled code, between runs)."""
        self.dispatch_counts.zero_()

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        if self.count_calls:
            self.dispatch_counts[BACKEND_INDEX[self.backend]] += 1
        return BACKENDS[self.backend](query, key, value)
