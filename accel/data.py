"""Where the project's data folders are: the source tree's, else the copy installed with the package.

The lowest layer (no accel imports): profiles, feature_matrix and reports are found from here by every
module that reads them.
"""

from __future__ import annotations

from pathlib import Path


def data_dir(name: str) -> Path:
    """A top-level data folder (profiles, feature_matrix): the source tree's, else the installed copy."""
    source_tree = Path(__file__).resolve().parent.parent / name
    if source_tree.is_dir():
        return source_tree
    return Path(__file__).resolve().parent / "_data" / name
