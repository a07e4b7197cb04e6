"""Generated markdown tables against golden files, and docs injection round trips.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1 pytest tests/test_tables.py``
and review the diff.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from synthetic import CLAIMS, results

from accel.errors import ConfigError
from accel.gate import GateData, load_gate_data
from accel.report.inject import inject, inject_file
from accel.report.tables import HARNESS_MARK, performance_table, render_tables, support_matrix

GOLDEN = Path(__file__).parent / "golden"


def _tables(records: list[dict[str, Any]] | None = None) -> dict[str, str]:
    return render_tables(results() if records is None else records, GateData(load_gate_data().thresholds, CLAIMS))


@pytest.mark.parametrize("name", ["support-matrix", "compatibility", "performance-flux", "performance-wan"])
def test_tables_match_golden_files(name):
    text = _tables()[name]
    path = GOLDEN / f"{name}.md"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_support_matrix_marks():
    text = _tables()["support-matrix"]
    assert "| **flux** |" in text and "| **wan** |" in text
    assert "✅ 1.50x [1.43–1.57] · 1.00" in text  # compile on flux: speedup [interval] · SSIM
    assert "⚠" in text and "❌" in text and "➖" in text
    harness_gap = "tea: not supported by omni-accel yet (a harness gap, not the model's): tea_cache: TeaCache"
    assert harness_gap in text  # footnote
    assert text.count("|:-:") >= 1 and "Legend:" in text


def _row(text: str, model: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| **{model}** |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def _column(text: str, feature: str) -> int:
    header = [cell.strip() for cell in text.splitlines()[0].strip("|").split("|")][1:]
    return next(i for i, cell in enumerate(header) if cell.endswith(f"`{feature}`"))


def test_a_harness_gap_has_its_own_mark_never_the_models():
    # wan's tea_cache was refused by omni-accel (refused_by: harness): 🔧 and its footnote, not ❌. flux's full
    # compile, a record without refused_by (written before it), is read as its scope said: the model's ❌.
    text = _tables()["support-matrix"]
    tea = _row(text, "wan")[_column(text, "tea_cache")]
    assert tea.startswith(f"{HARNESS_MARK}<sup>") and "❌" not in tea
    assert "compile-full: ❌<sup>" in _row(text, "flux")[_column(text, "compile")]
    assert f"{HARNESS_MARK} not supported by omni-accel yet: a harness gap, not the model's" in text  # legend
    records = results()
    refused = next(r for r in records if r["model"] == "wan" and r["variant"] == "tea")
    refused["refused_by"] = "library"
    tea = _row(_tables(records)["support-matrix"], "wan")[_column(text, "tea_cache")]
    assert tea.startswith("❌<sup>") and "tea: refused by the library: tea_cache" in _tables(records)["support-matrix"]


def test_support_matrix_shows_every_setting_of_a_feature():
    # Regional compile passes on flux, full compile is refused: the refusal stays visible beside it.
    text = _tables()["support-matrix"]
    cell = _row(text, "flux")[_column(text, "compile")]
    assert cell.startswith("compile: ✅ 1.50x [1.43–1.57] · 1.00<br>compile-full: ❌<sup>")
    assert (
        "compile-full: the model lacks what it needs: compile: full-graph compile breaks on this transformer's" in text
    )


def test_support_matrix_labels_no_effect_and_cells_that_did_not_run():
    text = _tables()["support-matrix"]
    offload = _row(text, "wan")[_column(text, "enable_cpu_offload")]
    assert offload.startswith("⚪<sup>") and "✅" not in offload  # offload on a CPU: engaged, nothing moved
    assert "offload: enable_cpu_offload engaged, no effect on cpu: nothing moved off any device" in text
    assert _row(text, "flux")[_column(text, "enable_cpu_offload")] == "✅ 0.50x [0.47–0.53] · 1.00"  # on a GPU
    flash = _row(text, "flux")[_column(text, "attention_backend")]
    assert flash.startswith("➖<sup>")  # not measurable here, with the reason in the footnote
    assert "flash: not measured, attention_backend: package flash_attn not installed" in text


def test_cells_of_a_model_whose_baseline_crashed_are_not_measured_not_out_of_parity():
    from accel.report.markdown import noise_floor_line
    from accel.report.tables import FAILED, classify, gate_records

    records = results()
    baseline = next(r for r in records if (r["model"], r["variant"]) == ("flux", "baseline"))
    for key in ("warm", "parity", "evidence", "speedup_ci", "outputs_stable"):
        baseline.pop(key, None)
    baseline.update(status="failed", error="worker died with signal SIGSEGV")
    for r in records:
        if r["model"] == "flux" and r["variant"] != "baseline":
            r.pop("parity", None)  # the runner compares nothing with a baseline that did not run
    data = GateData(load_gate_data().thresholds, CLAIMS)
    tables = render_tables(records, data)
    text = tables["support-matrix"]
    compile_ = _row(text, "flux")[_column(text, "compile")]
    assert compile_.startswith("compile: ➖<sup>") and "⚠" not in _row(text, "flux")[_column(text, "tea_cache")]
    assert "compile: not measured against a baseline: the baseline failed: worker died with signal SIGSEGV" in text
    flux = render_tables([r for r in records if r["model"] == "flux"], data)["compatibility"]
    rows = "".join(line for line in flux.splitlines() if line.startswith("|"))
    assert "⚠" not in rows and "✅" not in rows  # no pair of features judged against nothing
    verdict = next(v for v in gate_records(records, data).verdicts if v.key == "flux/compile")
    record = next(r for r in records if (r["model"], r["variant"]) == ("flux", "compile"))
    assert classify(record, verdict) == (
        FAILED,
        "not measured against a baseline: the baseline failed: worker died with signal SIGSEGV",
    )
    line = noise_floor_line([r for r in records if r["model"] == "flux"])
    assert line.startswith("Noise floor: not measured (the baseline failed: nothing to compare the re-run with)")


def test_performance_table_says_why_a_cell_did_not_pass():
    flux, wan = _tables()["performance-flux"], _tables()["performance-wan"]
    assert "| flash | – | – | – | – | – | – | skipped: not run, unsupported here: attention_backend: package" in flux
    assert "| skip |" not in flux and "| pass |" in flux
    assert "skipped: not run, not supported by omni-accel yet (a harness gap), as claimed: tea_cache: TeaCache" in wan
    assert "| pass (engaged, no effect on cpu) |" in wan


def test_compatibility_is_lower_triangular_with_rules():
    text = _tables()["compatibility"]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for index, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert cells[index] == "—" and all(c == "" for c in cells[index + 1 :])
    assert "✅" in text  # tea_cache + enable_cpu_offload measured together


# The two trailing spaces (a markdown line break) must survive injection too.
DOC = """# Support

