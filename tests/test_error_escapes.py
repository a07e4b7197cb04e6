"""Control characters in what an error echoes (issue 25's review): a NUL or a terminal escape in a variant or model
name was printed raw, cutting or restyling the one-line error; now the name is refused and shown escaped."""

from __future__ import annotations

import pytest
from conftest import invoke, small_profile

from accel.errors import ConfigError, UnavailableError, escape_controls


def _plan_errors(profile, write_profile, monkeypatch, capsys) -> tuple[int, str]:
    code, _, err = invoke(monkeypatch, capsys, "plan", str(write_profile(profile)))
    return code, err


@pytest.mark.parametrize("name", ["a\x00b", "fast\x1b[2Kok", "v\x7f", "v\x85w", "v\u2028w", "v\tw"])
def test_a_variant_name_with_a_control_character_is_refused_and_shown_escaped(name, write_profile, monkeypatch, capsys):
    profile = small_profile(variants=[{"name": name, "features": {}}])
    code, err = _plan_errors(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and err.endswith("\n"), (code, err)
    assert err[:-1].isprintable(), repr(err)  # nothing raw: no NUL, ESC, DEL, separator
    assert f"variants[0].name: '{escape_controls(name)}' holds a control character" in err, err


def test_a_model_name_with_a_nul_is_refused_and_shown_escaped(write_profile, monkeypatch, capsys):
    profile = small_profile()
    profile["models"][0]["name"] = "flux\x00"
    code, err = _plan_errors(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and "\x00" not in err and "models[0].name: 'flux\\x00' holds a control character" in err, err


def test_a_variant_naming_a_model_with_a_nul_is_shown_escaped(write_profile, monkeypatch, capsys):
    profile = small_profile(variants=[{"name": "v", "features": {}, "models": ["x\x00y"]}])
    code, err = _plan_errors(profile, write_profile, monkeypatch, capsys)
    assert code == 2 and "\x00" not in err and "variants[0].models: 'x\\x00y' is not a model name" in err, err


def test_every_accel_error_is_one_printable_line():
    assert str(ConfigError("a\nb\r\x00\x1b[31m\u2029")) == "a\\nb\\r\\x00\\x1b[31m\\u2029"
    assert str(UnavailableError("cannot load 'x\x00'")) == "cannot load 'x\\x00'"
    # printable text, accents and a space kept as they are; an escape is not escaped twice
    assert escape_controls("café naïve 日本") == "café naïve 日本"
    assert str(ConfigError(str(ConfigError("a\x00")))) == "a\\x00"
