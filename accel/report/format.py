"""How numbers and tables look in every markdown the project writes (report.md, the docs tables, gate.md).

The lowest module of ``accel/report``: the others import it, it imports none of them.
"""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """Fixed decimals; ``inf`` for infinity and an en dash for a missing value."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}f}"
    return str(value)
