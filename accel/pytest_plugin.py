"""pytest plugin: ``pytest --accel-profile profiles/ci.yaml`` turns each sweep cell into a test item.

Registered through the ``pytest11`` entry point, active only when ``--accel-profile`` or
``--accel-results`` is given; the cells are added to what pytest collected (a project's own tests too, from its
``testpaths``), or replace it with ``--accel-only``. Items are planned at collection time without running anything; the
first item to run measures the whole profile once (in ``--accel-out``, default a temporary directory) and
judges it once with ``omni-accel gate``'s own judgement (``accel.gate.judge_records``); every item (the
baselines and noise floors too) reports its cell's verdict, so the two cannot disagree. A failure
shows the measured and required values; a cell that did not run (unsupported here or on the model) or
failed exactly as the claims say is skipped with its reason, never passed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr

    from accel.gate import CellVerdict, GateReport
    from accel.profile import Profile


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("omni-accel", "omni-accel parity gates")
    group.addoption("--accel-profile", metavar="PROFILE", help="Run this sweep profile; one test item per cell.")
    group.addoption("--accel-results", metavar="RESULTS", help="Gate an existing run directory or results.jsonl.")
    group.addoption("--accel-out", metavar="DIR", help="Run directory for --accel-profile (default: a temp dir).")
    group.addoption("--accel-thresholds", metavar="FILE", help="Thresholds YAML (default: feature_matrix/).")
    group.addoption("--accel-claims", metavar="FILE", help="Claims YAML (default: feature_matrix/).")
    group.addoption("--accel-baseline", metavar="FILE", help="Performance baseline YAML.")
    group.addoption(
        "--accel-strict",
        action="store_true",
        help="Fail the session when a variant was skipped or no variant was qualified (as `omni-accel gate --strict`).",
    )
    group.addoption(
        "--accel-only",
        action="store_true",
        help="Run the cells only: deselect every other test pytest collected (its testpaths, say).",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("accel_profile") or config.getoption("accel_results") or _pasted_source(config):
        from accel.errors import AccelError

        try:
            cells = AccelCells(config)
        except AccelError as error:
            # bad input (a corrupt, non-UTF-8 or missing results file, a bad profile or thresholds file) is a usage
            # error: pytest prints "ERROR: <file>: <what is wrong>" and exits 4, as omni-accel exits 2, without
            # the INTERNALERROR traceback (exit 3) an exception here gives
            raise pytest.UsageError(str(error)) from error
        config.pluginmanager.register(cells, "omni-accel-cells")


class AccelCells:
    """Plans the items, runs the sweep once on demand and keeps the gate data."""

    def __init__(self, config: pytest.Config) -> None:
        from accel.gate import load_gate_data

        self.config = config
        option = config.getoption
        self.data = load_gate_data(
            _path(option("accel_thresholds")), _path(option("accel_claims")), _path(option("accel_baseline"))
        )
        self.records: list[dict[str, Any]] | None = None
        self.report: GateReport | None = None
        self.profile: Profile | None = None  # None when the records were read (--accel-results)
        self.notice: str | None = None
        self.collected = False  # True once pytest collected the source file itself (a path or node id given)
        self.selected: list[tuple[str, str]] | None = None  # the cells pytest kept (a node id, -k), once collected
        results = option("accel_results")
        profile = option("accel_profile")
        if not results and not profile:  # a pasted node id alone: "pytest profiles/ci.yaml::accel[sd15/vae-tile]"
            pasted = _pasted_source(config)
            assert pasted is not None  # pytest_configure registers the cells only with a source
            results, profile = (pasted, None) if pasted.endswith(".jsonl") else (None, pasted)
        self.source = str(results or profile)
        # a run directory's cells come from its results file: "runs/x/results.jsonl::accel[...]", a node id
        # pytest can take back as an argument (it refuses "::" after a directory)
        if results and Path(results).is_dir():
            self.source = str(Path(results) / "results.jsonl")
        if results:
            from accel.results import load_results
            from accel.sweep.runner import run_measure, unmeasured_cells

            loaded = load_results(results)
            self.records = loaded.records
            self.notice = loaded.cut_notice()  # a last line cut short by a crash: not a record, said in the header
            run_dir = Path(results) if Path(results).is_dir() else Path(results).parent
            # as `omni-accel gate` does: a cell the run planned (cells.planned.json, profile.resolved.yaml) but
            # never recorded (an interrupted sweep) is an item, and fails as never measured
            self.unmeasured: list[tuple[str, str]] = unmeasured_cells(run_dir, self.records)
            self.run = run_measure(run_dir)  # what the run's profile asked of every speed claim
        else:
            from accel.gate.judge import RunMeasure
            from accel.measure.speedup import noise_band
            from accel.profile import load_profile

            self.profile_path = str(profile)
            self.profile = load_profile(self.profile_path)
            if option("accel_out"):
                from accel.outputs import check_run_dir

                check_run_dir(Path(option("accel_out")), "--accel-out", self.profile_path)
            self.run_dir = Path(option("accel_out") or tempfile.mkdtemp(prefix="omni-accel-"))
            measure = self.profile.measure
            self.run = RunMeasure(noise_band(measure.min_effect), measure.confidence)

    def cell_keys(self) -> list[tuple[str, str]]:
        if self.records is not None:
            return [(r["model"], r["variant"]) for r in self.records] + getattr(self, "unmeasured", [])
        from accel.sweep.runner import plan

        assert self.profile is not None  # no records: a profile was loaded
        return [(c.model.name, c.variant) for c in plan(self.profile, self.run_dir)]

    def measured(self) -> list[dict[str, Any]]:
        if self.records is None:
            from accel.sweep.runner import run_sweep

            assert self.profile is not None  # no records: a profile was loaded
            profile = _narrowed(self.profile, self.selected) if self.selected is not None else self.profile
            self.records = run_sweep(profile, self.profile_path, self.run_dir, show_progress=False).records
        return self.records

    def verdict(self, cell: tuple[str, str]) -> CellVerdict:
        """The gate's verdict on ``cell``: the whole run judged once, as ``omni-accel gate`` judges it (a planned
        cell without a record fails as never measured)."""
        return next(v for v in self.judged().verdicts if (v.model, v.variant) == cell)

    def judged(self) -> GateReport:
        """The whole run judged once (measuring it first under --accel-profile)."""
        if self.report is None:
            from accel.gate import judge_records

            records = self.measured()
            recorded = {(r["model"], r["variant"]) for r in records}
            # a profile measured for the selected cells only: the cells left out were not asked for, not lost
            planned = self.selected if self.profile is not None and self.selected is not None else self.cell_keys()
            unmeasured = [key for key in planned if key not in recorded]
            self.report = judge_records(records, self.data, unmeasured, self.run)
        return self.report

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A run that measured nothing (every record unsupported here, or none) fails, as ``omni-accel gate``
        fails it, although each item is a skip: the gate's exit status and the plugin's agree. Judged only when
        there are records (--accel-results, or a sweep an item ran): a session that ran no item measures
        nothing itself."""
        if self.records is None:
            return
        reason = self._failure()
        if reason and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _failure(self) -> str | None:
        """Why the session fails although no item did: nothing measured, or (``--accel-strict``) a variant
        skipped or none qualified."""
        report = self.judged()
        if report.nothing_measured:
            return report.nothing_measured
        return report.strict_problem() if self.config.getoption("accel_strict") else None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.records is None:
            return
        failure = self._failure()
        if failure:
            terminalreporter.write_line(f"omni-accel: FAILED: {failure}", red=True)
        elif self.judged().nothing_qualified():
            terminalreporter.write_line(f"omni-accel: {self.judged().nothing_qualified()}", yellow=True)

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> AccelFile | None:
        """The profile's (or results') file as a collector of the cells, when pytest collects that file: given as
        an argument, or as a pasted node id (``pytest 'profiles/ci.yaml::accel[sd15/vae-tile]'`` re-runs that
        cell). Only that one file: no other YAML or JSONL file is ever collected."""
        if file_path.resolve() != Path(self.source).resolve():
            return None
        self.collected = True
        return AccelFile.from_parent(parent, path=file_path, cells=self)

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if not self.collected:
            # The source file was not among what pytest collected (its testpaths, say): the cells are added. The
            # node id carries the profile's (or results') path as pytest would name the file (relative to the
            # rootdir, else as given): "FAILED profiles/ci.yaml::accel[sd15/vae-tile]", not "::accel[...]", so a
            # failure names where its cell comes from, -k selects it, and the node id pasted back re-runs it.
            source = _node_path(self.source, self.config.rootpath)
            for model, variant in self.cell_keys():
                name = f"accel[{model}/{variant}]"
                items.append(
                    AccelItem.from_parent(
                        session, name=name, nodeid=f"{source}::{name}", cells=self, cell=(model, variant)
                    )
                )
        if self.config.getoption("accel_only"):
            others = [item for item in items if not isinstance(item, AccelItem)]
            if others:
                self.config.hook.pytest_deselected(items=others)
                items[:] = [item for item in items if isinstance(item, AccelItem)]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The cells pytest kept (after node ids, ``-k`` and ``--deselect``): a profile measures only those (with
        their models' baselines), so a re-run of one failed cell measures that cell, not the whole sweep."""
        kept = [item.cell for item in session.items if isinstance(item, AccelItem)]
        if len(kept) < len(self.cell_keys()):
            self.selected = kept

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"omni-accel: gating {self.source}", *([self.notice] if self.notice else [])]


