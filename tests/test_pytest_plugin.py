"""The pytest plugin, end to end under pytester: pass, fail (with measured values) and skip items.

Each run is a subprocess: an in-process run puts sys.modules back as it found it, so a module first imported
inside it (pandas' pyarrow extension types, by the plugin's results table) is imported afresh by a later test,
and pyarrow's process-wide registry refuses the second registration ("pandas.period already defined").
"""

from __future__ import annotations

import pytest
import yaml
from conftest import small_profile

VARIANTS = [
    {"name": "attn-native", "features": {"attention_backend": "native"}},  # bit-identical: passes anything
    {"name": "attn-math", "features": {"attention_backend": "_native_math"}},  # PSNR ~133 dB, not identical
    {"name": "attn-flash", "features": {"attention_backend": "flash"}},  # not installed here: skipped
]


def test_plugin_turns_cells_into_items_with_measured_values(pytester):
    profile = small_profile(["tiny-flux"], VARIANTS)
    profile["measure"]["noise_floor"] = False
    pytester.makefile(".yaml", ci=yaml.safe_dump(profile))
    # A deliberately strict lossless PSNR: 200 dB only bit-identical outputs reach.
    limits = {"image": {"ssim": 0.98, "psnr": 200.0}, "video": {"ssim": 0.95, "psnr": 200.0}}
    strict = {
        "lossless": {"float32": limits},
        "lossless_minimum": limits,
        "lossy": {"cache": {"ssim": 0.9, "psnr": 25.0}},
    }
    pytester.makefile(".yaml", strict=yaml.safe_dump(strict))
    result = pytester.runpytest_subprocess("--accel-profile", "ci.yaml", "--accel-thresholds", "strict.yaml", "-rs")
    result.assert_outcomes(passed=2, failed=1, skipped=1)  # baseline + attn-native pass
    result.stdout.fnmatch_lines(
        [
            "*tiny-flux/attn-math failed the gate:*",
            "*PSNR dB, lossless (image, float32): measured 1??.*, required >= 200",
            "*SKIPPED*not run, unsupported here: attention_backend: package flash_attn not installed*",
        ]
    )


def test_plugin_is_inactive_without_its_options(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_plugin_gates_an_existing_results_file(pytester):
    import json

    from synthetic import results

    # written directly: pytester.makefile strips the final newline, and a last line without one is cut short
    (pytester.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results()))
    result = pytester.runpytest_subprocess("--accel-results", "results.jsonl")
    # 20 records, 20 items (the baselines and noise floors are judged as the gate judges them). The shipped
    # claims say nothing about these models: 2 baselines, 2 noise floors and 6 cells pass; 7 fail (fbc-loose
    # and int8+tiling out of parity, tiling unclaimed, attn-math below float32's lossless threshold, slicing
    # unstable, pab without evidence, taylorseer failed); 3 did not run and are skipped (compile-full, flash,
    # tea), never passed.
    result.assert_outcomes(passed=10, failed=7, skipped=3)
    result.stdout.fnmatch_lines(["*flux/fbc-loose failed the gate:*", "*SSIM, lossy (cache): measured 0.71*"])


def test_accel_only_runs_the_cells_and_nothing_else_pytest_collected(pytester):
    """In a project whose testpaths hold its own tests, --accel-only deselects them: only the cells run."""
    import json

    from synthetic import results

    (pytester.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results()))
    pytester.makepyfile("def test_plain():\n    assert True\n")
    both = pytester.runpytest_subprocess("--accel-results", "results.jsonl")
    both.assert_outcomes(passed=11, failed=7, skipped=3)  # the project's test beside the 20 cells
    only = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "--accel-only")
    only.assert_outcomes(passed=10, failed=7, skipped=3, deselected=1)


@pytest.mark.parametrize(
    "content, message",
    [
        (b'\xff\xfe{"model"\n{}\n', "results.jsonl:1: not UTF-8 text"),
        (b"[1, 2]\n", "results.jsonl:1: expected a JSON object (one cell's record), got a list"),
        (b'{"model": "m", "variant": "v"}\n', "results.jsonl:1: the record has no 'status'"),
    ],
)
def test_a_bad_results_file_is_a_usage_error_naming_the_file(content, message, pytester):
    """It used to be an INTERNALERROR traceback (exit 3) from pytest_configure; now pytest's usage error (exit 4),
    one line, as `omni-accel gate` gives one line and exit 2."""
    (pytester.path / "results.jsonl").write_bytes(content)
    result = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "--accel-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, (result.ret, result.stderr.str())
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: ") and message in errors[0], errors
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str() and "Traceback" not in result.stderr.str()


