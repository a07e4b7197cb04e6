"""The GPU check after installation: sweep ``profiles/gpu-h200.yaml`` within a budget, gate it, compare with
the published numbers, and pack report, results and figures into ``$OUT``.

``gpu_check.sh`` (``make gpu-check``) installs the carried wheels, then runs this with the machine's
Python from the working tree (no install of omni-accel itself: ``PYTHONPATH`` is the tree). Every step
runs even when an earlier one failed, and whatever was measured is reported: the sweep runs in a child
process with a deadline (cells recorded before it are kept and reported), then the gate, the roofline of
the profile's first model on this device, the comparison with ``peers.yaml``, the parallel section
(``profiles/gpu-parallel.yaml`` on two or more GPUs; on one, the report says it was skipped and what each
parallel variant is told before launch), and the pack:

    $OUT/report.md          the run's report, with the GPU check's summary and the comparison on top
    $OUT/results.jsonl      every cell's record
    $OUT/gate.md            the gate's findings
    $OUT/environment.json   packages, device, commit
    $OUT/roofline.json      FLOPs and floors of the model on this device
    $OUT/check.log          each step's output
    $OUT/figures.tar.gz     the report's figures (PNG)
    $OUT/run.tar.gz         the rest of the run directory (profile, gate junit; no images or outputs)

``--smoke`` runs the same profile on the CPU at depth 1, widths divided by 4, 32x32, 6 steps, float32
and one timed call per cell, with the inline executor and compile's ``eager`` backend (no C++
toolchain): the CPU test suite runs it (``tests/test_gpu_check.py``) so that every step of the GPU
check is exercised in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402  (after the path setup: runs from the working tree)

PEERS_FILE = Path(__file__).resolve().parent / "peers.yaml"
MAX_OUT_FILES = 8
MAX_OUT_BYTES = 16 * 1024 * 1024
SMOKE = {"source_options": "depth=1&width=4", "height": 32, "width": 32, "steps": 6, "max_sequence_length": 8}


def smoke_profile(data: dict[str, Any]) -> dict[str, Any]:
    """The profile at CPU size: synthetic sources at depth 1 and widths / 4, 32x32, 6 steps, float32, inline.

    Feature options are kept except compile's backend (``eager``: dynamo and the regional plumbing run,
    inductor's C++ compilation does not) and the timeouts; cells that need CUDA report unsupported.
    """
    data = json.loads(json.dumps(data))
    for model in data["models"]:
        if model["source"].startswith("synthetic:"):
            separator = "&" if "?" in model["source"] else "?"
            model["source"] = f"{model['source']}{separator}{SMOKE['source_options']}"
        model["device"] = "cpu"
        model["dtype"] = "float32"  # bf16 matmuls and convolutions crawl on CPUs without bf16 units
        model.setdefault("call_kwargs", {})["max_sequence_length"] = SMOKE["max_sequence_length"]
    data["workload"].update(height=SMOKE["height"], width=SMOKE["width"], steps=SMOKE["steps"])
    for variant in data.get("variants", []):
        compile_options = variant["features"].get("compile")
        if compile_options is not None:
            options = {"granularity": compile_options} if isinstance(compile_options, str) else dict(compile_options)
            variant["features"]["compile"] = {**options, "backend": "eager"}
    data["measure"].update(executor="inline", timeout_s=300, repeats=1)
    data["name"] = f"{data['name']}-smoke"
    return data


class Log:
    """``check.log``: each step's name, duration and output, also echoed to stdout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()

    def write(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:7.1f}s] {text}"
        print(line, flush=True)
        with self.path.open("a") as handle:
            handle.write(line + "\n")


