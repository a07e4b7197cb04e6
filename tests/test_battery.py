"""The bad-input battery of issue 41, kept in the project: each case exits 2 with one line naming the file and
the key or cause, no traceback, and the run's files byte-identical. ``test_the_battery_holds_150_bad_inputs``
counts this file's cases with those of tests/test_bad_input.py, tests/test_output_paths.py and
tests/test_record_refs.py (distinct inputs: a path tried directly and through a link counts once).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import invoke, one_error_line, profile_with, small_profile

COMMITTED = Path(__file__).resolve().parents[1] / "reports" / "quickstart"


def _profile(tmp: Path, **changes) -> list[str]:
    data = profile_with(**changes)
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return ["plan", str(path)]


def _text(tmp: Path, text: str) -> list[str]:
    path = tmp / "p.yaml"
    path.write_text(text)
    return ["plan", str(path)]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _loop(path: Path) -> Path:
    other = path.parent / f"{path.name}-other"
    other.symlink_to(path)
    path.symlink_to(other)
    return path


def _record(tmp: Path, run: Path, **changes) -> list[str]:
    """The run's cache-dit-0.5 record with ``changes`` (in place: the gate must refuse before writing)."""
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    edited = [{**r, **changes} if r["variant"] == "cache-dit-0.5" else r for r in lines]
    copy = tmp / "edited"
    copy.mkdir()
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
    return ["gate", str(copy)]


def _checkpoint(tmp: Path) -> Path:
    from accel import zoo

    copy = tmp / "ckpt"
    shutil.copytree(zoo.build("tiny-flux"), copy)
    return copy


def _ckpt_profile(tmp: Path, ckpt: Path) -> list[str]:
    return _profile(tmp, models=[{"name": "m", "source": str(ckpt)}])


