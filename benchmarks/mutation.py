"""The curated fault-injection check: does the test suite catch deliberately broken judgements?

Each entry of ``tests/mutations/mutations.yaml`` names one mutation of the judging code: a file, an exact
text in it, the text that replaces it, and the test node ids expected to fail with the mutation in place.
This runner copies the tree (git's tracked and untracked, not ignored, files) into a scratch directory once,
never touching the working tree; then, for each entry in turn, it writes the mutated file into the scratch
copy, runs only the named tests there, and puts the file back. A mutation is

- ``killed`` when the named tests fail with it (pytest exit 1),
- ``survived`` when they all pass (the suite lets the fault through: a test is missing),
- ``error`` when its old text is not in the file exactly once (the code moved: re-point the entry), or
  pytest could not run the tests (exit 2-5: a broken entry, never counted as killed).

Before the mutations, the union of the named tests runs once on the unmutated copy: a test that fails
already would "kill" every mutation, so the run stops with an error instead.

    python benchmarks/mutation.py                    # every entry; writes reports/mutation/curated.md
    python benchmarks/mutation.py --only F1 F3       # these entries again: their rows of the report updated
    python benchmarks/mutation.py --list             # names and files

Exit status: 0 when every mutation was killed, 1 when one survived, 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MUTATIONS = ROOT / "tests" / "mutations" / "mutations.yaml"
REPORT = ROOT / "reports" / "mutation" / "curated.md"
# Each entry's last outcome (the report is rendered from it, so --only can update some rows).
OUTCOMES_FILE = "curated.json"
KEYS = ("name", "file", "old", "new", "tests", "why")
KILLED, SURVIVED, ERROR = "killed", "survived", "error"


@dataclass(frozen=True)
class Mutation:
    """One named fault: ``old`` (exactly once in ``file``) becomes ``new``; ``tests`` must then fail."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


@dataclass
class Outcome:
    mutation: Mutation
    status: str
    seconds: float = 0.0
    detail: str = ""
    failed: list[str] = field(default_factory=list)
    run_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        fields = ("status", "seconds", "detail", "failed", "run_at")
        return {"old": self.mutation.old, "new": self.mutation.new, **{k: getattr(self, k) for k in fields}}


