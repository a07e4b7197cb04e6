"""What every matplotlib figure of a run shares: pyplot on the file-only backend, and the tail that writes a figure
under ``RUN_DIR/figures/`` and frees it (``accel.report.figures``, ``drift``, ``video``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIGURES = "figures"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only: a sweep has no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, run_dir: Path, name: str, dpi: int = 100) -> Path:
    """Lay ``figure`` out, write it to ``RUN_DIR/figures/<name>`` (the folder made when missing), close it and
    return the path."""
    path = Path(run_dir) / FIGURES / name
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path
