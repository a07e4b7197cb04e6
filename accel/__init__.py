"""omni-accel: qualify diffusion acceleration features against an unaccelerated baseline."""

from __future__ import annotations

__version__ = "0.1.0"
