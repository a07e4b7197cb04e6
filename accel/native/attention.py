"""The native attention layer: one dispatch point for every native transformer.

Inputs are (batch, sequence, heads, head_dim), as in vLLM-Omni's attention layer. Backends: the SDPA
variants (``native`` lets torch choose; ``_native_math``, ``_native_flash``, ``_native_efficient``,
``_native_cudnn`` pin one kernel), and, where installed, ``flash`` (flash-attn), ``xformers`` and
``sage`` (sageattention). Availability checks and their reasons are the feature catalogue's
(``accel.features.attention``), so the adapter and native targets say the same thing.

**Ulysses context parallelism** (``Attention.ulysses``, set by ``accel.native.context_parallel``): each rank
holds a share of the sequence and every head; one all-to-all before the attention gives each rank the whole
sequence for its share of the heads, the backend attends over it, and a second all-to-all gives the outputs
back to the rank that holds their tokens (the scheme of DeepSpeed-Ulysses, as diffusers' ``_cp_plan`` models
and vLLM-Omni's attention layer run it). The collectives are ``torch.distributed._functional_collectives``
calls looked up at call time, so the parallel feature's evidence counts them as it counts diffusers'.
Uneven shares (``ContextParallelConfig.ulysses_anything``: a sequence length the degree does not divide) are
exchanged with split sizes, after an all-gather of each rank's length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class UlyssesGroup:
    """The ranks one Ulysses all-to-all runs over: ``mesh`` (a 1-D device mesh of ``degree`` ranks);
    ``uneven``: the ranks' sequence shares may differ in length (their lengths are gathered each call)."""

    mesh: Any
    degree: int
    uneven: bool = False


def _shares(tokens: int, group: UlyssesGroup) -> list[int]:
    """Every rank's share of the sequence, in rank order."""
    if not group.uneven:
        return [tokens] * group.degree
    import torch.distributed._functional_collectives as funcol

    mine = torch.tensor([tokens], dtype=torch.int64)
    gathered = funcol.all_gather_tensor(mine, 0, group.mesh)
    if isinstance(gathered, funcol.AsyncCollectiveTensor):
        gathered = gathered.wait()
    return [int(n) for n in gathered.tolist()]


def _exchange(x: torch.Tensor, group: UlyssesGroup, output_sizes: list[int], input_sizes: list[int]) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    out = funcol.all_to_all_single(x.contiguous(), output_sizes, input_sizes, group.mesh)
    if isinstance(out, funcol.AsyncCollectiveTensor):
        out = out.wait()
    return out


def _heads_to_sequence(x: torch.Tensor, group: UlyssesGroup, shares: list[int]) -> torch.Tensor:
    """(batch, my tokens, heads, dim) -> (batch, all tokens, my heads, dim)."""
    batch, tokens, heads, dim = x.shape
    degree = group.degree
    # Rank j gets head chunk j of my tokens: (degree * my tokens, batch, heads / degree, dim), rank-major.
    send = x.reshape(batch, tokens, degree, heads // degree, dim).permute(2, 1, 0, 3, 4)
    send = send.reshape(degree * tokens, batch, heads // degree, dim)
    received = _exchange(send, group, shares, [tokens] * degree)  # (all tokens in rank order, batch, ...)
    return received.permute(1, 0, 2, 3)


def _sequence_to_heads(x: torch.Tensor, group: UlyssesGroup, shares: list[int], tokens: int) -> torch.Tensor:
    """(batch, all tokens, my heads, dim) -> (batch, my tokens, heads, dim): the inverse exchange."""
    batch, _, my_heads, dim = x.shape
    degree = group.degree
    received = _exchange(x.permute(1, 0, 2, 3), group, [tokens] * degree, shares)  # (degree * tokens, ...)
    received = received.reshape(degree, tokens, batch, my_heads, dim).permute(2, 1, 0, 3, 4)
    return received.reshape(batch, tokens, degree * my_heads, dim)


def ulysses_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attend: Callable[..., torch.Tensor],
    group: UlyssesGroup,
) -> torch.Tensor:
    """``attend`` over the whole sequence of this rank's heads: all-to-all in, attend, all-to-all out.

    Attention is invariant to the order of its key/value tokens, and each query keeps its position in the
    gathered order (rank-major), so the result matches one rank's up to the reduction order. With ``uneven``,
    a head count the degree does not divide is padded with zero heads (their outputs are dropped)."""
    tokens, heads = query.shape[1], query.shape[2]
    padding = -heads % group.degree
    if padding and not group.uneven:
        raise ValueError(
            f"Ulysses over {group.degree} ranks needs a head count divisible by it; this layer has {heads} heads "
            "(context_parallel: {anything: true} pads them)"
        )
    if padding:
        query, key, value = (torch.nn.functional.pad(x, (0, 0, 0, padding)) for x in (query, key, value))
    shares = _shares(tokens, group)
    q, k, v = (_heads_to_sequence(x, group, shares) for x in (query, key, value))
    out = _sequence_to_heads(attend(q, k, v), group, shares, tokens)
    return out[:, :, :heads] if padding else out


# Each backend's slot in a layer's dispatch counter.
BACKEND_INDEX = {name: index for index, name in enumerate(BACKENDS)}


class Attention(torch.nn.Module):
    """Scaled dot-product attention over (batch, sequence, heads, head_dim) through the chosen backend.

    ``backend`` is per layer (no process-global state). While ``count_calls`` is on (the attention
    feature turns it on), ``calls`` counts dispatches per backend: the evidence that feature reads. With
    ``ulysses`` set (context parallelism), the backend attends over the whole sequence of this rank's heads
    (``ulysses_attention``).

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
        self.ulysses: UlyssesGroup | None = None
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
        if self.ulysses is not None:
            return ulysses_attention(query, key, value, BACKENDS[self.backend], self.ulysses)
        return BACKENDS[self.backend](query, key, value)
