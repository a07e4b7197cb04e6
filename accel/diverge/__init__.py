"""Where two runs of one request part: the first stage, step, block and submodule.

``diverge(profile, model, variant=... | against=...)`` loads both sides from a profile, runs one designated call on
each with hooks (``capture``), compares stage by stage and step by step (``stages``, ``compare``), bisects the
denoiser block by block on identical inputs (``bisect``) and reports it (``report``): the ``omni-accel diverge``
command. ``compare_sides`` compares sides already loaded.
"""

from __future__ import annotations

from accel.diverge.compare import TOLERANCES, Metrics
from accel.diverge.result import Divergence, DivergeResult, Row
from accel.diverge.run import Side, check_same_requests, compare_sides, diverge

__all__ = [
    "TOLERANCES",
    "DivergeResult",
    "Divergence",
    "Metrics",
    "Row",
    "Side",
    "check_same_requests",
    "compare_sides",
    "diverge",
]
