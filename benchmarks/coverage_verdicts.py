"""A coverage run's single-feature verdicts counted by what they say and by who refused: the numbers
``reports/coverage/README.md`` quotes.

Each cell is classified exactly as the support matrix and the per-feature tables classify it
(``accel.report.tables.classify``, from the gate's verdicts): supported, engaged with no effect here, out of
parity, refused by the model, by the library, by this device, not supported by omni-accel yet (the harness's
gap), failed. Prints the totals, then one line per variant; ``--list VERDICT`` also lists that verdict's cells
with their reasons.

    python benchmarks/coverage_verdicts.py RUN_DIR_OR_RESULTS [--list "failed" ...]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def count(results: Path) -> tuple[collections.Counter[str], dict[str, collections.Counter[str]], dict[str, list[str]]]:
    """(totals by verdict, per variant, cells with their reasons by verdict) of a run's single-feature cells."""
    from accel.gate.data import load_gate_data
    from accel.report import tables
    from accel.results import feature_options, load_results

    records = load_results(results).records
    verdicts = tables._verdicts(records, load_gate_data(None, None))
    totals: collections.Counter[str] = collections.Counter()
    by_variant: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    cells: dict[str, list[str]] = collections.defaultdict(list)
    for record in tables._measured(records):
        if len(feature_options(record)) != 1:
            continue
        verdict, reason = tables.classify(record, verdicts[(record["model"], record["variant"])])
        totals[verdict] += 1
        by_variant[record["variant"]][verdict] += 1
        cells[verdict].append(f"{record['model']}/{record['variant']}: {reason or ''}")
    return totals, by_variant, cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a run directory or its results.jsonl")
    parser.add_argument("--list", nargs="*", default=[], metavar="VERDICT", help="list the cells of these verdicts")
    args = parser.parse_args(argv)
    from accel.report.tables import VERDICTS

    totals, by_variant, cells = count(args.results)
    print(f"{sum(totals.values())} single-feature cells")
    for verdict in VERDICTS:
        print(f"  {verdict}: {totals[verdict]}")
    for variant, counts in sorted(by_variant.items()):
        print(f"{variant}: " + ", ".join(f"{verdict} {counts[verdict]}" for verdict in VERDICTS if counts[verdict]))
    for verdict in args.list:
        print(f"\n{verdict}:")
        print("\n".join(f"  {line}" for line in cells.get(verdict, [])) or "  (none)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