def test_a_missing_results_file_or_bad_thresholds_file_is_a_usage_error(pytester):
    result = pytester.runpytest_subprocess("--accel-results", "nowhere.jsonl", "--accel-only")
    assert (
        result.ret == pytest.ExitCode.USAGE_ERROR
        and "ERROR: nowhere.jsonl: results file not found" in result.stderr.str()
    )
    (pytester.path / "t.yaml").write_bytes(b"lossy: [\n")
    result = pytester.runpytest_subprocess("--accel-results", "nowhere.jsonl", "--accel-thresholds", "t.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "ERROR: t.yaml: malformed YAML" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_last_line_cut_short_is_noted_in_the_header(pytester):
    import json

    from synthetic import results

    records = results()
    text = "".join(json.dumps(r) + "\n" for r in records[:-1]) + json.dumps(records[-1])[:40]
    (pytester.path / "results.jsonl").write_text(text)
    result = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "--accel-only")
    result.stdout.fnmatch_lines([f"note: results.jsonl:{len(records)}: last line cut short*"])


def test_cells_are_selected_by_their_node_ids_with_k_and_deselect(pytester):
    """The ways to pick cells (docs/gates.md): ``-k`` on the cell's name and ``--deselect`` with the full node
    id, which carries the results' (or profile's) path."""
    import json

    from synthetic import results

    records = results()
    (pytester.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    key = f"{records[0]['model']}/{records[0]['variant']}"
    picked = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "-k", key)
    picked.assert_outcomes(passed=1, deselected=len(records) - 1)
    dropped = pytester.runpytest_subprocess(
        "--accel-results", "results.jsonl", "--deselect", f"results.jsonl::accel[{key}]"
    )
    assert dropped.parseoutcomes()["deselected"] == 1


def test_a_pasted_node_id_reruns_exactly_that_cell(pytester):
    """The node id a run prints, given back as an argument, runs that one cell: with ``--accel-results``, and
    alone (the file collector takes the results file); a run directory's node ids name its results file."""
    import json

    from synthetic import results

    records = results()
    run = pytester.mkdir("run")
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    failing = next(r for r in records if r["variant"] == "fbc-loose")
    key = f"{failing['model']}/{failing['variant']}"
    whole = pytester.runpytest_subprocess("--accel-results", "run", "-rf")
    whole.stdout.fnmatch_lines([f"FAILED run/results.jsonl::accel[[]{key}[]]*"])
    # beside the project's tests (pytest collects tests/, not run/): the cells are added with the same node ids
    pytester.mkpydir("tests").joinpath("test_plain.py").write_text("def test_plain():\n    assert True\n")
    beside = pytester.runpytest_subprocess("--accel-results", "run", "tests", "-rf")
    beside.stdout.fnmatch_lines([f"FAILED run/results.jsonl::accel[[]{key}[]]*"])
    node_id = f"run/results.jsonl::accel[{key}]"
    for args in (["--accel-results", "run", node_id], [node_id]):
        again = pytester.runpytest_subprocess(*args, "-rf")
        again.assert_outcomes(failed=1)
        again.stdout.fnmatch_lines(
            ["*SSIM, lossy (cache): measured 0.71*", f"FAILED run/results.jsonl::accel[[]{key}[]]*"]
        )


def test_no_other_yaml_or_jsonl_file_is_collected(pytester):
    """Only the file of ``--accel-results`` (or a pasted cell node id) is collected: a profile, a results file
    and a YAML file beside the tests are not, in a plain run or beside the cells."""
    import json

    from synthetic import results

    records = results()
    (pytester.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (pytester.path / "other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pytester.makefile(".yaml", ci=yaml.safe_dump(small_profile(["tiny-flux"], VARIANTS)))
    pytester.makepyfile("def test_plain():\n    assert True\n")
    pytester.runpytest_subprocess(".", "ci.yaml", "results.jsonl").assert_outcomes(passed=1)
    beside = pytester.runpytest_subprocess("--accel-results", "results.jsonl", ".", "other.jsonl", "ci.yaml")
    beside.assert_outcomes(passed=11, failed=7, skipped=3)  # the project's test and the 20 cells, once each


def test_a_pasted_node_id_measures_only_that_cell_of_a_profile(pytester):
    """Re-running one cell of a profile measures that cell and its model's baseline, not the whole sweep."""
    import json

    profile = small_profile(["tiny-flux"], VARIANTS)
    profile["measure"]["noise_floor"] = False
    pytester.makefile(".yaml", ci=yaml.safe_dump(profile))
    result = pytester.runpytest_subprocess("ci.yaml::accel[tiny-flux/attn-native]", "--accel-out", "out", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ci.yaml::accel[[]tiny-flux/attn-native[]] PASSED*"])
    lines = (pytester.path / "out" / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["variant"] for line in lines) == ["attn-native", "baseline"]
