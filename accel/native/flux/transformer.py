"""A native FLUX.1 transformer: double- and single-stream blocks, RoPE, AdaLN modulation, guidance embedding.

Written here (diffusers' ``FluxTransformer2DModel`` is not imported at run time) and numerically the same
as diffusers 0.42's, so a native port can be checked against the library from one checkpoint.
``RENAMES`` maps diffusers' tensor names onto this module's (``load_weights`` is strict). Layers Qwen-Image
computes alike (timestep embedding, embedding MLP, feed-forward, output norm) are ``accel.native.layers``'.

Class attributes declare what acceleration features need: ``_block_lists`` (the double- then single-stream
blocks, run by ``NativeTransformer.run_blocks``; they are also ``_cache_blocks``, Cache-DiT's block adapter,
and ``_layerwise_offload_blocks_attrs``), ``_repeated_blocks`` (regional compile), ``_cp_plan`` (context
parallelism: diffusers' plan for its FLUX model, which this forward's signature shares;
``accel.native.context_parallel``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput
from torch import nn

from accel.native.attention import Attention
from accel.native.blocks import NativeTransformer, register_blocks
from accel.native.layers import FeedForward, MLPEmbedder, clip_half, timestep_embedding


class TimeTextEmbedding(nn.Module):
    """Timestep (+ guidance) embedding plus the pooled text projection: the modulation vector ``temb``."""

    def __init__(self, dim: int, pooled_dim: int, guidance: bool) -> None:
        super().__init__()
        self.timestep_embedder = MLPEmbedder(256, dim)
        self.guidance_embedder = MLPEmbedder(256, dim) if guidance else None
        self.text_embedder = MLPEmbedder(pooled_dim, dim)

    def forward(self, timestep: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:
        pooled = args[-1]
        emb = self.timestep_embedder(timestep_embedding(timestep).to(pooled.dtype))
        if self.guidance_embedder is not None and len(args) == 2:
            emb = emb + self.guidance_embedder(timestep_embedding(args[0]).to(pooled.dtype))
        out: torch.Tensor = emb + self.text_embedder(pooled)
        return out


class AdaNorm(nn.Module):
    """LayerNorm modulated by ``temb``: returns the normalised input and the remaining chunks."""

    def __init__(self, dim: int, chunks: int) -> None:
        super().__init__()
        self.chunks = chunks
        self.linear = nn.Linear(dim, chunks * dim)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        parts = self.linear(nn.functional.silu(emb)).chunk(self.chunks, dim=1)
        shift, scale, rest = parts[0], parts[1], parts[2:]
        return (self.norm(x) * (1 + scale[:, None]) + shift[:, None], *rest)


def rope(ids: torch.Tensor, axes_dim: list[int], theta: int = 10000) -> tuple[torch.Tensor, torch.Tensor]:
    """Cos and sin tables (sequence, head_dim) of FLUX's 3-axis rotary embedding, float64 phases."""
    cos_parts, sin_parts = [], []
    dtype = torch.float32 if ids.device.type in ("mps", "npu") else torch.float64
    for axis, dim in enumerate(axes_dim):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=dtype, device=ids.device) / dim))
        angles = torch.outer(ids[:, axis].float(), freqs)
        cos_parts.append(angles.cos().repeat_interleave(2, dim=1).float())
        sin_parts.append(angles.sin().repeat_interleave(2, dim=1).float())
    return torch.cat(cos_parts, dim=-1), torch.cat(sin_parts, dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, sequence, heads, head_dim) pairs of channels."""
    real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(3)
    return (x.float() * cos[None, :, None] + rotated.float() * sin[None, :, None]).to(x.dtype)


class JointAttention(nn.Module):
    """QK-normalised attention over image tokens, optionally joined by text tokens (double blocks)."""

    def __init__(self, dim: int, heads: int, head_dim: int, joint: bool, eps: float = 1e-6) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, heads * head_dim) for _ in range(3))
        self.norm_q = nn.RMSNorm(head_dim, eps=eps)
        self.norm_k = nn.RMSNorm(head_dim, eps=eps)
        self.to_out = nn.Linear(heads * head_dim, dim) if joint else None
        if joint:
            self.add_q_proj, self.add_k_proj, self.add_v_proj = (nn.Linear(dim, heads * head_dim) for _ in range(3))
            self.norm_added_q = nn.RMSNorm(head_dim, eps=eps)
            self.norm_added_k = nn.RMSNorm(head_dim, eps=eps)
            self.to_add_out = nn.Linear(heads * head_dim, dim)
        self.attention = Attention()

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        heads: torch.Tensor = x.unflatten(-1, (-1, self.head_dim))
        return heads

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], context: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        q = self.norm_q(self._heads(self.to_q(x)))
        k = self.norm_k(self._heads(self.to_k(x)))
        v = self._heads(self.to_v(x))
        if context is not None:
            q = torch.cat([self.norm_added_q(self._heads(self.add_q_proj(context))), q], dim=1)
            k = torch.cat([self.norm_added_k(self._heads(self.add_k_proj(context))), k], dim=1)
            v = torch.cat([self._heads(self.add_v_proj(context)), v], dim=1)
        q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)
        out: torch.Tensor = self.attention(q, k, v).flatten(2, 3).to(q.dtype)
        if context is None:
            return out
        assert self.to_out is not None  # a context comes with the joint projections (joint=True)
        text, image = out.split_with_sizes([context.shape[1], out.shape[1] - context.shape[1]], dim=1)
        return self.to_out(image.contiguous()), self.to_add_out(text.contiguous())


class DoubleStreamBlock(nn.Module):
    """Image and text streams with their own weights, joined in one attention."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm1 = AdaNorm(dim, 6)
        self.norm1_context = AdaNorm(dim, 6)
        self.attn = JointAttention(dim, heads, head_dim, joint=True)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim)
        self.norm2_context = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff_context = FeedForward(dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.norm1(hidden_states, emb=temb)
        c, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = self.norm1_context(encoder_hidden_states, emb=temb)
        attn, context_attn = self.attn(x, image_rotary_emb, context=c)
        hidden_states = hidden_states + gate_msa.unsqueeze(1) * attn
        x = self.norm2(hidden_states) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        hidden_states = hidden_states + gate_mlp.unsqueeze(1) * self.ff(x)
        encoder_hidden_states = encoder_hidden_states + c_gate_msa.unsqueeze(1) * context_attn
        c = self.norm2_context(encoder_hidden_states) * (1 + c_scale_mlp[:, None]) + c_shift_mlp[:, None]
        encoder_hidden_states = encoder_hidden_states + c_gate_mlp.unsqueeze(1) * self.ff_context(c)
        return clip_half(encoder_hidden_states), hidden_states


class SingleStreamBlock(nn.Module):
    """Text and image tokens concatenated, attention and MLP in parallel."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm = AdaNorm(dim, 3)
        self.proj_mlp = nn.Linear(dim, 4 * dim)
        self.proj_out = nn.Linear(5 * dim, dim)
        self.attn = JointAttention(dim, heads, head_dim, joint=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        text_len = encoder_hidden_states.shape[1]
        residual = torch.cat([encoder_hidden_states, hidden_states], dim=1)
        x, gate = self.norm(residual, emb=temb)
        mlp = nn.functional.gelu(self.proj_mlp(x), approximate="tanh")
        out = residual + gate.unsqueeze(1) * self.proj_out(torch.cat([self.attn(x, image_rotary_emb), mlp], dim=2))
        out = clip_half(out)
        return out[:, :text_len], out[:, text_len:]


register_blocks(DoubleStreamBlock, SingleStreamBlock)


class NativeFluxTransformer(NativeTransformer):
    """FLUX.1 transformer built from a diffusers ``transformer/config.json`` (block lists, loop, weight names and
    building: ``NativeTransformer``)."""

    _block_lists = ("transformer_blocks", "single_transformer_blocks")
    _repeated_blocks = ("DoubleStreamBlock", "SingleStreamBlock")
    # Context parallelism (diffusers' FluxTransformer2DModel._cp_plan): the image and text tokens and their
    # position ids split over the ranks on entry (RoPE is computed from each rank's ids), gathered at proj_out.
    _cp_plan: ClassVar[dict[str, Any]] = {
        "": {
            "hidden_states": ContextParallelInput(split_dim=1, expected_dims=3, split_output=False),
            "encoder_hidden_states": ContextParallelInput(split_dim=1, expected_dims=3, split_output=False),
            "img_ids": ContextParallelInput(split_dim=0, expected_dims=2, split_output=False),
            "txt_ids": ContextParallelInput(split_dim=0, expected_dims=2, split_output=False),
        },
        "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
    }

    def __init__(
        self,
        in_channels: int = 64,
        num_layers: int = 19,
        num_single_layers: int = 38,
        attention_head_dim: int = 128,
        num_attention_heads: int = 24,
        joint_attention_dim: int = 4096,
        pooled_projection_dim: int = 768,
        guidance_embeds: bool = False,
        axes_dims_rope: Iterable[int] = (16, 56, 56),
        patch_size: int = 1,
        out_channels: int | None = None,
        **_: Any,
    ) -> None:
        super().__init__()
        dim = num_attention_heads * attention_head_dim
        self.config = {"in_channels": in_channels, "guidance_embeds": guidance_embeds}
        self.axes_dims_rope = list(axes_dims_rope)
        self.time_text_embed = TimeTextEmbedding(dim, pooled_projection_dim, guidance_embeds)
        self.context_embedder = nn.Linear(joint_attention_dim, dim)
        self.x_embedder = nn.Linear(in_channels, dim)
        self.transformer_blocks = nn.ModuleList(
            DoubleStreamBlock(dim, num_attention_heads, attention_head_dim) for _ in range(num_layers)
        )
        self.single_transformer_blocks = nn.ModuleList(
            SingleStreamBlock(dim, num_attention_heads, attention_head_dim) for _ in range(num_single_layers)
        )
        self.add_output(dim, patch_size * patch_size * (out_channels or in_channels))

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        pooled_projections: torch.Tensor,
        timestep: torch.Tensor,
        img_ids: torch.Tensor,
        txt_ids: torch.Tensor,
        guidance: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden_states = self.x_embedder(hidden_states)
        timestep = timestep.to(hidden_states.dtype) * 1000
        if guidance is None:
            temb = self.time_text_embed(timestep, pooled_projections)
        else:
            temb = self.time_text_embed(timestep, guidance.to(hidden_states.dtype) * 1000, pooled_projections)
        encoder_hidden_states = self.context_embedder(encoder_hidden_states)
        rotary = rope(torch.cat((txt_ids, img_ids), dim=0), self.axes_dims_rope)
        _, hidden_states = self.run_blocks(hidden_states, encoder_hidden_states, temb, rotary)
        return self.output(hidden_states, temb)

    # diffusers tensor name -> ours (first match wins; ``NativeTransformer.map_name``).
    RENAMES = (
        (r"\.ff(_context)?\.net\.0\.proj\.", r".ff\1.fc1."),
        (r"\.ff(_context)?\.net\.2\.", r".ff\1.fc2."),
        (r"\.attn\.to_out\.0\.", ".attn.to_out."),
        (r"^norm_out\.", "norm_out."),
    )
