"""What native transformers share: the block-list loop, the declarations features read, weight names, building.

A native transformer subclasses ``NativeTransformer`` and declares its block lists in call order
(``_block_lists``: attribute names of ``nn.ModuleList``s). Every block of them takes ``hidden_states,
encoder_hidden_states, temb, image_rotary_emb`` and returns ``(encoder_hidden_states, hidden_states)``;
``run_blocks`` runs them in that order (the one loop every native transformer calls between its embeddings and
its output norm), and the same declaration becomes ``_cache_blocks`` (Cache-DiT's block adapter) and
``_layerwise_offload_blocks_attrs`` (layerwise offload). After the blocks, ``output`` (``norm_out``, then
``proj_out``: ``add_output`` adds them) gives the velocity. A block class is registered with ``register_blocks``
so diffusers' cache hooks (FirstBlockCache, MagCache, ...) find its outputs, and named in ``_repeated_blocks``
for regional compile (``compile_repeated_blocks``).

Weights: ``RENAMES`` (diffusers' tensor name -> the port's, first match wins) is the port's weight-name
mapping; ``map_name`` applies it, ``load_weights`` copies a checkpoint strictly through it, and the diverge
tooling makes module names correspond through it. ``from_checkpoint`` and ``from_library`` build a transformer
from a checkpoint's ``transformer/`` directory or from the diffusers transformer of in-memory components.

The maths of a model (its attention, blocks, rotary embedding) stays in its own module; layers two models
compute alike are in ``accel.native.layers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
from diffusers.models.cache_utils import CacheMixin
from torch import nn

from accel.native.layers import OutputNorm
from accel.native.weights import load_named_weights, read_safetensors

T = TypeVar("T", bound="NativeTransformer")


def register_blocks(*blocks: type[nn.Module]) -> None:
    """Register block classes that return ``(encoder_hidden_states, hidden_states)`` with diffusers' block
    registry: diffusers' cache hooks (FirstBlockCache, MagCache, ...) find block outputs through it."""
    for block in blocks:
        TransformerBlockRegistry.register(
            block, TransformerBlockMetadata(return_hidden_states_index=1, return_encoder_hidden_states_index=0)
        )


def config_kwargs(config: Any) -> dict[str, Any]:
    """A diffusers model config as constructor keywords (its ``_class_name``, ``_diffusers_version`` ... left out)."""
    return {k: v for k, v in dict(config).items() if not k.startswith("_")}


class NativeTransformer(nn.Module, CacheMixin):
    """Base class of native transformers: the block lists, the loop over them, weight names and building.

    ``CacheMixin`` (diffusers' generic cache-hook interface, not one of its models) gives ``enable_cache`` and
    ``cache_context``, so diffusers' cache hooks apply to the native blocks as to the library's.
    """

    # The block lists in call order (subclasses declare them); _cache_blocks and
    # _layerwise_offload_blocks_attrs follow from them.
    _block_lists: ClassVar[tuple[str, ...]] = ()
    _repeated_blocks: ClassVar[tuple[str, ...]] = ()
    _cache_blocks: ClassVar[tuple[str, ...]] = ()
    _layerwise_offload_blocks_attrs: ClassVar[tuple[str, ...]] = ()
    # diffusers tensor name -> ours (first match wins); anything else keeps its name.
    RENAMES: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._cache_blocks = cls._block_lists
        cls._layerwise_offload_blocks_attrs = cls._block_lists

    def run_blocks(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
        image_rotary_emb: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every block of every ``_block_lists`` list, in order: ``(encoder_hidden_states, hidden_states)`` after
        the last. The lists are looked up at call time (Cache-DiT swaps in its cached blocks under their names)."""
        for name in self._block_lists:
            for block in getattr(self, name):
                encoder_hidden_states, hidden_states = block(
                    hidden_states=hidden_states,
                    encoder_hidden_states=encoder_hidden_states,
                    temb=temb,
                    image_rotary_emb=image_rotary_emb,
                )
        return encoder_hidden_states, hidden_states

    def add_output(self, dim: int, out_features: int) -> None:
        """The output head every native transformer ends with: ``norm_out`` (a LayerNorm modulated by ``temb``)
        and ``proj_out`` (to the packed latent channels); added last, after the block lists."""
        self.norm_out = OutputNorm(dim)
        self.proj_out = nn.Linear(dim, out_features)

    def output(self, hidden_states: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        """The output head on the image stream after the blocks: the predicted velocity."""
        out: torch.Tensor = self.proj_out(self.norm_out(hidden_states, temb))
        return out

    def compile_repeated_blocks(self, **compile_kwargs: Any) -> None:
        """Compile, in place, every block whose class is in ``_repeated_blocks`` (regional compile)."""
        for module in self.modules():
            if type(module).__name__ in self._repeated_blocks:
                module.compile(**compile_kwargs)

    @classmethod
    def map_name(cls, name: str) -> str:
        """Our name for a diffusers tensor name."""
        for pattern, replacement in cls.RENAMES:
            name, count = re.subn(pattern, replacement, name)
            if count:
                break
        return name

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy named tensors (diffusers names) into this module; missing or unexpected names are an error."""
        load_named_weights(self, weights, self.map_name, type(self).__name__)

    @classmethod
    def from_checkpoint(cls: type[T], directory: Path, dtype: torch.dtype) -> T:
        """Built from a checkpoint's ``transformer/`` directory (``config.json`` and the safetensors shards),
        filled by ``load_weights``, in ``dtype``, in eval mode."""
        transformer = cls(**config_kwargs(json.loads((directory / "config.json").read_text())))
        transformer.load_weights(read_safetensors(directory).items())
        transformer.to(dtype).eval()
        return transformer

    @classmethod
    def from_library(cls: type[T], library: Any, dtype: torch.dtype) -> T:
        """Built from a diffusers transformer (in-memory components): its config and weights, on its device,
        in ``dtype`` (built on the meta device first, so no second set of weights is initialised)."""
        from accel.zoo.synthetic import default_dtype

        device = next(library.parameters()).device
        with torch.device("meta"), default_dtype(dtype):
            transformer = cls(**config_kwargs(library.config))
        transformer.to_empty(device=device)
        transformer.load_weights(library.state_dict().items())
        return transformer.to(dtype).eval().requires_grad_(False)
