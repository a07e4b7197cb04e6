"""``omni-accel plan`` marks the cells this machine will refuse (issue 41): before a sweep, the user sees which
features cannot run here and why, instead of finding the cells skipped afterwards."""

from __future__ import annotations

from conftest import invoke, small_profile


def test_plan_marks_a_cell_this_machine_refuses(write_profile, monkeypatch, capsys):
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        import pytest

        pytest.skip("flash_attn is installed here: no feature of the profile is refused")
    variants = [
        {"name": "flash", "features": {"attention_backend": "flash"}},
        {"name": "native", "features": {"attention_backend": "native"}},
    ]
    code, out, err = invoke(monkeypatch, capsys, "plan", str(write_profile(small_profile(variants=variants))))
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("tiny-flux/")}
    assert "[refused here: attention_backend: package flash_attn not installed" in lines["tiny-flux/flash"], out
    assert "refused here" not in lines["tiny-flux/native"] and "refused here" not in lines["tiny-flux/baseline"]
