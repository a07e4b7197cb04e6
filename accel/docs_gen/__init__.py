"""The manual's reference pages (``docs/reference/``), generated from the code that defines what they describe.

- ``profile.md``: every profile key, its type, default, allowed values and description, from the pydantic
  models of ``accel.profile`` (``model_json_schema()`` and the fields' defaults): ``accel.docs_gen.profile``;
- ``features.md``: every registered feature (built-in; ``--plugins`` adds the installed entry-point ones)
  with its family, class, stage, config fields, conflicts (``feature_matrix/rules.yaml`` and the feature's
  own), the refusals its ``probe`` and ``check`` can give, and what else it declares: ``accel.docs_gen.features``;
- ``cli.md``: every ``omni-accel`` command and flag, from typer's command tree: ``accel.docs_gen.cli``;
- ``results-record.md``: the record's keys, from ``accel.results.CellRecord``; ``api.md``: mkdocstrings
  directives for ``apply`` and every feature's config class (rendered at build time from the docstrings);
  ``modules.md``: the module map, from each module's docstring: all three ``accel.docs_gen.api``;

and the table blocks of ``docs/tables.md``, from the committed quickstart run (as ``omni-accel table --inject``).
Here: the list of pages (``PAGES``), their generation and the staleness check. ``python -m accel.docs_gen``
(``make docs-reference``) rewrites them all; ``--check`` writes nothing and exits 1 naming the stale pages
(``make test`` runs it, and ``tests/test_docs_gen.py`` checks the same), so a profile key or a feature option
added without regenerating fails until the pages are regenerated.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from accel.docs_gen.api import api_page, modules_page, results_page
from accel.docs_gen.cli import cli_page
from accel.docs_gen.features import features_page
from accel.docs_gen.markdown import REFERENCE_DIR, REGENERATE, ROOT
from accel.docs_gen.profile import profile_page

PAGES: dict[str, Callable[[], str]] = {
    "profile.md": profile_page,
    "features.md": features_page,
    "results-record.md": results_page,
    "cli.md": cli_page,
    "api.md": api_page,
    "modules.md": modules_page,
}


# Manual pages with ``omni-accel table`` blocks (``<!-- omni-accel:begin NAME -->``), and the committed run whose
# tables fill them.
INJECTED: tuple[tuple[str, str], ...] = (("docs/tables.md", "reports/quickstart"),)


def injected_tables(write: bool) -> list[str]:
    """Fill the table blocks of the ``INJECTED`` pages (or, without ``write``, only find the stale ones, as
    ``omni-accel table --check`` does); returns ``page: block`` for each stale or rewritten block."""
    from accel.gate import load_gate_data
    from accel.report.inject import inject_file
    from accel.report.tables import render_tables
    from accel.results import load_results
    from accel.sweep.runner import run_measure

    data = load_gate_data()
    stale = []
    for page, run in INJECTED:
        tables = render_tables(load_results(ROOT / run).records, data, run_measure(ROOT / run))
        stale += [f"{page}: {name}" for name in inject_file(ROOT / page, tables, check=not write)]
    return stale


def generate(plugins: bool = False) -> dict[str, str]:
    """Each reference page's file name -> its fresh content (ending in one newline); with ``plugins``,
    ``features.md`` also lists the installed entry-point features."""
    pages = dict(PAGES)
    if plugins:
        pages["features.md"] = lambda: features_page(plugins=True)
    return {name: page().rstrip("\n") + "\n" for name, page in pages.items()}


def stale_pages(directory: Path = REFERENCE_DIR) -> list[str]:
    """The pages under ``directory`` that are missing or differ from a fresh generation."""
    fresh = generate()
    return [
        name
        for name, text in fresh.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


def stale_message(names: list[str], directory: Path = REFERENCE_DIR) -> str:
    """The error naming the stale pages under ``directory`` and the command that regenerates them."""
    where = directory.relative_to(ROOT) if directory.is_relative_to(ROOT) else directory
    return f"{where}: stale generated page(s): {', '.join(names)}; regenerate them with '{REGENERATE}'"


def main(argv: list[str] | None = None) -> int:
    """``python -m accel.docs_gen [--check] [--out DIR] [--plugins]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m accel.docs_gen", description="Regenerate docs/reference/.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pages")
    parser.add_argument("--out", type=Path, default=REFERENCE_DIR, help="where the pages go (default: docs/reference)")
    parser.add_argument("--plugins", action="store_true", help="features.md also lists installed plugin features")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.out)
        if stale:
            print(f"error: {stale_message(stale, args.out)}", file=sys.stderr)
        blocks = injected_tables(write=False) if args.out == REFERENCE_DIR else []
        if blocks:
            print(
                f"error: stale table block(s): {', '.join(blocks)}; regenerate them with '{REGENERATE}'",
                file=sys.stderr,
            )
        return 1 if stale or blocks else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(plugins=args.plugins).items():
        (args.out / name).write_text(text)
    if args.out == REFERENCE_DIR:
        injected_tables(write=True)
    return 0
