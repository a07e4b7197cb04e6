"""Filling a native transformer from a diffusers checkpoint: the shards of a component directory and a strict
copy of named tensors (diffusers' names mapped onto the module's; a missing, unexpected or misshapen tensor
is an error naming the keys)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` shards under ``directory`` (a checkpoint's ``transformer/``)."""
    from safetensors.torch import load_file

    shards = sorted(directory.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(
            f"no *.safetensors weights under {directory}: is it a diffusers checkpoint's component?"
        )
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(load_file(shard))
    return weights


def load_named_weights(
    module: torch.nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    map_name: Callable[[str], str],
    owner: str,
) -> None:
    """Copy named tensors (diffusers names, mapped by ``map_name``) into ``module``'s parameters, in place.

    Strict: a tensor with no parameter, a parameter with no tensor or a shape mismatch raises ``ValueError``
    naming the keys (``owner``: the class named in the message)."""
    own = dict(module.named_parameters())
    loaded: set[str] = set()
    unexpected: list[str] = []
    with torch.no_grad():
        for name, tensor in weights:
            target = map_name(name)
            if target not in own:
                unexpected.append(name)
                continue
            if own[target].shape != tensor.shape:
                raise ValueError(
                    f"tensor '{name}' has shape {tuple(tensor.shape)}, expected {tuple(own[target].shape)}"
                )
            own[target].copy_(tensor)
            loaded.add(target)
    missing = sorted(set(own) - loaded)
    if missing or unexpected:
        raise ValueError(
            f"checkpoint does not match {owner}: "
            + (f"missing {missing[:8]}{' ...' if len(missing) > 8 else ''}" if missing else "")
            + ("; " if missing and unexpected else "")
            + (f"unexpected {sorted(unexpected)[:8]}{' ...' if len(unexpected) > 8 else ''}" if unexpected else "")
        )