def load_mutations(path: Path = MUTATIONS) -> list[Mutation]:
    """The curated list; every entry has every key, a unique name, and at least one test."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    entries = data.get("mutations") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SystemExit(f"{path}: expected a mapping with a non-empty list 'mutations'")
    mutations, names = [], set()
    for index, entry in enumerate(entries):
        where = f"{path}: mutations[{index}]"
        if not isinstance(entry, dict) or set(entry) != set(KEYS):
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise SystemExit(f"{where}: expected exactly the keys {', '.join(KEYS)}, got {got}")
        if entry["name"] in names:
            raise SystemExit(f"{where}: name {entry['name']!r} given twice")
        names.add(entry["name"])
        tests = entry["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and "::" in t for t in tests):
            raise SystemExit(f"{where}: tests: expected a list of pytest node ids (file::test), got {tests!r}")
        if entry["old"] == entry["new"]:
            raise SystemExit(f"{where}: old and new are the same text")
        mutations.append(Mutation(entry["name"], entry["file"], entry["old"], entry["new"], tuple(tests), entry["why"]))
    return mutations


def scratch_copy(destination: Path) -> None:
    """The tree as git sees it (tracked and untracked, ignored files left out) under ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_tests(scratch: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[int, str]:
    """pytest on ``tests`` inside the scratch copy (its own ``accel``, one torch thread); (exit code, output)."""
    env = {**os.environ, "PYTHONPATH": str(scratch), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:logging", *tests]
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f} s"
    return done.returncode, done.stdout + done.stderr


def _failed_tests(output: str) -> list[str]:
    return [line.split(" ")[1] for line in output.splitlines() if line.startswith("FAILED ")]


def apply_mutation(scratch: Path, mutation: Mutation, timeout_s: float) -> Outcome:
    """Mutate the scratch copy's file, run the entry's tests, restore the file."""
    path = scratch / mutation.file
    if not path.is_file():
        return Outcome(mutation, ERROR, detail=f"{mutation.file}: no such file")
    original = path.read_text(encoding="utf-8")
    count = original.count(mutation.old)
    if count != 1:
        where = "not found" if count == 0 else f"found {count} times"
        return Outcome(mutation, ERROR, detail=f"old text {where} in {mutation.file}: re-point the entry")
    started = time.perf_counter()
    try:
        path.write_text(original.replace(mutation.old, mutation.new), encoding="utf-8")
        code, output = run_tests(scratch, mutation.tests, timeout_s)
    finally:
        path.write_text(original, encoding="utf-8")
    seconds = time.perf_counter() - started
    if code == 1:
        return Outcome(mutation, KILLED, seconds, failed=_failed_tests(output))
    if code == 0:
        return Outcome(mutation, SURVIVED, seconds, detail="every named test passed")
    tail = " / ".join(output.strip().splitlines()[-3:])
    return Outcome(mutation, ERROR, seconds, detail=f"pytest exit {code}: {tail}")


def load_outcomes(path: Path, mutations: list[Mutation]) -> dict[str, Outcome]:
    """The outcomes stored by earlier runs, for the entries whose texts are still the same."""
    if not path.is_file():
        return {}
    stored = json.loads(path.read_text(encoding="utf-8"))
    known = {}
    for m in mutations:
        entry = stored.get(m.name)
        if entry and (entry["old"], entry["new"]) == (m.old, m.new):
            fields = {k: entry[k] for k in ("status", "seconds", "detail", "failed", "run_at")}
            known[m.name] = Outcome(m, **fields)
    return known


def markdown(outcomes: list[Outcome]) -> str:
    """The committed report: score, survivors and errors first, then every entry."""
    killed = sum(o.status == KILLED for o in outcomes)
    minutes = sum(o.seconds for o in outcomes) / 60
    lines = [
        "# Curated mutations",
        "",
        "Written by `make mutation` (`benchmarks/mutation.py` over `tests/mutations/mutations.yaml`): each",
        "mutation applied in turn to a scratch copy of the tree, only its named tests run there.",
        "",
        f"**Score: {killed} of {len(outcomes)} killed** ({minutes:.1f} min of tests on a shared 2-core machine,",
        "one torch thread; the `run at` column says when each entry last ran).",
        "",
    ]
    survivors = [o for o in outcomes if o.status == SURVIVED]
    errors = [o for o in outcomes if o.status == ERROR]
    lines += ["## Survivors", ""]
    lines += [f"- **{o.mutation.name}** ({o.mutation.file}): {o.mutation.why}" for o in survivors] or ["none"]
    lines += ["", "## Errors", ""]
    lines += [f"- **{o.mutation.name}** ({o.mutation.file}): {o.detail}" for o in errors] or ["none"]
    lines += ["", "## Every mutation", "", "| mutation | file | status | failed tests | what it breaks | run at |"]
    lines.append("|---|---|---|---|---|---|")
    for o in outcomes:
        failed = ", ".join(f"`{t.split('::')[-1]}`" for t in o.failed) or o.detail or "–"
        why = o.mutation.why.replace("|", "/")
        failed = failed.replace("|", "/")
        lines.append(f"| {o.mutation.name} | `{o.mutation.file}` | {o.status} | {failed} | {why} | {o.run_at} |")
    return "\n".join(lines) + "\n"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="Run these entries only; the others keep their stored outcome."
    )
    parser.add_argument("--list", action="store_true", help="List the entries and exit.")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds per mutation's tests (default 600).")
    parser.add_argument(
        "--report", type=Path, default=REPORT, help=f"Report path (default {REPORT.relative_to(ROOT)})."
    )
    args = parser.parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C: the mutated scratch file is put back and the scratch copy removed.
    signal.signal(signal.SIGTERM, _interrupt)
    mutations = load_mutations()
    if args.list:
        for m in mutations:
            print(f"{m.name:28} {m.file:32} {len(m.tests)} test(s)")
        return 0
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in mutations})
        if unknown:
            print(f"error: unknown mutation(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
        mutations = [m for m in mutations if m.name in args.only]
    with tempfile.TemporaryDirectory(prefix="omni-accel-mutation-") as directory:
        scratch = Path(directory)
        scratch_copy(scratch)
        tests = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
        code, output = run_tests(scratch, tests, args.timeout * 2)
        if code != 0:
            print(f"error: the named tests do not pass on the unmutated tree (exit {code}):", file=sys.stderr)
            print("\n".join(output.splitlines()[-15:]), file=sys.stderr)
            return 2
        outcomes = []
        for mutation in mutations:
            outcome = apply_mutation(scratch, mutation, args.timeout)
            outcome.run_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            outcomes.append(outcome)
            print(f"{outcome.status:9} {mutation.name:28} {outcome.seconds:6.1f} s  {outcome.detail}", flush=True)
    # The report: this run's outcomes, and (with --only) the stored ones of the other entries.
    store = args.report.parent / OUTCOMES_FILE
    every = load_mutations()
    known = load_outcomes(store, every) if args.only else {}
    known.update({o.mutation.name: o for o in outcomes})
    rows = [known.get(m.name) or Outcome(m, ERROR, detail="not run since its text changed: run it") for m in every]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({o.mutation.name: o.to_dict() for o in rows}, indent=1) + "\n", encoding="utf-8")
    args.report.write_text(markdown(rows), encoding="utf-8")
    print(f"wrote {args.report}")
    killed = sum(o.status == KILLED for o in outcomes)
    print(f"{killed} of {len(outcomes)} killed")
    if any(o.status == ERROR for o in outcomes):
        return 2
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
