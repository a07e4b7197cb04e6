"""Exceptions that the CLI turns into a one-line message and an exit code.

Exit codes: 0 ok, 1 a gate failed, 2 bad input or something unavailable.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any


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


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
# Pydantic error types whose message says what was wrong but not what is allowed.
_VALUE_ERRORS = ("greater_than", "less_than", "_parsing", "_type", "literal_error", "int_from_float", "finite_number")


def describe_type(annotation: Any, bounds: str = "") -> str:
    """A type annotation in words: ``a whole number >= 1``, ``one of regional, full``, ``a number or null``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [describe_type(a, bounds) for a in args if a is not type(None)]
        return " or ".join([*kinds, *(["null"] if type(None) in args else [])])
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (list, tuple):
        plural = {bool: "booleans", int: "whole numbers", float: "numbers", str: "texts"}
        return "a list" + (f" of {plural[args[0]]}" if args and args[0] in plural else "")
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a text"}
    text = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return f"{text} {bounds}" if bounds else text


def describe_field(field: Any) -> str:
    """What a pydantic field accepts, in words, from its annotation and its bounds (``Field(gt=0, le=1)``), so
    a message never drifts from the model."""
    bounds = [
        f"{sign} {getattr(meta, attr)}" for meta in field.metadata for attr, sign in _BOUNDS if hasattr(meta, attr)
    ]
    return describe_type(field.annotation, " and ".join(bounds))


def _nested_model(annotation: Any) -> Any:
    """The pydantic model inside an annotation (``Model``, ``list[Model]``, ``Model | None``), or None."""
    if hasattr(annotation, "model_fields"):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def allowed_values(model: Any, error: Mapping[str, Any]) -> str:
    """`` , got X (allowed: ...)`` for a pydantic error (one of ``ValidationError.errors()``) on a field of
    ``model`` or of a model nested in it; an empty string when the location names no field or the error is
    not about the value (a missing key, a custom check whose message already says what to do)."""
    if not any(kind in error["type"] for kind in _VALUE_ERRORS):
        return ""
    field = None
    for part in error["loc"]:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return ""
        field = fields[part]
        model = _nested_model(field.annotation)
    if field is None:
        return ""
    if error["type"] == "literal_error":  # pydantic's message already lists the choices
        return f", got {error['input']!r}"
    return f", got {error['input']!r} (allowed: {describe_field(field)})"
