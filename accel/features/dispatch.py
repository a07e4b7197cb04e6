"""Attention dispatch, as the attention and cache features observe it: shared here so neither reaches into
the other.

- ``tallied``: a backend function that counts its calls on a ``Tally`` (an in-place tensor add, so code
  compiled by torch.compile counts too, without a guard to fail).
- ``native_attention_layers``: the attention layers of an omni-accel native transformer, which dispatch
  themselves (and count their own calls) instead of going through diffusers' registry.
"""

from __future__ import annotations

import functools
from typing import Any

from accel.features.base import Tally


def tallied(function: Any, tally: Tally) -> Any:
    """``function`` counting its calls on ``tally`` (an in-place tensor add: no guard for dynamo to fail)."""

    @functools.wraps(function)
    def counted(*args: Any, **kwargs: Any) -> Any:
        tally.add()
        return function(*args, **kwargs)

    return counted


def native_attention_layers(transformer: Any) -> list[Any]:
    """The native attention layers of an omni-accel native transformer (none for diffusers models)."""
    if transformer is None:
        return []
    from accel.native.attention import Attention

    return [m for m in transformer.modules() if isinstance(m, Attention)]