def run_bounded(command: list[str], timeout_s: float, log: Log) -> tuple[int | None, str]:
    """Run a child process in its own process group; kill the group at the deadline. (exit code, output)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=max(1.0, timeout_s))
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        log.write(f"deadline of {timeout_s:.0f} s reached: stopped {' '.join(command[2:4])}")
        return None, output


def finish_partial(run_dir: Path) -> None:
    """Write figures and report.md from the cells recorded before the sweep was stopped."""
    from accel.report.figures import write_figures
    from accel.report.markdown import write_report
    from accel.sweep.resume import measured_records, resolved_profile
    from accel.sweep.spec import sample_keys

    profile = resolved_profile(run_dir)
    records = measured_records(run_dir)
    environment = json.loads((run_dir / "environment.json").read_text())
    figures = write_figures(run_dir, records, sample_keys(profile.workload))
    write_report(run_dir, profile, records, environment, float("nan"), figures)


def roofline_for(profile: dict[str, Any], device_name: str) -> Any:
    """The roofline of the profile's first synthetic model at its published depth and widths."""
    from accel.measure.flops import PEAK_FLOPS
    from accel.measure.roofline import compute

    sources = [m["source"] for m in profile["models"] if m["source"].startswith("synthetic:")]
    if not sources:
        return None  # a real checkpoint: omni-accel roofline counts synthetic sources (same shapes)
    source = sources[0]
    device = next((key.lower() for key in PEAK_FLOPS if key in device_name), "h200")
    w = profile["workload"]
    return compute(source.partition("?")[0], w["height"], w["width"], w["steps"], device=device)


def peers_table(records: list[dict[str, Any]], roofline: Any, peers: dict[str, Any]) -> list[str]:
    """Markdown comparing our warm latencies with the published ones (peers.yaml), and the floor."""
    by_variant = {(r["model"], r["variant"]): r for r in records}
    lines = [
        "## Against published numbers",
        "",
        f"Published: {peers['source']}. Ours: warm median per image on this machine, the same workload.",
        "",
        "| configuration | ours (s) | published (s) | ours / published | our median step (ms) | MFU |",
        "|---|---|---|---|---|---|",
    ]
    for row in peers["rows"]:
        record = by_variant.get((row["model"], row["variant"]))
        ours = record["warm"]["median"] if record and record.get("warm") else None
        step = (record.get("stages") or {}).get("step_median_s") if record else None
        mfu = ((record.get("roofline") or {}).get("mfu")) if record else None
        published = row["seconds"]
        status = "" if ours is not None else f" ({record['status']}: {record.get('error') or ''})" if record else ""
        ours_text = f"{ours:.2f}" if ours is not None else "not measured" + status
        ratio = f"{ours / published:.2f}" if ours is not None else "–"
        step_text = f"{step * 1e3:.1f}" if step else "–"
        mfu_text = f"{mfu:.0%}" if mfu else "–"
        lines.append(f"| {row['label']} | {ours_text} | {published:.2f} | {ratio} | {step_text} | {mfu_text} |")
    if roofline is not None:
        lines += [
            "",
            f"Floor on {roofline.device} (FLOPs counted on the meta device / dense datasheet peak): "
            f"{roofline.floor_step_s * 1e3:.1f} ms per step, {roofline.floor_image_s:.2f} s per image; "
            f"published floor {peers['floor_image_s']:.2f} s, best published bf16 step "
            f"{peers['best_step_ms']:.1f} ms ({peers['best_step_source']}).",
        ]
    return [*lines, ""]