def _random_weights(tmp: Path, run: Path) -> list[str]:
    ckpt = _checkpoint(tmp)
    (ckpt / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(
        bytes(range(256)) * 20  # length prefix 0x0706050403020100: a 20-digit "header size"
    )
    return _ckpt_profile(tmp, ckpt)


def _index_directory(tmp: Path, run: Path) -> list[str]:
    ckpt = _checkpoint(tmp)
    (ckpt / "model_index.json").unlink()
    (ckpt / "model_index.json").mkdir()
    return _ckpt_profile(tmp, ckpt)


LONG = "m" * 10_000

BATTERY = {
    # what the file is (issue 41, item 6)
    "dev-null-as-profile": (lambda t, r: ["plan", "/dev/null"], r"^error: /dev/null: is a character device, not a"),
    "dev-zero-as-claims": (
        lambda t, r: ["gate", str(r), "--claims", "/dev/zero"],
        r"/dev/zero: is a character device, not a regular claims file",
    ),
    "dev-null-as-thresholds": (
        lambda t, r: ["gate", str(r), "--thresholds", "/dev/null"],
        r"/dev/null: is a character device, not a regular thresholds file",
    ),
    "fifo-as-profile": (lambda t, r: ["plan", str(_fifo(t / "p.yaml"))], r"p\.yaml: is a FIFO \(named pipe\)"),
    "fifo-as-results": (
        lambda t, r: ["gate", str(_fifo(t / "results.jsonl"))],
        r"results\.jsonl: is a FIFO \(named pipe\), not a regular results file",
    ),
    "symlink-loop-as-results": (
        lambda t, r: ["gate", str(_loop(t / "results.jsonl"))],
        r"results\.jsonl: is a symbolic link loop, not a results file",
    ),
    "symlink-loop-as-profile": (lambda t, r: ["plan", str(_loop(t / "p.yaml"))], r"p\.yaml: is a symbolic link loop"),
    "dangling-link-as-claims": (
        lambda t, r: ["gate", str(r), "--claims", str(_dangling(t))],
        r"claims\.yaml: is a symbolic link to .*nowhere\.yaml, which does not exist: no claims file there",
    ),
    "fifo-as-inject": (
        lambda t, r: ["table", str(r), "--inject", str(_fifo(t / "doc.md"))],
        r"doc\.md: is a FIFO \(named pipe\), not a regular --inject file",
    ),
    "random-bytes-as-safetensors": (
        _random_weights,
        r"vae/diffusion_pytorch_model\.safetensors: not a safetensors file \(5120 bytes; it does not start with",
    ),
    "model-index-a-directory": (
        _index_directory,
        r"models\[0\]\.source: .*model_index\.json: is a directory, not a regular model_index\.json file",
    ),
    # names that become file names (issue 41, item 2)
    "10000-character-model-name": (
        lambda t, r: _profile(t, models=[{"name": LONG, "source": "tiny-flux"}]),
        r"models\[0\]\.name: 'm{40}\.\.\.' is 10000 characters long: names become file and folder names",
    ),
    "300-character-variant-name": (
        lambda t, r: _profile(t, variants=[{"name": "v" * 300, "features": {"vae_use_tiling": True}}]),
        r"variants\[0\]\.name: 'v{40}\.\.\.' is 300 characters long",
    ),
    "300-character-profile-name": (lambda t, r: _profile(t, name="n" * 300), r"p\.yaml: name: 'n{40}\.\.\.' is 300"),
    "profile-name-dot-dot": (lambda t, r: _profile(t, name=".."), r"name: '\.\.' names a directory itself"),
    "model-name-dot": (
        lambda t, r: _profile(t, models=[{"name": ".", "source": "tiny-flux"}]),
        r"models\[0\]\.name: '\.' names a directory itself",
    ),
    "profile-name-with-a-slash": (lambda t, r: _profile(t, name="a/b"), r"name: 'a/b' must be non-empty and use only"),
    "200-character-pairwise-prefix": (
        lambda t, r: _profile(
            t, combinations={"prefix": "x" * 200, "features": {"vae_use_tiling": [True], "vae_use_slicing": [True]}}
        ),
        r"combinations\.prefix: 'x{40}\.\.\.' is 200 characters long: .* at most 96 characters",
    ),
    "emoji-model-name": (
        lambda t, r: _profile(t, models=[{"name": "flux-\U0001f680", "source": "tiny-flux"}]),
        r"models\[0\]\.name: 'flux-\U0001f680' must be non-empty and use only letters",
    ),
    "tab-in-variant-name": (
        lambda t, r: _profile(t, variants=[{"name": "a\tb", "features": {"vae_use_tiling": True}}]),
        r"variants\[0\]\.name: 'a\\tb' holds a control character",
    ),
    "homoglyph-top-level-key": (
        lambda t, r: _text(t, yaml.safe_dump(small_profile()).replace("workload:", "w\u043erkload:")),
        r"p\.yaml: \(top level\): unknown key 'w\u043erkload'\. Did you mean 'workload'\?",
    ),
    "float-seed": (lambda t, r: _profile(t, workload__seeds=[0.5]), r"workload\.seeds\[0\]: .*got 0\.5"),
    # records (issue 41, items 3 and 5)
    "record-with-a-10000-character-model": (
        lambda t, r: _record(t, r, model=LONG),
        r"results\.jsonl:4: 'model': 'm{40}\.\.\.' is 10000 characters long",
    ),
    "record-variant-dot-dot": (
        lambda t, r: _record(t, r, variant=".."),
        r"results\.jsonl:4: 'variant': '\.\.' names a directory itself",
    ),
    "record-outputs-file-a-nul": (
        lambda t, r: _record(t, r, outputs_file="outputs/a\x00.npz"),
        r"'outputs_file' should be a path inside the run directory",
    ),
    "record-images-not-a-list-of-paths": (
        lambda t, r: _record(t, r, images=[3]),
        r"'images\[0\]' should be a path inside the run directory",
    ),
}


# Each class of bad input the battery runs, as docs/bad-input.md's table names it (a row's first cell), with the
# battery's cases of that class: ``test_every_class_the_battery_runs_is_in_the_doc`` keeps the two in step.
DOC_ROWS = {
    "`/dev/null`, `/dev/zero` (a device) as a profile, thresholds or claims file": [
        "dev-null-as-profile",
        "dev-zero-as-claims",
        "dev-null-as-thresholds",
    ],
    "a FIFO as a profile, results or `--inject` file": ["fifo-as-profile", "fifo-as-results", "fifo-as-inject"],
    "a symbolic link loop or a dangling link as an input file": [
        "symlink-loop-as-results",
        "symlink-loop-as-profile",
        "dangling-link-as-claims",
    ],
    "random bytes as a weight file": ["random-bytes-as-safetensors"],
    "a `model_index.json` that is a directory": ["model-index-a-directory"],
    "a name too long for a file name (model, variant, profile, pairwise prefix)": [
        "10000-character-model-name",
        "300-character-variant-name",
        "300-character-profile-name",
        "200-character-pairwise-prefix",
    ],
    "a name that is `.` or `..`, or holds a slash, an emoji or a tab": [
        "profile-name-dot-dot",
        "model-name-dot",
        "profile-name-with-a-slash",
        "emoji-model-name",
        "tab-in-variant-name",
    ],
    "a homoglyph key (Cyrillic `о` in `workload`)": ["homoglyph-top-level-key"],
    "a float seed": ["float-seed"],
    "a record whose model or variant cannot be a file name (10,000 characters, `..`)": [
        "record-with-a-10000-character-model",
        "record-variant-dot-dot",
    ],
    "a record's `outputs_file` or `images` that are not paths inside the run directory": [
        "record-outputs-file-a-nul",
        "record-images-not-a-list-of-paths",
    ],
}
DOC = Path(__file__).resolve().parents[1] / "docs" / "bad-input.md"


def test_every_class_the_battery_runs_is_in_the_doc():
    """docs/bad-input.md does not drift from the battery: every case belongs to one class, and every class is a
    row of the doc's table."""
    classed = sorted(case for cases in DOC_ROWS.values() for case in cases)
    assert classed == sorted(BATTERY), "give each battery case one class in DOC_ROWS (its docs/bad-input.md row)"
    rows = {line.split("|")[1].strip() for line in DOC.read_text().splitlines() if line.startswith("| ")}
    missing = [row for row in DOC_ROWS if row not in rows]
    assert not missing, f"docs/bad-input.md has no row for: {missing}; add '| <class> | <its message> |' for each"


def _dangling(tmp: Path) -> Path:
    link = tmp / "claims.yaml"
    link.symlink_to(tmp / "nowhere.yaml")
    return link


@pytest.fixture
def run(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(COMMITTED, copy)
    return copy


def _tree(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(BATTERY))
def test_a_bad_input_exits_2_with_one_line_and_keeps_the_run(case, run, tmp_path, monkeypatch, capsys):
    setup, pattern = BATTERY[case]
    work = tmp_path / "case"
    work.mkdir()
    before = _tree(run)
    args = setup(work, run)
    code, _, err = invoke(monkeypatch, capsys, *args)
    one_error_line(code, err, pattern)
    assert _tree(run) == before


def test_the_battery_holds_150_bad_inputs():
    """Distinct bad inputs, each checked for exit 2, one line and unchanged results by the tests named."""
    import test_bad_input
    import test_output_paths
    import test_record_refs  # noqa: F401  # its cases are counted from its parametrisation below

    bad_input = len(test_bad_input.CASES) + len(test_bad_input.STRICT_CASES) + len(test_bad_input.REVIEW_CASES)
    protected = len(test_output_paths.PROTECTED)
    # gate --junit and --summary, table --inject: every protected path; roofline --json: all but the claims file;
    # sweep --out: its seven directories; the run file named like the profile; two options naming one file.
    output_paths = 3 * protected + (protected - 1) + 7 + 1 + 1
    records = 2 * 2 + 1 + 7  # unknown backend (schema x form), unknown option, seven paths leaving the run
    total = bad_input + output_paths + records + len(BATTERY)
    assert total >= 150, f"{total} bad inputs in the battery"
