"""The ``omni-accel`` command line. Heavy imports happen inside commands so ``--help`` stays instant.

Exit codes: 0 ok, 1 a gate failed, 2 bad input or something unavailable (one line on stderr, no
traceback; ``-v`` shows library logs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from accel.errors import AccelError, Interrupted

EXECUTORS = ("process", "inline", "ray")

app = typer.Typer(
    name="omni-accel",
    help="Qualify diffusion acceleration features: does it work, how much faster, what does it cost in quality?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
engines_app = typer.Typer(help="External engines (vLLM-Omni) in their own Python environments.", no_args_is_help=True)
zoo_app = typer.Typer(
    help="The offline zoo of tiny diffusers pipelines (random weights; mini-flux and mini-wan trained by the project).",
    no_args_is_help=True,
)
app.add_typer(zoo_app, name="zoo")
app.add_typer(engines_app, name="engines")


def _setup_logging(verbose: bool) -> None:
    os.environ["OMNI_ACCEL_VERBOSE"] = "1" if verbose else "0"
    from accel.sweep.quiet import quiet_libraries

    quiet_libraries(verbose)  # imports nothing: the libraries read its settings when they are imported


@app.command()
def sweep(
    profile: Path | None = typer.Argument(None, help="Profile YAML; default: the embedded quickstart."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Run directory; default: runs/<profile name>-<date>-<time>."
    ),
    executor: str | None = typer.Option(
        None, "--executor", help="process (isolated, default), inline (fast, same process) or ray."
    ),
    resume: Path | None = typer.Option(
        None, "--resume", help="Continue this run directory: skip measured cells, refuse a changed profile."
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster address (default: local)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs."),
) -> None:
    """Run the baseline and every variant of a profile; write results, images and report.md."""
    import time

    from accel.errors import ConfigError
    from accel.outputs import check_run_dir
    from accel.profile import default_profile_path, load_profile
    from accel.sweep.resume import RESOLVED_PROFILE_FILE

    if executor is not None and executor not in EXECUTORS:
        raise ConfigError(f"--executor: unknown executor '{executor}'. Allowed: {', '.join(EXECUTORS)}")
    if resume is not None and out is not None and out != resume:
        raise ConfigError("--out and --resume name different directories; --resume continues its own directory")
    if resume is not None and profile is None:
        path = resume / RESOLVED_PROFILE_FILE
        if not path.is_file():
            raise ConfigError(f"{resume}: not a run directory (no {RESOLVED_PROFILE_FILE}); nothing to resume")
    else:
        path = profile or default_profile_path()
    loaded = load_profile(path)  # before the heavy imports: a bad profile is refused in well under a second
    _setup_logging(verbose)
    run_dir = resume or out or Path("runs") / f"{loaded.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    check_run_dir(run_dir, "--resume" if resume is not None else "--out", path, resume=resume is not None)
    from accel.sweep.runner import failed_baselines, failed_models, run_sweep

    result = run_sweep(
        loaded, str(path), run_dir, executor=executor, resume=resume is not None, ray_address=ray_address
    )
    failed = [r for r in result.records if r["status"] == "failed"]
    earlier = f" ({result.resumed} from an earlier run)" if result.resumed else ""
    typer.echo(f"{len(result.records)} cells{earlier} in {result.wall_s:.1f} s, {len(failed)} failed")
    typer.echo(f"results: {result.run_dir / 'results.jsonl'}")
    typer.echo(f"report:  {result.report_path}")
    notice = _sampling_notice(loaded)  # after the run: bad input stays one line, and this is what the claims show
    if notice:
        typer.echo(f"note: {path}: {notice}", err=True)
    dead = failed_models(result.records)
    if dead:
        first = "; ".join(f"{model}: {error[:160]}" for model, error in dead.items())
        typer.echo(
            f"error: every cell of {', '.join(sorted(dead))} failed, nothing was measured there ({first})", err=True
        )
        raise typer.Exit(1)
    lost = failed_baselines(result.records)
    if lost:
        first = "; ".join(f"{model}: {error[:160]}" for model, error in lost.items())
        typer.echo(
            f"error: the baseline of {', '.join(sorted(lost))} did not run, so no variant of it has parity or a "
            f"speedup and the gate fails the run ({first})",
            err=True,
        )
        raise typer.Exit(1)


@app.command()
def plan(profile: Path = typer.Argument(..., help="Profile YAML.")) -> None:
    """Print the cells a sweep of PROFILE would run, without running anything."""
    from accel.profile import load_profile
    from accel.sweep.checks import check_inputs
    from accel.sweep.runner import plan as plan_cells

    loaded = load_profile(profile)
    # What the sweep would refuse before its first cell, for what is on this machine (local checkpoints,
    # built zoo entries): a broken checkpoint or a misspelt component is found here, not cell by cell.
    _setup_logging(False)  # the checks import torch and diffusers: keep their import-time logs quiet
    check_inputs(loaded, str(profile), build=False)
    cells = plan_cells(loaded, Path("."))
    notice = _sampling_notice(loaded)
    if notice:
        typer.echo(f"note: {profile}: {notice}", err=True)
    for cell in cells:
        features = ", ".join(f"{k}={v}" for k, v in cell.features.items()) or "(none)"
        refused = _refused_here(cell)
        typer.echo(f"{cell.key:45} {features}" + (f"  [refused here: {refused}]" if refused else ""))
    typer.echo(f"{len(cells)} cells: {len(loaded.models)} model(s) x {len(cells) // len(loaded.models)} configurations")
    result = loaded.variant_plan().pairwise  # planned once, when the profile was loaded
    if result is not None:
        typer.echo(
            f"pairwise: {len(result.variants)} variants cover {len(result.covered_pairs)} feature pairs and every "
            f"option value (the full product has {result.full_product} variants)"
        )
        for pair, reason in sorted(result.skipped_pairs.items(), key=lambda kv: sorted(kv[0])):
            typer.echo(f"skipped pair {' + '.join(sorted(pair))}: {reason}")


@app.command()
def calibrate(
    profile: Path = typer.Argument(..., help="Profile YAML: the model and the workload (prompts, seeds, steps)."),
    model: str = typer.Option(..., "--model", help="The name of one of the profile's models."),
    out: Path | None = typer.Option(None, "--out", help="Calibration YAML; default: calibration/<model>.yaml"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs."),
) -> None:
    """Calibrate the caches on MODEL: TeaCache's polynomial, MagCache's ratios, every threshold's signal range."""
    from accel.calibrate import calibrate as run_calibration

    _setup_logging(verbose)
    calibration = run_calibration(profile, model, out)
    for name, section in calibration.denoisers.items():
        typer.echo(f"{name} ({section.transformer_class}):")
        fit = section.tea_cache
        if fit is not None:
            typer.echo(
                f"  tea_cache: degree {fit.degree} on {fit.points} points, R² {fit.r2:.4f}, residual rms "
                f"{fit.residual_rms:.3g} (max {fit.residual_max:.3g}); rescaled change {fit.rescaled_change.line()}"
            )
        if section.mag_cache is not None:
            typer.echo(
                f"  mag_cache: {len(section.mag_cache.mag_ratios)} ratios from {section.mag_cache.runs} runs; "
                f"|1 - ratio| {section.mag_cache.error.line()}"
            )
        for feature, signal in (("first_block_cache", section.first_block_cache), ("cache_dit", section.cache_dit)):
            if signal is not None:
                typer.echo(f"  {feature}: {signal.signal} {signal.observed.line()}")
        for feature, reason in section.not_calibrated.items():
            typer.echo(f"  {feature}: not calibrated: {reason}")
    typer.echo(f"calibration: {calibration.command.rsplit('--out ', 1)[-1]}")


