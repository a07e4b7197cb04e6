"""``omni-accel gate --strict`` and the plugin's ``--accel-strict`` (issue 41): a CI job that qualified nothing
is not green. Without it, the summary says plainly that nothing was qualified."""

from __future__ import annotations

import json

from conftest import invoke
from synthetic import record, results


def _run(tmp_path, records):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def _all_skipped():
    """A baseline and its floor measured; every variant unsupported here (skipped, never passed)."""
    kept = [r for r in results() if r["model"] == "flux"]
    references = [r for r in kept if r["variant"] in ("baseline", "noise-floor")]
    variants = [
        {**{k: r[k] for k in ("model", "variant", "features")}, "status": "unsupported"}
        | {"unsupported_scope": "environment", "error": "needs CUDA"}
        for r in kept
        if r["variant"] not in ("baseline", "noise-floor")
    ]
    return references + variants


def test_strict_fails_a_run_whose_variants_were_all_skipped(tmp_path, monkeypatch, capsys):
    run = _run(tmp_path, _all_skipped())
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert code == 0, out  # the plain gate: nothing failed ...
    assert "**nothing was qualified: none of the" in out and "variant cell(s) passed** (`--strict`" in out, out
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(run), "--strict")
    assert code == 1, out  # ... the strict gate: nothing was qualified
    assert "**FAILED (--strict: " in out and "variant cell(s) skipped (flux/" in out, out


def test_strict_fails_one_skipped_variant_beside_a_passing_one(tmp_path, monkeypatch, capsys):
    base = [r for r in results() if r["model"] == "flux" and r["variant"] in ("baseline", "noise-floor", "compile")]
    skipped = {**record("flux", "flash", {"attention_backend": "flash"}), "status": "unsupported"}
    skipped |= {"unsupported_scope": "environment", "error": "flash_attn not installed"}
    run = _run(tmp_path, [*base, skipped])
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(run))
    assert code == 0 and "nothing was qualified" not in out, out
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(run), "--strict")
    assert code == 1 and "--strict: 1 variant cell(s) skipped (flux/flash)" in out, out


def test_strict_passes_a_run_that_qualified_every_variant(tmp_path, monkeypatch, capsys):
    base = [r for r in results() if r["model"] == "flux" and r["variant"] in ("baseline", "noise-floor", "compile")]
    code, out, _ = invoke(monkeypatch, capsys, "gate", str(_run(tmp_path, base)), "--strict")
    assert code == 0 and "FAILED" not in out, out


def test_the_plugins_strict_option_fails_the_session(pytester):
    (pytester.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _all_skipped()))
    plain = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "-v")
    assert plain.ret == 0
    plain.stdout.fnmatch_lines(["*omni-accel: nothing was qualified*"])
    # node ids carry the file the cells come from (they were "::accel[...]" with no file part)
    plain.stdout.fnmatch_lines(["results.jsonl::accel?flux/baseline? PASSED*"])
    strict = pytester.runpytest_subprocess("--accel-results", "results.jsonl", "--accel-strict")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*omni-accel: FAILED: --strict: * variant cell(s) skipped*"])
