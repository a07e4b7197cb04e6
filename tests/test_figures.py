"""Figures of a run: only cells that ran and were measured validly are speed/quality points."""

from __future__ import annotations

from synthetic import record, results

from accel.report.figures import _plottable, speed_quality_scatter


def test_failed_and_invalid_cells_stay_out_of_the_speed_quality_scatter(tmp_path):
    records = results()
    # Not engaged: it ran, has a speedup and parity, and its status says it failed.
    records.append({**record("flux", "fbc-idle", {"first_block_cache": 0.1}, speedup=1.4), "status": "failed"})
    records.append(record("flux", "too-fast", {"compile": "full"}, speedup=9.0, invalid_measurement="below floor"))
    plotted = {r["variant"] for r in _plottable(records)}
    assert "fbc-idle" not in plotted and "too-fast" not in plotted
    assert {"compile", "tea", "fbc-loose", "offload"} <= plotted  # ran: in parity or not, they are points
    assert "noise-floor" not in plotted and "baseline" not in plotted
    assert speed_quality_scatter(tmp_path, records).is_file()