def _refused_here(cell: Any) -> str | None:
    """Why a feature of ``cell`` cannot run on this machine (its own ``probe``: device, installed packages), as
    the sweep would record the cell unsupported; None when every feature can. A pipeline can still refuse."""
    from accel.features import FEATURES
    from accel.targets.adapter import resolve_device

    device = resolve_device(cell.model.device)
    for name, config in cell.configs.items():
        support = FEATURES[name].probe(device, config)
        if not support.supported:
            return f"{name}: {support.reason}"
        inert = _inert(name, config, cell.workload)
        if inert:
            return f"{name}: {inert}"
    return None


def _inert(name: str, config: Any, workload: Any) -> str | None:
    """The inert verdict of a cache threshold against the calibration its options name, on the cell's workload
    (None: in range, no calibration, or one made for another workload): what the cell's check refuses before
    anything is timed."""
    from accel.calibrate import THRESHOLD_OPTIONS, threshold_status

    path = getattr(config, "calibration", None)
    if path is None or name not in THRESHOLD_OPTIONS:
        return None
    mag = {key: getattr(config, key) for key in ("max_skip_steps", "retention_ratio") if hasattr(config, key)}
    threshold = float(getattr(config, THRESHOLD_OPTIONS[name]))
    status = threshold_status(path, name, threshold, **mag, workload=workload.model_dump())
    return status.verdict if status.inert else None


