"""A native Qwen-Image transformer (MMDiT): dual-stream blocks, 3-axis complex RoPE with text positions, AdaLN.

Written here (diffusers' ``QwenImageTransformer2DModel`` is not imported at run time) and, op for op, the
computation of diffusers 0.42's, so that in float32 the two give the same bits from one checkpoint:

- the timestep embedding scales the phases by 1000 after ``t * freq`` (``Timesteps(scale=1000)``), sin first
  then flipped (cos first);
- the text stream is RMS-normalised (``txt_norm``) before ``txt_in``;
- each block modulates image and text with their own ``*_mod`` (SiLU, linear: shift, scale, gate twice),
  joins them in one attention (text first) and runs two feed-forwards;
- the rotary embedding is complex (``torch.polar`` tables of 4096 positive and 4096 negative positions per
  axis, built as diffusers builds them: computing only the needed rows would put elements at other vector
  lanes, and CPU sin/cos differ between vector and scalar lanes in the last bit). The image grid is centred
  (``scale_rope``: rows and columns from -h/2 to h/2 - 1); text tokens take positions after the largest
  image position, on all three axes.

One prompt per call, so the text stream has no padding and no attention mask (diffusers drops an all-ones
mask too). ``RENAMES`` maps diffusers' tensor names onto this module's (``load_weights`` is strict). The block
list, its loop, the declarations features read and the building are ``accel.native.blocks.NativeTransformer``'s;
the layers FLUX computes alike (embedding MLP, feed-forward, output norm, timestep embedding) are
``accel.native.layers``'.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput
from torch import nn

from accel.errors import ConfigError
from accel.native.attention import Attention
from accel.native.blocks import NativeTransformer, register_blocks
from accel.native.layers import FeedForward, MLPEmbedder, clip_half, timestep_embedding

# Rotary tables cover positions -4096 .. 4095 per axis, as diffusers' QwenEmbedRope.
ROPE_POSITIONS = 4096
# Transformer options of Qwen-Image variants (Edit-2511, Layered) this port does not implement.
UNSUPPORTED_OPTIONS = ("guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope")


class TimestepEmbedding(nn.Module):
    """The modulation vector ``temb``: the timestep's sinusoidal embedding through an MLP."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.timestep_embedder = MLPEmbedder(256, dim)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = self.timestep_embedder(timestep_embedding(timestep, scale=1000).to(dtype=dtype))
        return out