Hand-written intro, kept byte for byte.\x20\x20
<!-- omni-accel:begin support-matrix -->
stale content
<!-- omni-accel:end support-matrix -->

Between blocks.
<!-- omni-accel:begin performance-flux -->
<!-- omni-accel:end performance-flux -->
trailing text without newline"""


def test_injection_replaces_only_the_blocks(tmp_path):
    tables = _tables()
    path = tmp_path / "support.md"
    path.write_text(DOC)
    assert inject_file(path, tables) == ["support-matrix", "performance-flux"]
    text = path.read_text()
    assert text.startswith(
        "# Support\n\nHand-written intro, kept byte for byte.  \n<!-- omni-accel:begin support-matrix -->\n"
    )
    assert "stale content" not in text and tables["support-matrix"] in text
    assert "\n<!-- omni-accel:end support-matrix -->\n\nBetween blocks.\n" in text
    assert text.endswith("<!-- omni-accel:end performance-flux -->\ntrailing text without newline")
    assert inject_file(path, tables) == []  # idempotent
    outside = text.split("<!-- omni-accel:begin")[0]
    assert outside == DOC.split("<!-- omni-accel:begin")[0]


def test_check_detects_a_stale_block_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import json

    from accel.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in results()) + "\n")
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(doc), "--check"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1 and "stale: support-matrix" in capsys.readouterr().out
    assert doc.read_text() == DOC
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(doc)])
    main()
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(doc), "--check"])
    main()  # fresh now: exit 0
    assert "stale: none" in capsys.readouterr().out


def test_unknown_block_name_is_bad_input():
    with pytest.raises(ConfigError, match=r"block 'nope' names no table\. Allowed: compatibility"):
        inject("<!-- omni-accel:begin nope -->\n<!-- omni-accel:end nope -->\n", _tables(), "x.md")


def test_noise_is_never_published_as_a_speedup():
    """A speedup inside the noise band reads ≈1.0x in the support matrix and the performance table."""
    from synthetic import record

    from accel.measure.speedup import NOISE

    records = [
        record("m", "baseline", {}, latency=0.2),
        record("m", "cache", {"tea_cache": 0.4}, speedup=1.6, ssim=0.99, psnr=40.0, speedup_ci={
            "ratio": 1.6, "low": 0.8, "high": 2.4, "confidence": 0.98, "n": 10, "method": "interleaved",
            "verdict": NOISE, "reason": "interval overlaps the noise band", "band": [0.9, 1.1],
        }),
    ]  # fmt: skip
    data = load_gate_data()
    assert "≈1.0x" in support_matrix(records, data) and "1.6" not in support_matrix(records, data).split("\n")[2]
    row = next(line for line in performance_table(records, "m", data).splitlines() if line.startswith("| cache "))
    assert "≈1.0x" in row and "1.60" not in row


def test_a_sequential_cell_against_cell_ratio_is_not_shown_as_a_speedup():
    """Timed one cell after the other, one contended baseline call made a 72x "speedup" in the coverage run: the
    tables show a dash for a sequential ratio (the warm medians stay in the performance table)."""
    from synthetic import record

    from accel.measure.speedup import UNVERIFIED

    records = [
        record("m", "baseline", {}, latency=2.97),
        record("m", "cache", {"tea_cache": 0.4}, speedup=54.8, ssim=0.99, psnr=40.0, speedup_ci={
            "ratio": 54.8, "low": None, "high": None, "confidence": None, "n": 1, "method": "sequential",
            "verdict": UNVERIFIED, "reason": "timed sequentially", "band": [0.95, 1.05],
        }),
    ]  # fmt: skip
    data = load_gate_data()
    matrix_row = support_matrix(records, data).split("\n")[2]
    assert "✅ – · 0.99" in matrix_row and "54" not in matrix_row, matrix_row
    row = next(line for line in performance_table(records, "m", data).splitlines() if line.startswith("| cache "))
    assert "| – |" in row and "54.8" not in row, row


def test_tables_publish_only_the_claims_the_noise_floor_verifies():
    """A results file without its noise-floor records (removed by hand, or a partial copy) holds 'faster'
    claims nothing verifies: the tables show them as the gate does, unverified (`1.50x?`), not as claims."""
    data = GateData(load_gate_data().thresholds, CLAIMS)
    records = results()
    with_floor = render_tables(records, data)
    without = render_tables([r for r in records if r["variant"] != "noise-floor"], data)
    claim = "1.50x [1.43–1.57]"
    assert claim in with_floor["performance-flux"] and claim in with_floor["support-matrix"]
    assert claim not in without["performance-flux"] and claim not in without["support-matrix"]
    assert "1.50x?" in without["performance-flux"], without["performance-flux"]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ("<!-- omni-accel:begin nope -->\n<!-- omni-accel:end nope -->\n", "block 'nope' names no table"),
        (
            "<!-- omni-accel:begin support-matrix -->\nno end marker\n",
            "block 'support-matrix' has no '<!-- omni-accel:end support-matrix -->' after its begin marker",
        ),
    ],
    ids=["unknown-block", "no-end-marker"],
)
def test_a_bad_second_file_leaves_the_first_unwritten(tmp_path, monkeypatch, capsys, second, message):
    # The review's run: `--inject good.md --inject bad.md` rewrote good.md, then exited 2 on bad.md.
    import json

    from accel.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in results()) + "\n")
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(DOC)
    bad.write_text("# Bad\n" + second)
    monkeypatch.setattr(sys, "argv", ["omni-accel", "table", str(run), "--inject", str(good), "--inject", str(bad)])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and f"bad.md: {message}" in err and len(err.strip().splitlines()) == 1, err
    assert good.read_text() == DOC and bad.read_text() == "# Bad\n" + second


def test_a_begin_marker_quoted_in_prose_is_not_a_block():
    text = "Blocks look like `<!-- omni-accel:begin NAME -->`.\n<!-- omni-accel:begin compatibility -->\n"
    text += "old\n<!-- omni-accel:end compatibility -->\n"
    new_text, changed = inject(text, _tables())
    assert changed == ["compatibility"] and new_text.startswith("Blocks look like `<!-- omni-accel:begin NAME -->`.")


def test_the_performance_table_shows_a_parallel_cells_memory_summed_over_its_ranks():
    """Rank 0's raw peak alone read as a memory reduction where both ranks hold the whole pipeline (issue 40)."""
    from synthetic import record

    from accel.results import peak_memory_bytes

    mib = 2**20
    baseline = record("wan", "baseline", {}, rss=900 * mib, cell_memory_bytes=500 * mib)
    ranks = [{"rank": 0, "cell_memory_bytes": 480 * mib}, {"rank": 1, "cell_memory_bytes": 470 * mib}]
    parallel = record(
        "wan", "cp", {"context_parallel": {"ulysses": 2}}, rss=700 * mib, cell_memory_bytes=950 * mib,
        rank_memory=ranks,
    )  # fmt: skip
    # What every table and ratio reads (accel.sweep.compare's memory_reduction too): the sum, not the raw peak.
    assert (peak_memory_bytes(baseline), peak_memory_bytes(parallel)) == (500 * mib, 950 * mib)
    parallel["memory_reduction"] = peak_memory_bytes(baseline) / peak_memory_bytes(parallel)
    text = performance_table([baseline, parallel], "wan", GateData(load_gate_data().thresholds, CLAIMS))
    row = next(line for line in text.splitlines() if line.startswith("| cp |"))
    assert "| 950 | 0.53x |" in row, row
    assert "its peak minus what the process held at its start" in text and "summed over its ranks" in text
