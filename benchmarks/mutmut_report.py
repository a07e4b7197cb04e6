"""mutmut's generated mutants of the judging code: run them, then write their score and every survivor.

``[tool.mutmut]`` in pyproject.toml says which files are mutated (the gate's judgements, the speedup
statistics, the cache and compile features' evidence verdicts) and which fast, unit-level tests run against
each mutant. mutmut copies ``accel/`` (and the data folders) to ``mutants/`` (ignored), records each mutant's
outcome in ``mutants/**/*.meta``; this script reads those files and writes ``reports/mutation/mutmut.md``:

- the score per module: killed, survived, timeout, no tests (no selected test reaches the function: the
  slow tests that do, real pipelines and subprocesses, are not run against mutants), other;
- every survivor with its diff and a one-line review from ``tests/mutations/mutmut_reviews.yaml``
  (keyed by mutant name), or, for a mutant that changes nothing but the wording of a message, the rule that
  says so. A survivor with neither is listed as **not reviewed** (exit 1).

    python benchmarks/mutmut_report.py --run            # mutmut run (resumes: only unchecked mutants), report
    python benchmarks/mutmut_report.py --rerun 'accel.gate.judge.x_gate_cell__mutmut_*'   # these again
    python benchmarks/mutmut_report.py                  # the report from the results already in mutants/

A review that says ``killed by new test ...`` must name a mutant that is now killed: one still surviving is
reported as a stale review (exit 1). Each run's date, wall time and mutmut version are kept in
``mutants/omni-accel-runs.json`` and written into the report.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import subprocess
import sys
import time
import tokenize
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "mutation" / "mutmut.md"
REVIEWS = ROOT / "tests" / "mutations" / "mutmut_reviews.yaml"
RUNS = ROOT / "mutants" / "omni-accel-runs.json"
KILLED_BY_NEW_TEST = "killed by new test"
WORDING = (
    "wording only: the mutant changes the text of a message (a summary, reason or error string), not what is "
    "judged; tests pin the judgement, not every word"
)
# mutmut's exit codes (mutmut.stats.status_by_exit_code), folded into the report's columns.
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not checked",
}
COLUMNS = ("killed", "survived", "timeout", "no tests", "other")


def mutmut_config() -> dict[str, Any]:
    import tomllib

    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"])


def mutmut_version() -> str:
    return metadata.version("mutmut")


def mutmut_bin() -> str:
    candidate = Path(sys.executable).with_name("mutmut")
    return str(candidate) if candidate.exists() else "mutmut"


def run_mutmut(patterns: list[str], max_children: int) -> int:
    """``mutmut run`` (all unchecked mutants, or ``patterns`` again), its date and wall time recorded."""
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    command = [mutmut_bin(), "run", "--max-children", str(max_children), *patterns]
    rc = subprocess.run(command, cwd=ROOT, check=False).returncode
    runs = json.loads(RUNS.read_text()) if RUNS.is_file() else []
    runs.append(
        {
            "started": started.strftime("%Y-%m-%d %H:%M UTC"),
            "wall_s": round(time.monotonic() - t0, 1),
            "mutmut": mutmut_version(),
            "mutants": patterns or "all unchecked",
            "exit": rc,
        }
    )
    RUNS.parent.mkdir(exist_ok=True)
    RUNS.write_text(json.dumps(runs, indent=1) + "\n")
    return rc


def load_results(files: list[str]) -> dict[str, dict[str, int | None]]:
    """Per mutated file, each mutant's exit code from its ``.meta`` file."""
    results = {}
    for name in files:
        meta = ROOT / "mutants" / (name + ".meta")
        results[name] = json.loads(meta.read_text())["exit_code_by_key"] if meta.is_file() else {}
    return results


def status(code: int | None) -> str:
    return STATUS.get(code, "other")