class RMSNorm(nn.Module):
    """RMS norm over the last axis with a weight, in diffusers' order: float32 variance, ``x * rsqrt``, then the
    weight (cast to half precision first where the weight is half)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        out: torch.Tensor = x * self.weight
        return out


class QwenRope(nn.Module):
    """Qwen-Image's 3-axis (frame, height, width) rotary embedding as complex phases: ``(image, text)``
    tables of shape (tokens, head_dim / 2)."""

    def __init__(self, axes_dim: list[int], theta: int = 10000) -> None:
        super().__init__()
        self.axes_dim = axes_dim
        # On the CPU, as diffusers builds them, even when the module is built on the meta device.
        positive = torch.arange(ROPE_POSITIONS, device="cpu")
        negative = torch.arange(ROPE_POSITIONS, device="cpu").flip(0) * -1 - 1
        # Plain attributes, not buffers: Module.to(dtype) would cast complex buffers to real.
        self.pos_freqs = torch.cat([self._phases(positive, d, theta) for d in axes_dim], dim=1)
        self.neg_freqs = torch.cat([self._phases(negative, d, theta) for d in axes_dim], dim=1)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def _phases(index: torch.Tensor, dim: int, theta: int) -> torch.Tensor:
        freqs = torch.outer(
            index, 1.0 / torch.pow(theta, torch.arange(0, dim, 2, device=index.device).to(torch.float32).div(dim))
        )
        return torch.polar(torch.ones_like(freqs), freqs)

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on_device:
            self._on_device[device] = (self.pos_freqs.to(device), self.neg_freqs.to(device))
        return self._on_device[device]

    def forward(
        self, frame: int, height: int, width: int, text_len: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Phases of the (frame, height, width) image grid's tokens and of ``text_len`` text tokens."""
        pos_freqs, neg_freqs = self._tables(device)
        halves = [d // 2 for d in self.axes_dim]
        pos, neg = pos_freqs.split(halves, dim=1), neg_freqs.split(halves, dim=1)
        frames = pos[0][:frame].view(frame, 1, 1, -1).expand(frame, height, width, -1)
        rows = torch.cat([neg[1][-(height - height // 2) :], pos[1][: height // 2]], dim=0)
        rows = rows.view(1, height, 1, -1).expand(frame, height, width, -1)
        cols = torch.cat([neg[2][-(width - width // 2) :], pos[2][: width // 2]], dim=0)
        cols = cols.view(1, 1, width, -1).expand(frame, height, width, -1)
        image = torch.cat([frames, rows, cols], dim=-1).reshape(frame * height * width, -1).clone().contiguous()
        start = max(height // 2, width // 2)  # text positions follow the largest (centred) image position
        return image, pos_freqs[start : start + text_len, ...]


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, sequence, heads, head_dim) channel pairs by complex phases (sequence, head_dim / 2)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs.unsqueeze(1)).flatten(3).type_as(x)


class JointAttention(nn.Module):
    """Image and text projections with RMS-normalised queries and keys, one attention over text then image."""

    def __init__(self, dim: int, heads: int, head_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, heads * head_dim) for _ in range(3))
        self.add_q_proj, self.add_k_proj, self.add_v_proj = (nn.Linear(dim, heads * head_dim) for _ in range(3))
        self.norm_q, self.norm_k = RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)
        self.norm_added_q, self.norm_added_k = RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)
        self.to_out = nn.Linear(heads * head_dim, dim)
        self.to_add_out = nn.Linear(heads * head_dim, dim)
        self.attention = Attention()

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        heads: torch.Tensor = x.unflatten(-1, (-1, self.head_dim))
        return heads

    def forward(
        self, image: torch.Tensor, text: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        img_q, img_k, img_v = (
            self._heads(self.to_q(image)),
            self._heads(self.to_k(image)),
            self._heads(self.to_v(image)),
        )
        txt_q, txt_k = self._heads(self.add_q_proj(text)), self._heads(self.add_k_proj(text))
        txt_v = self._heads(self.add_v_proj(text))
        img_q, img_k = self.norm_q(img_q), self.norm_k(img_k)
        txt_q, txt_k = self.norm_added_q(txt_q), self.norm_added_k(txt_k)
        img_freqs, txt_freqs = rotary
        img_q, img_k = apply_rope(img_q, img_freqs), apply_rope(img_k, img_freqs)
        txt_q, txt_k = apply_rope(txt_q, txt_freqs), apply_rope(txt_k, txt_freqs)
        query = torch.cat([txt_q, img_q], dim=1)
        out = self.attention(query, torch.cat([txt_k, img_k], dim=1), torch.cat([txt_v, img_v], dim=1))
        out = out.flatten(2, 3).to(query.dtype)
        text_len = text.shape[1]
        return self.to_out(out[:, text_len:, :].contiguous()), self.to_add_out(out[:, :text_len, :].contiguous())


def modulate(x: torch.Tensor, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x * (1 + scale) + shift`` and the gate, from ``params`` = (shift, scale, gate) along the last axis."""
    shift, scale, gate = params.chunk(3, dim=-1)
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1), gate.unsqueeze(1)


class QwenImageBlock(nn.Module):
    """A dual-stream block: image and text with their own modulation, norms and MLPs, one joint attention."""

    def __init__(self, dim: int, heads: int, head_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.img_mod = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.img_norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=eps)
        self.attn = JointAttention(dim, heads, head_dim, eps)
        self.img_norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=eps)
        self.img_mlp = FeedForward(dim)
        self.txt_mod = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.txt_norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=eps)
        self.txt_norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=eps)
        self.txt_mlp = FeedForward(dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        img_mod1, img_mod2 = self.img_mod(temb).chunk(2, dim=-1)
        txt_mod1, txt_mod2 = self.txt_mod(temb).chunk(2, dim=-1)
        img, img_gate1 = modulate(self.img_norm1(hidden_states), img_mod1)
        txt, txt_gate1 = modulate(self.txt_norm1(encoder_hidden_states), txt_mod1)
        img_attn, txt_attn = self.attn(img, txt, image_rotary_emb)
        hidden_states = hidden_states + img_gate1 * img_attn
        encoder_hidden_states = encoder_hidden_states + txt_gate1 * txt_attn
        img, img_gate2 = modulate(self.img_norm2(hidden_states), img_mod2)
        hidden_states = hidden_states + img_gate2 * self.img_mlp(img)
        txt, txt_gate2 = modulate(self.txt_norm2(encoder_hidden_states), txt_mod2)
        encoder_hidden_states = encoder_hidden_states + txt_gate2 * self.txt_mlp(txt)
        return clip_half(encoder_hidden_states), clip_half(hidden_states)


register_blocks(QwenImageBlock)


class NativeQwenImageTransformer(NativeTransformer):
    """The Qwen-Image transformer built from a diffusers ``transformer/config.json`` (block list, loop, weight
    names and building: ``NativeTransformer``).

    The text-to-image model only: a config enabling one of ``UNSUPPORTED_OPTIONS`` is refused.
    """

    _block_lists = ("transformer_blocks",)
    _repeated_blocks = ("QwenImageBlock",)
    # Context parallelism: the image and text streams split as img_in and txt_in return them, the rotary tables
    # as pos_embed returns them (computed from the whole sequence's shape first), the image stream gathered at
    # proj_out. diffusers' QwenImageTransformer2DModel._cp_plan splits at the first block's input instead; here
    # every block, the first included, sees this rank's share on entry and on exit, so a hook on the first block
    # (First Block Cache's residual check) compares like with like (measured: 8 vs 16 tokens at the block input).
    _cp_plan: ClassVar[dict[str, Any]] = {
        "img_in": {0: ContextParallelInput(split_dim=1, expected_dims=3, split_output=True)},
        "txt_in": {0: ContextParallelInput(split_dim=1, expected_dims=3, split_output=True)},
        "pos_embed": {
            0: ContextParallelInput(split_dim=0, expected_dims=2, split_output=True),
            1: ContextParallelInput(split_dim=0, expected_dims=2, split_output=True),
        },
        "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
    }

    def __init__(
        self,
        patch_size: int = 2,
        in_channels: int = 64,
        out_channels: int | None = 16,
        num_layers: int = 60,
        attention_head_dim: int = 128,
        num_attention_heads: int = 24,
        joint_attention_dim: int = 3584,
        axes_dims_rope: Iterable[int] = (16, 56, 56),
        **options: Any,
    ) -> None:
        super().__init__()
        enabled = [name for name in UNSUPPORTED_OPTIONS if options.get(name)]
        if enabled:
            raise ConfigError(
                f"native Qwen-Image implements the text-to-image transformer; this checkpoint enables {enabled} "
                "(a guidance-distilled, Edit-2511 or Layered variant): use target: adapter"
            )
        dim = num_attention_heads * attention_head_dim
        self.config = {"in_channels": in_channels, "patch_size": patch_size}
        self.pos_embed = QwenRope(list(axes_dims_rope))
        self.time_text_embed = TimestepEmbedding(dim)
        self.txt_norm = RMSNorm(joint_attention_dim, eps=1e-6)
        self.img_in = nn.Linear(in_channels, dim)
        self.txt_in = nn.Linear(joint_attention_dim, dim)
        self.transformer_blocks = nn.ModuleList(
            QwenImageBlock(dim, num_attention_heads, attention_head_dim) for _ in range(num_layers)
        )
        self.add_output(dim, patch_size * patch_size * (out_channels or in_channels))

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        img_shape: tuple[int, int, int],
    ) -> torch.Tensor:
        """Velocity for packed image tokens (batch, tokens, channels) given the text stream (batch, text tokens,
        joint_attention_dim), ``timestep`` in [0, 1] and the packed grid ``img_shape`` (frames, rows, columns)."""
        # From the whole sequence's shape, before context parallelism (if any) splits the streams at img_in/txt_in.
        rotary = self.pos_embed(*img_shape, encoder_hidden_states.shape[1], device=hidden_states.device)
        hidden_states = self.img_in(hidden_states)
        timestep = timestep.to(hidden_states.dtype)
        encoder_hidden_states = self.txt_in(self.txt_norm(encoder_hidden_states))
        temb = self.time_text_embed(timestep, hidden_states.dtype)
        _, hidden_states = self.run_blocks(hidden_states, encoder_hidden_states, temb, rotary)
        return self.output(hidden_states, temb)

    # diffusers tensor name -> ours (first match wins; ``NativeTransformer.map_name``).
    RENAMES = (
        (r"\.(img|txt)_mlp\.net\.0\.proj\.", r".\1_mlp.fc1."),
        (r"\.(img|txt)_mlp\.net\.2\.", r".\1_mlp.fc2."),
        (r"\.attn\.to_out\.0\.", ".attn.to_out."),
    )