class AccelFile(pytest.File):
    """The profile or results file given to pytest: its children are the cells, named ``accel[MODEL/VARIANT]``."""

    def __init__(self, *, cells: AccelCells, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cells = cells

    def collect(self) -> list[AccelItem]:
        """One item per cell, as ``--accel-profile``/``--accel-results`` plans them."""
        return [
            AccelItem.from_parent(self, name=f"accel[{model}/{variant}]", cells=self.cells, cell=(model, variant))
            for model, variant in self.cells.cell_keys()
        ]


class AccelGateFailure(Exception):
    """A cell failed the gate; the message holds the measured and required values."""


class AccelItem(pytest.Item):
    """One sweep cell as a test item."""

    def __init__(self, *, cells: AccelCells, cell: tuple[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cells = cells
        self.cell = cell

    def runtest(self) -> None:
        from accel.gate import FAIL, SKIP

        verdict = self.cells.verdict(self.cell)
        if verdict.outcome == SKIP:
            pytest.skip(verdict.message())
        if verdict.outcome == FAIL:
            raise AccelGateFailure(verdict.message())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, AccelGateFailure):
            return f"{self.cell[0]}/{self.cell[1]} failed the gate:\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return self.cells.source, 0, self.name


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _node_path(source: str, rootpath: Path) -> str:
    """``source`` as pytest names a file in a node id: relative to the rootdir, or as given outside it."""
    import os

    absolute = Path(os.path.abspath(source))
    return absolute.relative_to(rootpath).as_posix() if absolute.is_relative_to(rootpath) else source


def _pasted_source(config: pytest.Config) -> str | None:
    """The file of the first cell node id given as an argument (``profiles/ci.yaml::accel[sd15/vae-tile]``), or
    None: a pasted node id selects its cell without ``--accel-profile``/``--accel-results`` (a ``.jsonl`` file
    is gated as results, anything else run as a profile). A plain YAML argument never activates the plugin."""
    for arg in config.args:
        path, _, names = arg.partition("::")
        if names.split("::")[0].startswith("accel["):
            return path
    return None


def _narrowed(profile: Profile, cells: list[tuple[str, str]]) -> Profile:
    """``profile`` with only the models and variants of ``cells`` (each model's baseline and noise floor stay)."""
    from dataclasses import replace

    models = {model for model, _ in cells}
    variants = {variant for _, variant in cells}
    plan = profile.variant_plan()
    narrowed = profile.model_copy(update={"models": [m for m in profile.models if m.name in models]})
    narrowed._variant_plan = replace(plan, variants=[v for v in plan.variants if v.name in variants])
    return narrowed
