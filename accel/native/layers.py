"""Layers native FLUX and native Qwen-Image compute alike, op for op as diffusers 0.42 computes them.

The sinusoidal timestep embedding, the embedding MLP, the tanh-GELU feed-forward, the output norm, the float16 clip.

What differs between the two models (attention, rotary embedding, blocks, modulation) stays in each model's
module; a difference of argument (the timestep's scale) is a parameter here.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def timestep_embedding(
    timesteps: torch.Tensor, dim: int = 256, max_period: int = 10000, scale: float | None = None
) -> torch.Tensor:
    """Sinusoidal embedding, cos first (diffusers' ``Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0)``):
    phases ``t * freq``, or ``scale * (t * freq)`` with a ``scale`` (``Timesteps(scale=...)``; FLUX scales the
    timestep by 1000 before, Qwen-Image the phases after)."""
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    angles = timesteps[:, None].float() * torch.exp(exponent)[None, :]
    if scale is not None:
        angles = scale * angles
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


def clip_half(x: torch.Tensor) -> torch.Tensor:
    """``x`` clipped to float16's range where it is float16 (diffusers' blocks do it to their outputs)."""
    return x.clip(-65504, 65504) if x.dtype == torch.float16 else x


class MLPEmbedder(nn.Module):
    """linear -> activation -> linear."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_dim, out_dim)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear_2(self.act(self.linear_1(x)))
        return out


class FeedForward(nn.Module):
    """dim -> 4 dim (tanh GELU) -> dim."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(nn.functional.gelu(self.fc1(x), approximate="tanh"))
        return out


class OutputNorm(nn.Module):
    """Final LayerNorm modulated by ``temb`` (scale first, then shift)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(nn.functional.silu(emb).to(x.dtype)).chunk(2, dim=1)
        out: torch.Tensor = self.norm(x) * (1 + scale)[:, None] + shift[:, None]
        return out