def _sampling_notice(profile: Any) -> str | None:
    """``measure``'s pairs too few for any claim beside the noise floor (``sampling_notice``), or None."""
    from accel.measure.speedup import sampling_notice

    m = profile.measure
    if not m.noise_floor or m.timing != "interleaved":
        return None
    return sampling_notice(m.pairs, m.max_pairs, m.confidence)


def _read_records(path: Path) -> list[dict[str, Any]]:
    """A run's records, as gate and table read them; a last line cut short is noted on stderr and skipped."""
    from accel.results import load_results
    from accel.sweep.runner import in_planned_order

    results = load_results(path)
    notice = results.cut_notice()
    if notice:
        typer.echo(notice, err=True)
    return in_planned_order(path if path.is_dir() else path.parent, results.records)


def _refuse_directory(path: Path, option: str) -> None:
    from accel.errors import ConfigError

    if path.is_dir():
        raise ConfigError(f"{path}: {option}: is a directory; give the path of the file to write")


def _check_outputs(outputs: list[tuple[Path, str]], run_dir: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an output that resolves to the run's own files or an input (``accel.outputs``), before any work."""
    from accel.outputs import Protected, check_outputs

    protected = Protected()
    for what, path in inputs.items():
        protected.add_input(path, what)
    protected.add_run(run_dir)
    check_outputs(outputs, protected)


def _write_output(path: Path, text: str, option: str, what: str) -> None:
    """Write a report file; a directory or an unwritable path is bad input (exit 2), not a traceback."""
    from accel.errors import ConfigError

    _refuse_directory(path, option)
    try:
        path.write_text(text)
    except OSError as error:
        raise ConfigError(f"{path}: {option}: cannot write {what}: {error.strerror or error}") from error


@app.command()
def gate(
    results: Path = typer.Argument(..., help="A run directory or its results.jsonl."),
    baseline: Path | None = typer.Option(None, "--baseline", help="Performance baseline YAML (per device)."),
    thresholds: Path | None = typer.Option(None, "--thresholds", help="Default: feature_matrix/thresholds.yaml"),
    claims: Path | None = typer.Option(None, "--claims", help="Default: feature_matrix/claims.yaml"),
    junit: Path | None = typer.Option(None, "--junit", help="JUnit XML; default: RUN_DIR/gate.junit.xml"),
    summary: Path | None = typer.Option(None, "--summary", help="Markdown summary; default: RUN_DIR/gate.md"),
    strict: bool = typer.Option(
        False, "--strict", help="Also fail (exit 1) when a variant was skipped or no variant was qualified."
    ),
) -> None:
    """Check every cell: parity, engagement, claimed support, performance. Exit 1 when a gate fails."""
    from accel.gate import gate_records, junit_xml, load_gate_data, markdown_summary
    from accel.sweep.runner import run_measure, unmeasured_cells

    run_dir = results if results.is_dir() else results.parent
    junit_path, summary_path = junit or run_dir / "gate.junit.xml", summary or run_dir / "gate.md"
    _check_outputs(
        [(junit_path, "--junit"), (summary_path, "--summary")],
        run_dir,
        {"the results": results, "the baseline": baseline, "the thresholds": thresholds, "the claims": claims},
    )
    for path, option in ((junit_path, "--junit"), (summary_path, "--summary")):
        _refuse_directory(path, option)  # before any work: the gate writes nothing when one cannot be written
    records = _read_records(results)
    data = load_gate_data(thresholds, claims, baseline)
    run = run_measure(run_dir)
    report = gate_records(records, data, unmeasured_cells(run_dir, records), run)
    if run is None and any(r.get("speedup_ci") for r in records):
        report.notices.append(
            f"{run_dir}: no profile.resolved.yaml beside the results: each speed claim is held to its noise "
            "floor's band and confidence only, not to what the run's profile asked (gate the run directory)"
        )
    text = markdown_summary(report, strict=strict)
    _write_output(junit_path, junit_xml(report), "--junit", "the JUnit report")
    _write_output(summary_path, text, "--summary", "the summary")
    typer.echo(text)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
    if strict and report.strict_problem():
        raise typer.Exit(1)


@app.command()
def table(
    results: Path = typer.Argument(..., help="A run directory or its results.jsonl."),
    inject: list[Path] = typer.Option([], "--inject", help="Markdown file(s) whose omni-accel blocks to fill."),
    check: bool = typer.Option(False, "--check", help="With --inject: exit 1 when a block is stale; write nothing."),
    claims: Path | None = typer.Option(None, "--claims", help="Default: feature_matrix/claims.yaml"),
    thresholds: Path | None = typer.Option(None, "--thresholds", help="Default: feature_matrix/thresholds.yaml"),
    published: Path | None = typer.Option(
        None, "--published", help="Published claims to cross-check; default: feature_matrix/published_claims.yaml"
    ),
) -> None:
    """Render the support matrix, compatibility matrix and performance tables as markdown."""
    from accel.gate import load_gate_data
    from accel.report.inject import inject as inject_text
    from accel.report.inject import read_injectable, write_injected
    from accel.report.published import load_published_claims
    from accel.report.tables import render_tables
    from accel.sweep.runner import run_measure

    run_dir = results if results.is_dir() else results.parent
    inputs = {
        "the results": results,
        "the thresholds": thresholds,
        "the claims": claims,
        "the published claims": published,
    }
    _check_outputs([(path, "--inject") for path in inject], run_dir, inputs)
    texts = {path: read_injectable(path) for path in inject}  # checked before the run is read
    claimed = load_published_claims(published)
    data = load_gate_data(thresholds, claims)
    tables = render_tables(_read_records(results), data, run_measure(run_dir), claimed)
    if not inject:
        for name, text in tables.items():
            typer.echo(f"<!-- omni-accel:begin {name} -->\n{text}<!-- omni-accel:end {name} -->\n")
        return
    # Every file filled in memory first: a bad block in the second file leaves the first unwritten too.
    filled = {path: inject_text(text, tables, str(path)) for path, text in texts.items()}
    stale = []
    for path, (new_text, changed) in filled.items():
        if changed and not check:
            write_injected(path, new_text)
        stale += [f"{path}: {name}" for name in changed]
        verb = "stale" if check else "updated"
        typer.echo(f"{path}: {verb}: {', '.join(changed) or 'none'}")
    if check and stale:
        raise typer.Exit(1)


@app.command()
def tune(
    profile: Path = typer.Argument(..., help="Profile YAML: models, workload, variants, optional tune: section."),
    out: Path = typer.Option(..., "--out", "-o", help="Tune directory (a run directory the gate and tables read)."),
    model: str | None = typer.Option(None, "--model", help="The model to tune; default: the profile's only one."),
    objective: str | None = typer.Option(None, "--objective", help="latency (default) or memory."),
    budget_cells: int | None = typer.Option(None, "--budget-cells", min=1, help="At most this many variant cells."),
    budget_min: float | None = typer.Option(None, "--budget-min", min=0.1, help="At most this many wall minutes."),
    seed: int = typer.Option(0, "--seed", min=0, help="Orders the search: held-out prompts, validation seeds."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the tune in --out: finished rounds are read back (charged their recorded time); a finished "
        "tune is only reported again.",
    ),
    executor: str | None = typer.Option(None, "--executor", help="process (default), inline or ray."),
    calibration: Path | None = typer.Option(
        None,
        "--calibration",
        help="The model's calibration file (omni-accel calibrate): thresholds searched "
        "inside the signal range it observed, instead of each cache's documented default range.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs."),
) -> None:
    """Search for the fastest (or leanest) configuration that holds the constraints; write recommended.yaml."""
    from accel.errors import ConfigError
    from accel.outputs import check_files, check_run_dir
    from accel.profile import load_profile
    from accel.tune.export import RECOMMENDED_FILE
    from accel.tune.report import PARETO_PNG, TUNE_JSON, TUNE_MD
    from accel.tune.rounds import ROUNDS_DIR

    tune_outputs = (RECOMMENDED_FILE, TUNE_MD, TUNE_JSON, PARETO_PNG, ROUNDS_DIR)
    if executor is not None and executor not in EXECUTORS:
        raise ConfigError(f"--executor: unknown executor '{executor}'. Allowed: {', '.join(EXECUTORS)}")
    if budget_cells is not None and budget_min is not None:
        raise ConfigError("--budget-cells and --budget-min: give one budget")
    loaded = load_profile(profile)
    _setup_logging(verbose)
    check_run_dir(out, "--out", profile, resume=resume)
    inputs = {"the profile being tuned": profile, "the --calibration file": calibration}
    check_files(out, tune_outputs, "--out", inputs)  # recommended.yaml, tune.md... never over an input
    from accel.tune import tune as run_tune

    observed = None
    if calibration is not None:
        observed = _tune_ranges(loaded, model, calibration)
    try:
        result = run_tune(
            loaded, out, model=model, objective=objective, budget_cells=budget_cells, budget_min=budget_min,
            seed=seed, resume=resume, executor=executor, observed=observed,
        )  # fmt: skip
    except Interrupted as error:  # a round's sweep names its own --resume: the tune's continues every round
        raise Interrupted(tune_interrupted(str(error), profile, out)) from None
    rec = result.recommended
    if rec is None:
        why = "; ".join(result.search.notes) or "no configuration held the constraints"
        typer.echo(f"nothing recommended: {why}; see {result.report_path}")
        raise typer.Exit(1)
    shown = f"{rec.value:.2f}x" if rec.value is not None else "-"
    if rec.interval is not None:
        shown += f" [{rec.interval[0]:.2f}-{rec.interval[1]:.2f}]"
    typer.echo(f"recommended: {rec.candidate.name} {shown} on held-out prompts ({rec.round})")
    typer.echo(f"profile: {result.recommended_path}")
    typer.echo(f"report:  {result.report_path}")


def _tune_ranges(loaded: Any, model: str | None, calibration: Path) -> dict[str, tuple[float, float]]:
    """The calibrated signal ranges the tune searches in, none where the calibration was made for another
    workload than the tuned model's (said on stderr: the documented default ranges apply, nothing is inert)."""
    from accel.calibrate import load_calibration, observed_ranges
    from accel.calibration.workload import workload_difference

    loaded_calibration = load_calibration(str(calibration))  # a bad file: one line naming it (ConfigError)
    chosen = [spec for spec in loaded.models if model is None or spec.name == model]
    workload = loaded.workload_for(chosen[0]).model_dump() if len(chosen) == 1 else None
    other = workload_difference(loaded_calibration, workload)
    if other is not None:
        typer.echo(f"note: --calibration {calibration}: {other}; thresholds searched in the default ranges", err=True)
    return observed_ranges(loaded_calibration, workload)


def tune_interrupted(message: str, profile: Path, out: Path) -> str:
    """An interrupted tune's message: what its round kept (the sweep's words) and the command that continues the
    tune, not the round's sweep (a sweep --resume of one round would leave the search behind)."""
    kept = message.split("; continue with", 1)[0]
    return f"{kept}; continue the tune with 'omni-accel tune {profile} --out {out} --resume' (and the same options)"


@engines_app.command("create")
def engines_create(
    name: str = typer.Argument(..., help="Engine: vllm-omni."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when present."),
) -> None:
    """Build and validate the engine's environment under the user cache dir (a few minutes, ~4 GB)."""
    from accel.engines import vllm_omni
    from accel.errors import ConfigError

    if name != vllm_omni.ENGINE:
        raise ConfigError(f"unknown engine '{name}'. Allowed: {vllm_omni.ENGINE}")
    path = vllm_omni.create_environment(force=force, log=lambda line: typer.echo(f"$ {line}"))
    typer.echo(f"{name}: {path}")


@engines_app.command("list")
def engines_list() -> None:
    """Show the engines omni-accel knows and whether each environment is installed."""
    from accel.engines import vllm_omni

    info = vllm_omni.environment_info()
    if info is None:
        typer.echo(f"{vllm_omni.ENGINE} {vllm_omni.VERSION}: not installed ({vllm_omni.CREATE_COMMAND})")
    else:
        details = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("engine", "version"))
        typer.echo(f"{vllm_omni.ENGINE} {vllm_omni.VERSION}: {vllm_omni.environment_dir()} ({details})")


@zoo_app.command("build")
def zoo_build(
    names: list[str] | None = typer.Argument(None, help="Entries to build; default: all."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when already built."),
) -> None:
    """Build (idempotently) and save zoo pipelines; prints each checkpoint directory.

    An entry whose classes this diffusers/transformers lacks is reported unavailable, naming them, and
    the others are still built; the exit status is then 2.
    """
    from accel import zoo
    from accel.errors import UnavailableError

    _setup_logging(False)
    unavailable = []
    for name in names or list(zoo.ZOO):
        zoo.get_entry(name)
        try:
            typer.echo(f"{name}: {zoo.build(name, force=force)}")
        except UnavailableError as error:
            unavailable.append(name)
            typer.echo(f"{name}: {error}", err=True)
    if unavailable:
        raise typer.Exit(2)


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo entries, whether each is built and where."""
    from rich.console import Console
    from rich.table import Table

    from accel import zoo

    table = Table("name", "family", "pipeline", "modality", "inputs", "built", "description")
    for row in zoo.list_entries():
        built = "yes" if row["built"] else "no" if row["available"] else "unavailable here"
        table.add_row(
            row["name"],
            row["family"],
            row["pipeline_class"],
            row["modality"],
            " + ".join(row["inputs"]),
            built,
            row["description"],
        )
    Console(width=240).print(table)  # 31 entries, seven columns: never truncate a name
    typer.echo(f"zoo directory: {zoo.zoo_root()}")


@zoo_app.command("train")
def zoo_train(
    name: str = typer.Argument(..., help="A trainable zoo entry (mini-flux, mini-wan)."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Where to write weights, manifest and log; default: <zoo dir>/<name>-training."
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help="Fix the torch thread count (>= 1); default: 1 or 2, re-chosen as the load changes.",
    ),
) -> None:
    """Train a zoo entry from its seed (mini-flux: text encoders, VAE, transformer; mini-wan: text encoder, VAE,
    both experts); compare with committed losses."""
    from accel import zoo
    from accel.errors import ConfigError
    from accel.outputs import check_training_dir
    from accel.zoo import mini_flux, mini_wan

    _setup_logging(False)
    entry = zoo.get_entry(name)
    if not entry.trained:
        trainable = ", ".join(n for n, e in zoo.ZOO.items() if e.trained)
        raise ConfigError(f"zoo train: '{name}' has random weights, nothing to train. Trainable: {trainable}")
    target = out or zoo.zoo_root() / f"{name}-training"
    model: Any = mini_wan if name == mini_wan.NAME else mini_flux
    check_training_dir(target, "--out", model.WEIGHTS_DIR.parent)  # every trained entry's committed weights
    typer.echo(f"training {name} into {target} (log: {target / model.LOG_FILE})")
    manifest = model.train(target, threads=threads)
    committed = model.read_manifest()["final_losses"] if model.weights_hash() else {}
    for part, loss in manifest["final_losses"].items():
        reference = f" (committed: {committed[part]:.5f})" if part in committed else ""
        typer.echo(f"{part}: final loss {loss:.5f}{reference}")
    typer.echo(f"total {manifest['seconds']['total'] / 60:.1f} min; weights sha256 {manifest['sha256'][:16]}")


@zoo_app.command("path")
def zoo_path(
    name: str = typer.Argument(..., help="A zoo entry."),
    allow_unbuilt: bool = typer.Option(
        False, "--allow-unbuilt", help="Print where the entry would be built even when it is not built yet."
    ),
) -> None:
    """Print the checkpoint directory of a built zoo entry; exit 2 when it is not built (unless --allow-unbuilt)."""
    from accel import zoo
    from accel.errors import UnavailableError

    path = zoo.entry_path(name)
    if zoo.is_built(name):
        # The checks every use makes (committed weights, the directory's files and marker): never a path that
        # loading through the harness would refuse. Built already, so nothing is built here.
        typer.echo(str(zoo.build(name)))
        return
    if not allow_unbuilt:
        raise UnavailableError(
            f"zoo path: '{name}' is not built yet (it would be {path}): run `omni-accel zoo build {name}` first, "
            "or pass --allow-unbuilt to print where it would be built"
        )
    typer.echo(str(path))
    typer.echo(f"note: {path} is not built yet: run `omni-accel zoo build {name}` to build it", err=True)


@app.command()
def features(
    source: str | None = typer.Argument(
        None,
        help="A zoo name (tiny-flux, ...), a local checkpoint directory or a synthetic: source (built on the meta "
        "device, shapes only): which features can run on its pipeline, and who refuses the others. Default: every "
        "feature on this machine, no pipeline.",
    ),
    as_json: bool = typer.Option(False, "--json", help="With SOURCE: print the verdicts as JSON."),
) -> None:
    """List every feature and option with its class and whether it can run on this machine, or on SOURCE's
    pipeline (loaded once on the CPU; nothing applied)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from accel.features import FEATURES
    from accel.targets.adapter import resolve_device

    device = resolve_device("auto")
    if source is not None:
        _features_on_source(source, device, as_json)
        return
    if as_json:
        raise typer.BadParameter("--json needs a SOURCE (omni-accel features tiny-flux --json)")
    table = Table("feature", "family", "class", "option", f"on this machine ({device})", "options")
    for feature in FEATURES.values():
        all_options = ", ".join(feature.config_cls.model_fields) or "–"
        values = feature.option_values() or [None]
        for value in values:
            config = feature.parse_options(value)
            support = feature.probe(device, config)
            option = f"{feature.primary_option}={value}" if value is not None else "(defaults)"
            verdict = "supported" if support.supported else support.reason
            row = (feature.name, feature.family, feature.feature_class_for(config).value, option, verdict, all_options)
            table.add_row(*(escape(str(cell)) for cell in row))  # "pip install 'omni-accel[gpu]'" is not markup
    Console(width=220).print(table)
    typer.echo("A pipeline can still refuse a feature here (no VAE, no _repeated_blocks, ...): sweeps report why.")
    typer.echo("Pass a SOURCE (omni-accel features tiny-flux) to ask its pipeline.")


def _features_on_source(source: str, device: str, as_json: bool) -> None:
    """``features SOURCE``: load SOURCE's pipeline on the CPU, as a sweep's adapter target does, and print each
    feature's verdict on it (``accel.features.survey``); a bad source is the sweep's one-line error."""
    import json
    import string

    import diffusers  # noqa: F401 - imported before quieting, so its progress bars are told (quiet_libraries)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from accel.features import FEATURES
    from accel.features.survey import survey
    from accel.profile import ModelSpec
    from accel.targets.adapter import AdapterTarget, resolve_source
    from accel.zoo import synthetic

    _setup_logging(False)
    allowed = set(string.ascii_letters + string.digits + "-_.+")  # a model name (ModelSpec): the last path part
    label = "".join(c if c in allowed else "-" for c in source.strip("/").rsplit("/", 1)[-1])[:40].strip(".")
    spec = ModelSpec(name=label or "source", source=source, device="cpu")
    resolve_source(spec, "features")  # a bad source: the sweep's one-line error, named after this command
    if synthetic.is_synthetic(source):  # published shapes: tens of GB of random weights; the checks read shapes
        pipeline = synthetic.build_pipeline(source, "meta", spec.dtype)
    else:
        pipeline = AdapterTarget(spec).load()
    rows = survey(pipeline, device, FEATURES)
    name = type(pipeline).__name__
    if as_json:
        payload = {"source": source, "pipeline": name, "device": device, "features": [r.as_dict() for r in rows]}
        typer.echo(json.dumps(payload, indent=2))
        return
    table = Table("feature", "options", f"verdict ({name}, {device})", "reason")
    for row in rows:
        table.add_row(*(escape(cell) for cell in (row.feature, row.options, row.verdict, row.reason)))
    Console(width=220).print(table)
    runs = sum(row.owner is None for row in rows)
    typer.echo(f"{runs} of {len(rows)} feature options can run on {source} ({name}) on {device}; nothing was applied.")


@app.command()
def roofline(
    source: str = typer.Argument(..., help="A synthetic source, e.g. synthetic:flux.1-dev."),
    height: int | None = typer.Option(None, "--height", help="Pixels; default: the model's published default."),
    width: int | None = typer.Option(None, "--width", help="Pixels; default: the model's published default."),
    steps: int | None = typer.Option(None, "--steps", help="Denoising steps; default: the published default."),
    frames: int | None = typer.Option(None, "--frames", help="Video models: frames (default: published)."),
    text_tokens: int | None = typer.Option(None, "--text-tokens", help="Text sequence length (default: published)."),
    device: str = typer.Option("h200", "--device", help="h200 | h100 | b200 | a100 | l40s | l20 | h20 | 4090."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp8 (fp8: linear layers at the fp8 peak)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the numbers as JSON here."),
) -> None:
    """FLOPs per forward, step and image of a real-shape model, counted on the meta device (no GPU, nothing
    allocated), its floor on a named device and what each feature family can at most save."""
    import json

    from accel.measure.roofline import compute, format_text
    from accel.zoo import synthetic

    _setup_logging(False)
    if json_out is not None:
        from accel.outputs import Protected, check_outputs

        protected = Protected()
        protected.add_input(source, "the source")
        check_outputs([(json_out, "--json")], protected)  # before the counting: nothing written when refused
    defaults = {}
    if synthetic.is_synthetic(source):
        defaults = synthetic.parse(source, "roofline").architecture.default_workload
    result = compute(
        source,
        height=height or defaults.get("height", 1024),
        width=width or defaults.get("width", 1024),
        steps=steps or defaults.get("steps", 28),
        device=device,
        dtype=dtype,
        frames=frames,
        text_tokens=text_tokens,
    )
    typer.echo(format_text(result))
    if json_out is not None:
        _write_output(json_out, json.dumps(result.to_dict(), indent=2), "--json", "the numbers")


def _sensitivity(profile: Any, model: str, variant: str | None, json_out: bool) -> None:
    import dataclasses
    import json

    from accel.diverge.run import sensitivity
    from accel.diverge.sensitivity import sensitivity_markdown
    from accel.errors import ConfigError

    if variant is None:
        raise ConfigError("--sensitivity: name the quantization variant with --variant VARIANT")
    rows, method, pick = sensitivity(profile, model, variant)
    if json_out:
        exclude = [row.layer for row in pick.layers]
        layers = [dataclasses.asdict(row) for row in rows]
        measured = [{"top": k, "final_latents_rel_l2": value} for k, value in pick.tried]
        typer.echo(json.dumps({"method": method, "layers": layers, "exclude": exclude, "measured": measured}, indent=2))
    else:
        typer.echo(sensitivity_markdown(rows, method, pick))


@app.command()
def diverge(
    profile: Path = typer.Argument(..., help="Profile YAML naming the model(s) and the variant."),
    model: str = typer.Option(..., "--model", help="The reference side: a model of the profile (unaccelerated)."),
    variant: str | None = typer.Option(
        None, "--variant", help="Compare this variant (its features applied to --model) against --model."
    ),
    against: str | None = typer.Option(
        None, "--against", help="Compare this other model of the profile (e.g. a native port) against --model."
    ),
    tolerance: float | None = typer.Option(
        None, "--tolerance", help="Relative-L2 limit per step; default per dtype: float32 1e-4, bfloat16 2e-2."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the result as JSON (component, step, block, submodule of the first divergence)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Also write diverge.md, diverge.png (rel-L2 per step) and diverge.json here."
    ),
    sensitivity: bool = typer.Option(
        False,
        "--sensitivity",
        help="With --variant naming a quantization variant: the per-layer sensitivity table (each Linear layer "
        "alone quantized) and the layers to leave unquantized, as the feature's `exclude` option.",
    ),
    mapping: Path | None = typer.Option(
        None,
        "--mapping",
        help="YAML file of module names, --model's to the other side's (e.g. 'ff.net.2: ff.fc2'), for the block "
        "bisection; default: a native port's own weight-name mapping, else identical names.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs."),
) -> None:
    """Where two runs of the workload's first request part: the first stage, step, block and submodule beyond
    tolerance. Exit 0 within tolerance, 1 diverged (the place in one line), 2 bad input. With --sensitivity:
    the quantization sensitivity table instead (exit 0)."""
    import json

    from accel.profile import load_profile

    loaded = load_profile(profile)  # a bad profile is refused before torch is imported
    from accel.diverge.run import load_mapping

    names = load_mapping(mapping)  # a bad mapping too
    if out is not None and out.exists() and not out.is_dir():
        from accel.errors import ConfigError

        raise ConfigError(f"{out}: --out: is a file; give a directory to write diverge.md, .png and .json in")
    if out is not None:  # its three files may not land on the profile or inside a run, a checkpoint, the zoo
        from accel.outputs import check_files

        inputs = {"the profile": profile, "the --mapping file": mapping}
        check_files(out, ("diverge.md", "diverge.png", "diverge.json"), "--out", inputs)
    _setup_logging(verbose)
    if sensitivity:
        _sensitivity(loaded, model, variant, json_out)
        return
    from accel.diverge import diverge as run_diverge
    from accel.diverge.report import markdown, write

    result = run_diverge(loaded, model, variant=variant, against=against, tolerance=tolerance, mapping=names)
    if out is not None:
        write(result, out)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        typer.echo(markdown(result))
        typer.echo(result.summary())
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def main() -> None:
    """Console entry point: run the app, turning AccelError and usage errors into exit code 2."""
    try:  # typer >= 0.2x vendors click; older releases use click itself
        from typer._click import exceptions as click_exceptions
    except ImportError:  # pragma: no cover
        from click import exceptions as click_exceptions  # type: ignore[no-redef]  # the same module, older typer

    # Quiet before any command imports a library: third-party import-time warnings (torchao's _C_mxfp8 load,
    # a deprecated enum, transformers' torchvision notice) printed before our own first line buried it.
    from accel.sweep.quiet import quiet_libraries

    quiet_libraries(bool({"-v", "--verbose"} & set(sys.argv[1:])))
    try:
        result = app(standalone_mode=False)  # returns the code of a typer.Exit in this mode
        if isinstance(result, int) and result:
            sys.exit(result)
    except Interrupted as error:
        typer.echo(str(error), err=True)
        sys.exit(error.exit_code)
    except AccelError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
    except click_exceptions.NoArgsIsHelpError:
        sys.exit(0)  # typer has already printed the help
    except click_exceptions.ClickException as error:
        typer.echo(f"error: {error.format_message()}", err=True)
        sys.exit(2)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except typer.Exit as done:  # --help and typer.Exit
        sys.exit(done.exit_code)


if __name__ == "__main__":
    main()
