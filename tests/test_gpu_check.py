"""The GPU check's code path on the CPU: the same profile at CPU size, gated, compared and packed; the
carried wheels and how they are installed."""

from __future__ import annotations

import importlib.util
import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "benchmarks" / "gpu"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")
install_wheels = _load("install_wheels")


def test_the_profile_is_the_issues_configuration():
    profile = yaml.safe_load((ROOT / "profiles" / "gpu-h200.yaml").read_text())
    assert {m["source"] for m in profile["models"]} == {"synthetic:flux.1-dev"}
    assert {m["target"] for m in profile["models"]} == {"adapter", "native"}
    assert {m["dtype"] for m in profile["models"]} == {"bfloat16"}
    w = profile["workload"]
    assert (w["height"], w["width"], w["steps"]) == (1024, 1024, 28)
    features = [v["features"] for v in profile["variants"]]
    assert {"compile": "regional"} in features and {"quantization": "fp8dq_row", "compile": "regional"} in features
    assert any("cache_dit" in f for f in features) and any("enable_layerwise_offload" in f for f in features)
    backends = {f["attention_backend"] for f in features if "attention_backend" in f}
    assert backends == {"_native_flash", "_native_cudnn", "_native_efficient"}


def test_smoke_profile_shrinks_shapes_not_features():
    profile = yaml.safe_load((ROOT / "profiles" / "gpu-h200.yaml").read_text())
    smoke = gpu_check.smoke_profile(profile)
    assert all(m["source"] == "synthetic:flux.1-dev?depth=1&width=4" for m in smoke["models"])
    assert smoke["workload"]["height"] == 32 and smoke["measure"]["executor"] == "inline"
    assert [v["name"] for v in smoke["variants"]] == [v["name"] for v in profile["variants"]]
    compiled = next(v for v in smoke["variants"] if v["name"] == "compile-fp8-row")["features"]
    assert compiled == {"quantization": "fp8dq_row", "compile": {"granularity": "regional", "backend": "eager"}}
    assert profile["models"][0]["source"] == "synthetic:flux.1-dev"  # the original is left as it was


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-check")
    out = root / "out"
    code = gpu_check.main(["--smoke", "--out", str(out), "--work", str(root / "work"), "--budget-s", "1500"])
    return code, out, root


def test_smoke_run_measures_every_cell_and_packs_at_most_8_flat_files(smoke):
    code, out, _ = smoke
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files)
    assert {"report.md", "results.jsonl", "gate.md", "check.log", "figures.tar.gz", "run.tar.gz"} <= set(files)
    assert all((out / f).stat().st_size < 16 * 1024 * 1024 for f in files)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    cells = {f"{r['model']}/{r['variant']}": r for r in records}
    assert len(cells) == 10  # every cell of the profile, none lost
    assert cells["flux-dev/baseline"]["status"] == "ok"
    assert cells["flux-dev-native/baseline"]["status"] == "ok"
    # The native port runs the adapter's weights: the adapter's baseline reproduces the native one.
    assert cells["flux-dev/baseline"]["parity_vs_reference"]["ssim"] > 0.999
    for name in ("sdpa-cudnn", "sdpa-efficient", "layerwise-offload-stream", "fp8-row", "compile-fp8-row"):
        record = cells[f"flux-dev/{name}"]
        assert record["status"] == "unsupported" and record["error"], name  # said before running, with why
    assert cells["flux-dev/compile-regional"]["status"] == "ok"
    assert cells["flux-dev/sdpa-flash"]["status"] == "ok"
    assert code in (0, 1)


def test_smoke_report_compares_with_published_numbers(smoke):
    _, out, _ = smoke
    report = (out / "report.md").read_text()
    assert report.startswith("# GPU check: gpu-h200.yaml (CPU smoke run)")
    assert "## Against published numbers" in report and "| bf16 eager |" in report
    assert re.search(r"Floor on H200 .*: 75\.\d ms per step", report)
    assert "**Synthetic models**" in report  # the run's report labels the synthetic sources
    # Fewer than two GPUs: the parallel section says it was skipped, and what each variant is told before launch.
    assert "## Parallel inference\n\nSkipped: this machine has 0 GPU(s); the parallel section needs 2 or more" in report
    assert "- `tp-2`: refused before any rank starts: tensor_parallel: needs 2 GPUs, one per rank (found: 0)" in report
    with tarfile.open(out / "run.tar.gz") as archive:
        names = archive.getnames()
    assert "run/profile.resolved.yaml" in names and not any("/outputs/" in n or "/images/" in n for n in names)
    assert json.loads((out / "roofline.json").read_text())["forward"]["total"] > 7e13


