"""What TeaCache's hooks compute per transformer family: the modulated input, the block lists, the block output.

TeaCache's decision signal is the relative L1 change of a *modulated input* between calls. Its authors compute a
different one per family (ali-vilab/TeaCache, TeaCache4<Model>/*.py at 7c10efc4702c), recomputed here from the
transformer's own forward arguments before its blocks run:

- FLUX, HunyuanVideo, Mochi: the first block's ``norm1`` of the embedded image tokens, modulated by the timestep
  (and guidance / pooled text) embedding.
- LTX-Video: the first block's ``norm1`` of the projected tokens, shifted and scaled by its ``scale_shift_table``
  plus the timestep embedding (``teacache_ltx.py``).
- Wan: the timestep embedding ``e`` (``teacache_generate.py``, the mode without ``use_ret_steps``).
- CogVideoX: the timestep embedding ``emb`` (``teacache_sample_video.py``).

A skipped call empties the block lists but the last, whose blocks are replaced by one ``ReuseResidual`` that
adds the residual the blocks added on the last computed call to the image stream (the text stream passes through).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

# How a block returns its streams: the image stream alone, (image, text), or (text, image) (FLUX's order).
Output = Literal["tensor", "image_first", "text_first"]


@dataclass(frozen=True)
class Layout:
    """One family's hook points: its block lists (in call order), how blocks return, and its modulated input."""

    family: str
    block_lists: tuple[str, ...]
    output: Output
    modulated: Callable[[Any, dict[str, Any]], torch.Tensor]

    def image_output(self, output: Any) -> torch.Tensor:
        """The image stream of a block's output."""
        image: torch.Tensor
        if self.output == "tensor":
            image = output if isinstance(output, torch.Tensor) else output[0]
        else:
            image = output[0] if self.output == "image_first" else output[1]
        return image


def _flux(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    hidden = t.x_embedder(kwargs["hidden_states"])
    timestep = kwargs["timestep"].to(hidden.dtype) * 1000
    guidance = kwargs.get("guidance")
    if guidance is None:
        temb = t.time_text_embed(timestep, kwargs["pooled_projections"])
    else:
        temb = t.time_text_embed(timestep, guidance.to(hidden.dtype) * 1000, kwargs["pooled_projections"])
    modulated: torch.Tensor = t.transformer_blocks[0].norm1(hidden, emb=temb)[0]
    return modulated


def _hunyuan_video(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    temb = t.time_text_embed(kwargs["timestep"], kwargs["pooled_projections"], kwargs.get("guidance"))[0]
    hidden = t.x_embedder(kwargs["hidden_states"])
    modulated: torch.Tensor = t.transformer_blocks[0].norm1(hidden, emb=temb)[0]
    return modulated


def _mochi(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    temb = t.time_embed(
        kwargs["timestep"],
        kwargs["encoder_hidden_states"],
        kwargs["encoder_attention_mask"],
        hidden_dtype=kwargs["hidden_states"].dtype,
    )[0]
    hidden = kwargs["hidden_states"]
    batch = hidden.shape[0]
    hidden = t.patch_embed(hidden.permute(0, 2, 1, 3, 4).flatten(0, 1))
    hidden = hidden.unflatten(0, (batch, -1)).flatten(1, 2)
    modulated: torch.Tensor = t.transformer_blocks[0].norm1(hidden, temb)[0]
    return modulated


def _ltx(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    hidden = t.proj_in(kwargs["hidden_states"])
    batch = hidden.size(0)
    temb = t.time_embed(kwargs["timestep"].flatten(), batch_size=batch, hidden_dtype=hidden.dtype)[0]
    temb = temb.view(batch, -1, temb.size(-1))
    block = t.transformer_blocks[0]
    table = block.scale_shift_table
    ada = table[None, None] + temb.reshape(batch, temb.size(1), table.shape[0], -1)
    shift, scale = ada.unbind(dim=2)[:2]
    modulated: torch.Tensor = block.norm1(hidden) * (1 + scale) + shift
    return modulated


def _wan(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    embedder = t.condition_embedder
    timestep = kwargs["timestep"]
    seq_len = timestep.shape[1] if timestep.ndim == 2 else None
    projected = embedder.timesteps_proj(timestep.flatten())
    if seq_len is not None:
        projected = projected.unflatten(0, (-1, seq_len))
    dtype = next(iter(embedder.time_embedder.parameters())).dtype
    temb: torch.Tensor = embedder.time_embedder(projected.to(dtype))
    return temb


def _cogvideox(t: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    t_emb = t.time_proj(kwargs["timestep"]).to(kwargs["hidden_states"].dtype)
    emb: torch.Tensor = t.time_embedding(t_emb, kwargs.get("timestep_cond"))
    return emb


_FLUX = Layout("FLUX", ("transformer_blocks", "single_transformer_blocks"), "text_first", _flux)
LAYOUTS: dict[str, Layout] = {
    "FluxTransformer2DModel": _FLUX,
    "NativeFluxTransformer": _FLUX,
    "HunyuanVideoTransformer3DModel": Layout(
        "HunyuanVideo", ("transformer_blocks", "single_transformer_blocks"), "image_first", _hunyuan_video
    ),
    "MochiTransformer3DModel": Layout("Mochi", ("transformer_blocks",), "image_first", _mochi),
    "LTXVideoTransformer3DModel": Layout("LTX-Video", ("transformer_blocks",), "tensor", _ltx),
    "WanTransformer3DModel": Layout("Wan", ("blocks",), "tensor", _wan),
    "CogVideoXTransformer3DModel": Layout("CogVideoX", ("transformer_blocks",), "image_first", _cogvideox),
}


def layout_for(transformer: Any) -> Layout | None:
    """The hook points of ``transformer``'s class (None: the hooks cannot compute its modulated input)."""
    return LAYOUTS.get(type(transformer).__name__) or next(
        (LAYOUTS[base.__name__] for base in type(transformer).__mro__ if base.__name__ in LAYOUTS), None
    )


class ReuseResidual(torch.nn.Module):
    """Stands in for the skipped blocks: adds the cached residual to the image stream, passes the text stream."""

    def __init__(self, residual: torch.Tensor, output: Output) -> None:
        super().__init__()
        self.residual = residual
        self.output = output

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs["hidden_states"]
        text = args[1] if len(args) > 1 else kwargs.get("encoder_hidden_states")
        image = hidden + self.residual
        if self.output == "tensor":
            return image
        return (image, text) if self.output == "image_first" else (text, image)
