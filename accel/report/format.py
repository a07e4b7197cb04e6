"""How numbers and tables look in every markdown the project writes (report.md, the docs tables, gate.md).

The lowest module of ``accel/report``: the others import it, it imports none of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def fmt(value: Any, digits: int = 3, *, significant: bool = False) -> str:
    """A number as every table and summary shows it: ``digits`` fixed decimals (or, with ``significant``,
    significant digits: the gate's measured values), ``inf`` for an infinity, ``nan``, and an en dash for a
    missing value; anything else as ``str``."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}g}" if significant else f"{value:.{digits}f}"
    return str(value)


def percent(value: float | None, digits: int = 0) -> str:
    """A share as a percentage (``0.43`` -> ``43%``), an en dash when missing."""
    return "–" if value is None else f"{value:.{digits}%}"


ALIGN = {"left": "---", "right": "--:", "center": ":-:"}


def row(cells: Iterable[Any]) -> str:
    """One markdown table row (cells as given: escape ``|`` in free text before)."""
    return "|" + "|".join(f" {cell} " for cell in cells) + "|"


def table_lines(header: Sequence[Any], align: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table as lines: the header, the alignment rule (``left``, ``right``, ``center`` per column),
    then one line per row."""
    if len(align) != len(header):
        raise ValueError(f"{len(header)} columns but {len(align)} alignments")
    return [row(header), "|" + "|".join(ALIGN[a] for a in align) + "|", *(row(cells) for cells in rows)]


def table(header: Sequence[Any], align: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (no trailing line break); ``table_lines`` joined."""
    return "\n".join(table_lines(header, align, rows))