def test_summarise_only_reports_a_run_directory_brought_back_without_its_outputs(smoke, tmp_path):
    import shutil

    _, out, root = smoke
    work = tmp_path / "work"
    shutil.copytree(root / "work" / "run", work / "run")
    for folder in ("outputs", "images", "figures"):  # what does not come back from the GPU machine
        shutil.rmtree(work / "run" / folder, ignore_errors=True)
    summary_out = tmp_path / "out"
    gpu_check.main(["--smoke", "--summarise-only", "--work", str(work), "--out", str(summary_out)])
    report = (summary_out / "report.md").read_text()
    assert report.count("# GPU check:") == 1  # the earlier summary is replaced, not stacked
    assert "not run by this command: --summarise-only" in report and "10 cell(s) recorded" in report
    assert "| bf16 eager |" in report and "# omni-accel report" in report
    with tarfile.open(summary_out / "figures.tar.gz") as archive:
        names = archive.getnames()
    assert names and not any("grid-" in name for name in names)  # charts from records; no grids without outputs
    assert (summary_out / "results.jsonl").read_text() == (out / "results.jsonl").read_text()


def test_the_carried_wheels_pair_with_the_gpu_machine_and_the_pins():
    lines = [line for line in (GPU / "wheels.txt").read_text().splitlines() if line and not line.startswith("#")]
    pins = dict(line.split("==") for line in lines)
    assert pins["torchao"] == "0.17.0"  # built against torch 2.11 (the H200's)
    assert "torch" not in pins  # the machine's torch is never replaced
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {Requirement(d).name: Requirement(d).specifier for d in project}
    for name in ("diffusers", "cache-dit", "pydantic"):
        assert pins[name] in ranges[name], (name, pins[name], ranges[name])


def test_installation_plan_keeps_what_is_there_and_never_lists_torch(tmp_path):
    wheels = [
        tmp_path / "diffusers-0.42.1-py3-none-any.whl",
        tmp_path / "torchao-0.17.0-cp310-abi3-manylinux_2_28_x86_64.whl",
        tmp_path / "pydantic-2.14.4-py3-none-any.whl",
        tmp_path / "pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_x86_64.whl",
        tmp_path / "platformdirs-4.14.9-py3-none-any.whl",
    ]
    chosen, notes = install_wheels.plan_install(
        wheels,
        {
            "diffusers": None,
            "torchao": "0.18.0",
            "pydantic": "2.11.0",
            "pydantic-core": "2.33.0",
            "platformdirs": "4.2.0",
        },
    )
    names = {install_wheels.wheel_name(w)[0] for w in chosen}
    assert names == {"diffusers", "torchao"}  # pydantic 2.11 and platformdirs 4.2 are new enough: kept
    chosen, _ = install_wheels.plan_install(wheels, {"pydantic": "1.10.0", "pydantic-core": None})
    assert {"pydantic", "pydantic-core"} <= {install_wheels.wheel_name(w)[0] for w in chosen}  # as a group
    assert not any(install_wheels.wheel_name(w)[0] == "torch" for w in chosen)
    assert any("keep 2.11.0" in n for n in notes)


def test_the_parallel_section_sweeps_and_tabulates_its_profile_where_there_are_enough_devices(tmp_path, monkeypatch):
    """The branch a machine with two or more GPUs takes, exercised on the CPU: a two-rank Ulysses profile on a
    tiny model swept, gated and tabulated against one rank (on a GPU machine: profiles/gpu-parallel.yaml)."""
    script = gpu_check
    profile = tmp_path / "parallel.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "name": "parallel-smoke",
                "models": [{"name": "tiny-flux", "source": "tiny-flux"}],
                "workload": {"prompts": ["a red fox"], "seeds": [0], "steps": 2, "height": 32, "width": 32},
                "variants": [{"name": "ulysses-2", "features": {"context_parallel": {"ulysses": 2}}}],
                "measure": {"warmup": 0, "repeats": 1, "timing": "sequential", "noise_floor": False,
                            "sweep_warmup": False, "executor": "process", "timeout_s": 240},
            }
        )
    )  # fmt: skip
    monkeypatch.setattr(script, "PARALLEL_PROFILE", profile)
    log = script.Log(tmp_path / "check.log")
    lines = script.parallel_section(2, 400, tmp_path, log)
    text = "\n".join(lines)
    assert text.startswith("## Parallel inference\n\n2 GPUs; sweep exit 0, gate exit 0"), text
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ") and "---" not in line}
    assert rows["ulysses-2"].split(" | ")[1] == "ok", rows
    lines_of_results = (tmp_path / "parallel" / "results.jsonl").read_text().splitlines()
    records = {record["variant"]: record for record in map(json.loads, lines_of_results)}
    ssim, psnr = (records["ulysses-2"]["parity"][key] for key in ("ssim", "psnr"))
    assert ssim > 0.999 and f"| {ssim} / {psnr} |" in rows["ulysses-2"]  # the table shows the record's parity
