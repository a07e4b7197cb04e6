"""omni-accel: qualify diffusion acceleration features against an unaccelerated baseline.

``from accel import apply`` is the public way to apply features to a loaded pipeline
(``accel.features.applied``); it is imported on first use, so ``import accel`` stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "apply"]


def __getattr__(name: str) -> Any:
    if name == "apply":
        from accel.features import apply

        return apply
    raise AttributeError(f"module 'accel' has no attribute {name!r}")
