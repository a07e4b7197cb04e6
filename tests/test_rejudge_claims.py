"""benchmarks/rejudge_claims.py: a finished run's speed claims judged again under the current rules from its own
pairs (a subprocess over a committed run: outside mutmut's unit-level selection, whose copy has no reports/)."""

from __future__ import annotations


def test_a_finished_run_is_judged_again_from_its_own_pairs():
    """benchmarks/rejudge_claims.py on the committed under-load run (its floor undecided, [0.74, 1.05]): the
    cache rungs it published as unverified clear the band beyond every bias that floor allows; the attention
    control stays noise. The committed evidence file is what the script prints."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = root / "reports" / "quickstart-under-load"
    printed = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "rejudge_claims.py"), str(run)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = dict(line.split(": ", 1) for line in printed.splitlines())
    for rung in ("cache-dit-0.5", "cache-dit-1-uncapped", "tea-cache-0.8", "tea-cache-1.6"):
        assert lines[f"mini-flux/{rung}"].startswith("published unverified"), lines
        assert "; now faster " in lines[f"mini-flux/{rung}"], lines
    assert "; now noise ≈1.0x?" in lines["mini-flux/attn-native"]
    assert printed == (run / "evidence" / "rejudged.txt").read_text()