def pack(run_dir: Path, out: Path, log: Log) -> list[Path]:
    """At most 8 files under ``out`` (flat), each under 16 MiB: the report, records, and two archives."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("report.md", "results.jsonl", "gate.md", "environment.json", "roofline.json"):
        source = run_dir / name
        if source.is_file():
            (out / name).write_bytes(source.read_bytes())
            written.append(out / name)
    figures = sorted((run_dir / "figures").glob("*.png")) if (run_dir / "figures").is_dir() else []
    budget = MAX_OUT_BYTES - 1024 * 1024  # PNGs do not compress: keep the smallest that fit
    with tarfile.open(out / "figures.tar.gz", "w:gz") as archive:
        for path in sorted(figures, key=lambda p: p.stat().st_size):
            if path.stat().st_size > budget:
                log.write(f"figure {path.name} left out: {path.stat().st_size} bytes would exceed 16 MiB")
                continue
            budget -= path.stat().st_size
            archive.add(path, arcname=f"figures/{path.name}")
    written.append(out / "figures.tar.gz")
    with tarfile.open(out / "run.tar.gz", "w:gz") as archive:
        for path in sorted(run_dir.rglob("*")):
            relative = path.relative_to(run_dir)
            if path.is_file() and relative.parts[0] not in ("images", "outputs", "figures"):
                archive.add(path, arcname=f"run/{relative}")
    written.append(out / "run.tar.gz")
    for path in written:
        if path.stat().st_size > MAX_OUT_BYTES:
            log.write(f"{path.name} is {path.stat().st_size} bytes, over 16 MiB: truncated to its first 16 MiB")
            data = path.read_bytes()[:MAX_OUT_BYTES]
            path.write_bytes(data)
    return written


PARALLEL_PROFILE = ROOT / "profiles" / "gpu-parallel.yaml"
PARALLEL_MIN_GPUS = 2
PARALLEL_BUDGET_S = 150  # taken from the main sweep's budget only on a machine that runs the section


def parallel_refusals(data: dict[str, Any]) -> list[str]:
    """Each parallel variant of ``data`` and what the harness says before launching it on this machine's GPUs
    (``accel.features.parallel.launch_refusal``): the refusal with its reason, or that it would launch."""
    from accel.features import FEATURES
    from accel.features.parallel import launch_refusal

    lines = []
    for variant in data["variants"]:
        configs = {name: FEATURES[name].parse_options(raw) for name, raw in variant["features"].items()}
        reason = launch_refusal(configs, "cuda")
        said = f"refused before any rank starts: {reason}" if reason else "would launch"
        lines.append(f"- `{variant['name']}`: {said}")
    return lines


def parallel_section(gpus: int, budget_s: float, work: Path, log: Log) -> list[str]:
    """The report's "Parallel inference" section: ``profiles/gpu-parallel.yaml`` swept and gated on a machine with
    at least two GPUs (one rank per GPU); on fewer, said plainly to be skipped, with each variant's refusal."""
    data = yaml.safe_load(PARALLEL_PROFILE.read_text())
    shown = PARALLEL_PROFILE.relative_to(ROOT) if PARALLEL_PROFILE.is_relative_to(ROOT) else PARALLEL_PROFILE
    lines = ["## Parallel inference", ""]
    if gpus < PARALLEL_MIN_GPUS:
        lines.append(
            f"Skipped: this machine has {gpus} GPU(s); the parallel section needs {PARALLEL_MIN_GPUS} or more (one "
            f"rank per GPU, `{shown}`). What each variant gets here:"
        )
        lines += ["", *parallel_refusals(data)]
        log.write(f"parallel section skipped: {gpus} GPU(s)")
        return lines
    run_dir = work / "parallel"
    code, output = run_bounded(
        [sys.executable, "-m", "accel", "sweep", str(PARALLEL_PROFILE), "--out", str(run_dir)], budget_s, log
    )
    log.write(f"parallel sweep exit {code}\n{output[-3000:]}")
    gate_code, gate_output = run_bounded([sys.executable, "-m", "accel", "gate", str(run_dir)], 60, log)
    log.write(f"parallel gate exit {gate_code}\n{gate_output[-2000:]}")
    lines.append(f"{gpus} GPUs; sweep exit {code}, gate exit {gate_code} (`{shown}`).")
    lines.append("")
    lines.append("| variant | status | parity vs one rank (SSIM / PSNR) | warm median (s) | error |")
    lines.append("|---|---|---|---|---|")
    results = run_dir / "results.jsonl"
    for line in results.read_text().splitlines() if results.is_file() else []:
        record = json.loads(line)
        parity = record.get("parity") or {}
        warm = (record.get("warm") or {}).get("median")
        error = (str(record.get("error") or "").strip().splitlines() or [""])[0]
        lines.append(
            f"| {record['variant']} | {record['status']} | {parity.get('ssim', '–')} / {parity.get('psnr', '–')} | "
            f"{'–' if warm is None else f'{warm:.3f}'} | {error} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, default=ROOT / "profiles" / "gpu-h200.yaml")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "runs" / "gpu-check-out"))
    parser.add_argument("--work", type=Path, default=None, help="Default: runs/gpu-check-work.")
    parser.add_argument("--budget-s", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET_S", 500)))
    parser.add_argument("--smoke", action="store_true", help="CPU size (tests): depth 1, widths / 4, 32x32.")
    parser.add_argument(
        "--summarise-only",
        action="store_true",
        help="No sweep: gate, roofline, compare and pack the run directory already under --work (one copied "
        "back from the GPU machine, say); device and torch are read from its environment.json.",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = args.work or ROOT / "runs" / "gpu-check-work"  # in the tree: $OUT's parent may not be writable
    run_dir = work / "run"
    log = Log(work / "check.log")
    data = yaml.safe_load(args.profile.read_text())
    if args.smoke:
        data = smoke_profile(data)
    work.mkdir(parents=True, exist_ok=True)
    profile_path = work / "profile.yaml"
    profile_path.write_text(yaml.safe_dump(data, sort_keys=False))

    import torch

    if args.summarise_only:
        environment = json.loads((run_dir / "environment.json").read_text())
        device_name = (environment.get("devices") or ["cpu"])[0]
        torch_version = f"{environment['packages']['torch']}" + (
            f" (CUDA {environment['cuda']})" if environment.get("cuda") else ""
        )
    else:
        device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        torch_version = torch.__version__
    log.write(f"device: {device_name}; torch {torch_version}; profile {args.profile.name}{' (smoke)' * args.smoke}")
    if not args.smoke and not args.summarise_only and not torch.cuda.is_available():
        log.write("warning: no CUDA device: every cell runs on the CPU (use --smoke for a CPU-sized run)")

    gpus = torch.cuda.device_count() if not args.summarise_only else 0
    parallel_budget = PARALLEL_BUDGET_S if gpus >= PARALLEL_MIN_GPUS else 0
    if args.summarise_only:
        code = None
        log.write(f"--summarise-only: no sweep; the records found in {run_dir}")
    else:
        # A minute for the rest; the parallel section's share only where it runs.
        sweep_budget = args.budget_s - (time.monotonic() - started) - 60 - parallel_budget
        code, output = run_bounded(
            [sys.executable, "-m", "accel", "sweep", str(profile_path), "--out", str(run_dir)], sweep_budget, log
        )
        log.write(f"sweep exit {code}\n{output[-4000:]}")
    if code != 0 and (run_dir / "results.jsonl").is_file():
        try:
            finish_partial(run_dir)
            log.write(
                "report written from the run directory's records"
                if args.summarise_only
                else "report written from the cells recorded before the sweep stopped"
            )
        except Exception as error:  # reported, the rest still runs
            log.write(f"could not write the partial report: {type(error).__name__}: {error}")

    gate_code, gate_output = run_bounded([sys.executable, "-m", "accel", "gate", str(run_dir)], 60, log)
    log.write(f"gate exit {gate_code}\n{gate_output[-2000:]}")

    roofline = None
    try:
        roofline = roofline_for(data if not args.smoke else yaml.safe_load(args.profile.read_text()), device_name)
        (run_dir / "roofline.json").write_text(json.dumps(roofline.to_dict(), indent=2))
    except Exception as error:
        log.write(f"roofline failed: {type(error).__name__}: {error}")

    records = []
    if (run_dir / "results.jsonl").is_file():
        from accel.results import read_results

        records = read_results(run_dir)
    peers = yaml.safe_load(PEERS_FILE.read_text())
    sweep_state = "stopped at the deadline" if code is None else "finished" if code == 0 else "failed"
    if args.summarise_only:
        sweep_state = "not run by this command: --summarise-only"
    cells = ", ".join(f"{r['model']}/{r['variant']}={r['status']}" for r in records) or "none"
    summary = [
        f"# GPU check: {args.profile.name}{' (CPU smoke run)' if args.smoke else ''}",
        "",
        f"- Device: {device_name}; torch {torch_version}",
        f"- Sweep: exit {code} ({sweep_state}); {len(records)} cell(s) recorded; gate exit {gate_code} "
        "(0 pass, 1 a cell failed, 2 bad input)",
        f"- Cells: {cells}",
        "- Synthetic weights: speed, memory and FLOPs are the real model's; parity is meaningful for lossless "
        "features only.",
        "",
        *peers_table(records, roofline, peers),
    ]
    if not args.summarise_only:
        try:
            summary += ["", *parallel_section(gpus, parallel_budget, work, log)]
        except Exception as error:  # reported, the rest still runs
            log.write(f"parallel section failed: {type(error).__name__}: {error}")
            summary += ["", "## Parallel inference", "", f"Failed: {type(error).__name__}: {error} (check.log)"]
    report = run_dir / "report.md"
    body = report.read_text() if report.is_file() else "(the sweep wrote no report: see check.log)\n"
    body = body[body.find("# omni-accel report") :] if "# omni-accel report" in body else body  # no older summary
    run_dir.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(summary) + "\n" + body)
    log.write(f"total {time.monotonic() - started:.0f} s")
    (run_dir / "check.log").write_bytes(log.path.read_bytes())
    written = pack(run_dir, args.out, log)
    (args.out / "check.log").write_bytes(log.path.read_bytes())
    written.append(args.out / "check.log")
    assert len(written) <= MAX_OUT_FILES, written
    print(f"wrote {len(written)} files to {args.out}")
    return 0 if code == 0 and gate_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