def mutant_diff(name: str, path: str) -> str:
    """The mutant's changed lines (mutmut's own diff, without its file headers)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        diff = get_diff_for_mutant(name, path=path)
    finally:
        os.chdir(cwd)
    return "\n".join(line for line in diff.splitlines()[2:] if line[:1] in "-+")


def _tokens(code: str) -> list[tuple[int, str]]:
    try:
        return [
            (t.type, t.string)
            for t in tokenize.generate_tokens(io.StringIO(code.strip() + "\n").readline)
            if t.type
            not in (
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
                tokenize.COMMENT,
            )
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []


def is_wording(diff: str) -> bool:
    """Whether the mutant changes only string literals that are prose: an f-string with a space, a literal of
    three words or more, or a separator joined into a message (``"; ".join``). Never a literal that is split
    on, compared with or searched for, and never a short label (``"not run"``, a status, a key)."""
    removed = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("-"))
    added = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+"))
    before, after = _tokens(removed), _tokens(added)
    if not before or len(before) != len(after):
        return False
    changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    if not changed:
        return False
    for i in changed:
        (type_b, text_b), (type_a, _) = before[i], after[i]
        if type_b != tokenize.STRING or type_a != tokenize.STRING:
            return False
        previous = [text for _, text in before[max(0, i - 2) : i]]
        following = [text for _, text in before[i + 1 : i + 3]]
        if any(word in previous for word in ("split", "rsplit", "startswith", "endswith", "in", "==", "!=")):
            return False
        if any(word in following for word in ("in", "==", "!=")):
            return False
        body = text_b.lstrip("rbfuRBFU")[1:-1]
        prose = " " in body if text_b[:1] in "fF" else len(body.split()) >= 3
        separator = body in ("; ", ", ") and following == [".", "join"]
        if not (prose or separator):
            return False
    return True


def _mutants_cell(mutants: str | list[str]) -> str:
    return mutants if isinstance(mutants, str) else f"{len(mutants)} named mutants again"


def function_of(name: str) -> str:
    return name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0].removeprefix("x_").replace("ǁ", ".").strip(".")


def render(
    config: dict[str, Any], results: dict[str, dict[str, int | None]], reviews: dict[str, str]
) -> tuple[str, int]:
    runs = json.loads(RUNS.read_text()) if RUNS.is_file() else []
    counts = {path: collections.Counter(status(c) for c in codes.values()) for path, codes in results.items()}
    total = collections.Counter()
    for c in counts.values():
        total.update(c)
    problems = 0
    lines = [
        "# mutmut: generated mutants of the judging code",
        "",
        "Written by `make mutmut` (`benchmarks/mutmut_report.py`): mutmut "
        f"{', '.join(sorted({r['mutmut'] for r in runs})) or mutmut_version()} mutates each file of "
        "`[tool.mutmut] only_mutate` (pyproject.toml) one change at a time and runs, against each mutant, the "
        "selected tests that reach the mutated function. Reviews of the survivors: "
        "`tests/mutations/mutmut_reviews.yaml`. The curated mutations are `make mutation` (curated.md).",
        "",
        "Tests run against the mutants: "
        + ", ".join(f"`{t}`" for t in config["pytest_add_cli_args_test_selection"])
        + "; left out: "
        + ", ".join(f"`{a.split('::')[-1]}`" for a in config.get("pytest_add_cli_args", []) if "::" in a)
        + " (a subprocess, real torch.compile: slow; they run in `make test`). A `no tests` mutant is in a "
        "function none of those tests reach (loading, applying a feature to a real pipeline): the slow tests "
        "that reach it are not run against mutants, so it is neither killed nor a survivor.",
        "",
        "## Runs",
        "",
        "| started | wall | mutmut | mutants | exit |",
        "|---|---|---|---|---|",
        *(
            f"| {r['started']} | {r['wall_s'] / 60:.1f} min | {r['mutmut']} | "
            f"{_mutants_cell(r['mutants'])} | "
            f"{r['exit']} |"
            for r in runs
        ),
        "",
        "## Score",
        "",
        "Score: killed (and timed out) of the mutants some selected test reaches (total less `no tests`).",
        "",
        "| module | mutants | " + " | ".join(COLUMNS) + " | score |",
        "|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    for path, c in [*counts.items(), ("**all**", total)]:
        reached = sum(c.values()) - c["no tests"] - c["not checked"]
        score = f"{(c['killed'] + c['timeout']) / reached:.1%}" if reached else "-"
        other = sum(c.values()) - sum(c[k] for k in COLUMNS[:-1])
        lines.append(
            f"| `{path}` | {sum(c.values())} | "
            + " | ".join(str(other if k == "other" else c[k]) for k in COLUMNS)
            + f" | {score} |"
        )
    unchecked = total["not checked"]
    if unchecked:
        problems += 1
        lines += [
            "",
            f"**{unchecked} mutants not checked** (the run was stopped before it reached them; `make mutmut` "
            "again checks only those): `other` counts them.",
        ]

    no_tests = collections.Counter()
    for path, codes in results.items():
        for name, code in codes.items():
            if status(code) == "no tests":
                no_tests[f"{path}: {function_of(name)}"] += 1
    lines += ["", "## No tests (functions no selected test reaches)", ""]
    lines += [f"- `{where}`: {n}" for where, n in sorted(no_tests.items())] or ["none"]

    survivors = [
        (path, name) for path, codes in results.items() for name, code in codes.items() if status(code) == "survived"
    ]
    killed_by_new = [(name, text) for name, text in reviews.items() if text.startswith(KILLED_BY_NEW_TEST)]
    code_of = {name: code for codes in results.values() for name, code in codes.items()}
    tally = collections.Counter()
    body: list[str] = []
    for path, name in survivors:
        diff = mutant_diff(name, path)
        review = reviews.get(name)
        if review and review.startswith(KILLED_BY_NEW_TEST):
            review = f"**stale review**: says {review!r} but it survived"
            problems += 1
            tally["stale"] += 1
        elif review:
            tally["explained (reviewed)"] += 1
        elif is_wording(diff):
            review = WORDING
            tally["explained (wording rule)"] += 1
        else:
            review = "**not reviewed**"
            problems += 1
            tally["not reviewed"] += 1
        body += [f"### `{name}`", "", "```diff", diff, "```", "", f"Review: {review}", ""]
    lines += ["", "## Survivors", ""]
    lines += [
        f"{len(survivors)} survivors: "
        + (", ".join(f"{n} {k}" for k, n in sorted(tally.items())) or "none")
        + f". Survivors of an earlier run killed by a test added for them: {len(killed_by_new)} (listed below).",
        "",
        *body,
    ]
    lines += ["## Killed by new tests", ""]
    for name, text in killed_by_new:
        state = status(code_of.get(name, -1)) if name in code_of else "unknown mutant"
        lines.append(f"- `{name}` ({state}): {text[len(KILLED_BY_NEW_TEST) :].strip(' :')}")
    if not killed_by_new:
        lines.append("none")
    return "\n".join(lines) + "\n", problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="mutmut run first (only the unchecked mutants)")
    parser.add_argument("--rerun", nargs="+", metavar="MUTANT", help="mutmut run these mutants (globs) again")
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args(argv)
    config = mutmut_config()
    if args.run or args.rerun:
        rc = run_mutmut(args.rerun or [], args.max_children)
        if rc not in (0, 1):
            print(f"mutmut run exited {rc}", file=sys.stderr)
            return 2
    reviews = yaml.safe_load(REVIEWS.read_text()) if REVIEWS.is_file() else {}
    text, problems = render(config, load_results(list(config["only_mutate"])), reviews or {})
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    print(f"wrote {REPORT.relative_to(ROOT)}" + (f" ({problems} problems: see it)" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
