"""Exceptions that the CLI turns into a one-line message and an exit code.

Exit codes: 0 ok, 1 a gate failed, 2 bad input or something unavailable.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AccelError(Exception):
    """Base of the errors a user can act on; the message is printed as is, without a traceback."""

    exit_code = 2


class ConfigError(AccelError):
    """Bad input: a profile, a path, an option. The message names the file, the key and what is allowed.

    Always one line: a key or value that holds a line break (fuzzing found YAML keys such as ``"\\n"``) is
    shown with the break escaped.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(str(message).replace("\r", "\\r").replace("\n", "\\n"))


class Interrupted(AccelError):
    """The user stopped a sweep (Ctrl-C); the message says what was kept and how to continue."""

    exit_code = 130


class UnavailableError(AccelError):
    """Something requested cannot run here (missing package, no network, no GPU)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest choice, or an empty string when nothing is close."""
    matches = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" Did you mean '{matches[0]}'?" if matches else ""


def unknown_choice(what: str, word: str, choices: Iterable[str]) -> str:
    """A sentence naming an unknown value, the closest valid one and every valid one."""
    choices = sorted(str(c) for c in choices)
    return f"unknown {what} '{word}'.{did_you_mean(word, choices)} Allowed: {', '.join(choices)}"
