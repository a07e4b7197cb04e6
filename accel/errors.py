"""Exceptions that the CLI turns into a one-line message and an exit code.

Exit codes: 0 ok, 1 a gate failed, 2 bad input or something unavailable.
"""

from __future__ import annotations

import difflib
import types
import typing
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any


class AccelError(Exception):
    """Base of the errors a user can act on; the message is printed without a traceback, on one line: a key or
    value holding a line break or another control character is shown escaped (``escape_controls``)."""

    exit_code = 2

    def __init__(self, message: str = "") -> None:
        super().__init__(escape_controls(str(message)))


class ConfigError(AccelError):
    """Bad input: a profile, a path, an option. The message names the file, the key and what is allowed.

    Always one line: a key or value that holds a line break (fuzzing found YAML keys such as ``"\\n"``), a NUL
    or a terminal escape is shown escaped.
    """


class Interrupted(AccelError):
    """The user stopped a sweep (Ctrl-C); the message says what was kept and how to continue."""

    exit_code = 130


class UnavailableError(AccelError):
    """Something requested cannot run here (missing package, no network, no GPU)."""


class ModelUnavailable(UnavailableError):
    """A model cannot run at all; ``scope`` says why: ``environment`` (this diffusers lacks one of its
    classes) or ``model`` (its call needs an input the workload cannot give). A cell records it as
    unsupported with that scope and reason, not as a failure. ``owner`` who refuses it (``library``, ``model``,
    ``device`` or ``harness``, as ``accel.features.base.Owner``); default: ``device`` for the scope
    ``environment``, ``model`` for ``model``."""

    def __init__(self, scope: str, reason: str, owner: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope
        self.owner = owner or {"environment": "device"}.get(scope, "model")


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) and Unicode line or paragraph separator written as an
    escape (``\\n``, ``\\x00``, ``\\x1b``, ``\\u2028``): printed raw, a NUL truncates or corrupts the line a
    terminal or log shows, an ESC can restyle or rewrite it, and a separator splits the one-line error."""
    if text.isprintable():  # the common case: nothing to escape (a space is printable)
        return text
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            out.append(f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a character ``escape_controls`` would escape."""
    return escape_controls(text) != text


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
    if origin is typing.Annotated:  # Annotated[float, Field(ge=0)] inside a union carries its own bounds
        metadata = [m for item in annotation.__metadata__ for m in (getattr(item, "metadata", None) or [item])]
        return describe_type(args[0], _bounds_text(metadata) or bounds)
    if origin in (typing.Union, types.UnionType):
        kinds = [describe_type(a, bounds) for a in args if a is not type(None)]
        return " or ".join([*kinds, *(["null"] if type(None) in args else [])])
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    plural = {bool: "booleans", int: "whole numbers", float: "numbers", str: "texts"}
    if origin is tuple and args and Ellipsis not in args:
        return f"a list of {len(args)} {plural.get(args[0], 'values')}"
    if origin in (list, tuple):
        return "a list" + (f" of {plural[args[0]]}" if args and args[0] in plural else "")
    if origin is dict or annotation is dict:
        return "a mapping"
    if hasattr(annotation, "model_fields"):
        return f"a mapping with keys {', '.join(annotation.model_fields)}"
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a text"}
    text = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return f"{text} {bounds}" if bounds else text


def _bounds_text(metadata: list[Any]) -> str:
    """Pydantic bound constraints (``Gt(0)``, ``Le(1)``) in words: ``> 0 and <= 1``."""
    return " and ".join(f"{sign} {getattr(m, attr)}" for m in metadata for attr, sign in _BOUNDS if hasattr(m, attr))


def _bounds(field: Any) -> str:
    return _bounds_text(field.metadata)


def describe_field(field: Any) -> str:
    """What a pydantic field accepts, in words, from its annotation and its bounds (``Field(gt=0, le=1)``), so
    a message never drifts from the model."""
    return describe_type(field.annotation, _bounds(field))


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``Model`` or ``Model | None``), or None."""
    annotation = _without_none(annotation)
    return annotation if hasattr(annotation, "model_fields") else None


def explain_error(model: Any, error: Mapping[str, Any]) -> tuple[tuple[Any, ...], str]:
    """The key path of a pydantic error (one of ``ValidationError.errors()`` on ``model``) without pydantic's
    union tags (``gpus_per_cell.float`` is ``gpus_per_cell``), and `` , got X (allowed: ...)`` describing the
    field or list element the value was for; the suffix is empty when the error is not about a value (a
    missing key, a custom check whose message already says what to do) or the path leaves the model."""
    location: list[Any] = []
    annotation: Any = model
    bounds = ""
    for part in error["loc"]:
        inner = _without_none(annotation)
        origin, args = typing.get_origin(inner), typing.get_args(inner)
        if _model_in(inner) is not None:
            fields = inner.model_fields
            if part not in fields:
                return tuple(error["loc"]), ""
            annotation, bounds = fields[part].annotation, _bounds(fields[part])
        elif isinstance(part, int) and origin in (list, tuple) and args:
            annotation, bounds = (args[part] if origin is tuple and part < len(args) else args[0]), ""
        elif origin is dict and len(args) == 2 and isinstance(part, str):
            annotation, bounds = args[1], ""
        elif origin in (typing.Union, types.UnionType):
            continue  # pydantic names the union member it tried: not a key of the user's file
        else:
            return tuple(error["loc"]), ""
        location.append(part)
    if not any(kind in error["type"] for kind in _VALUE_ERRORS) or annotation is model:
        return tuple(location), ""
    given = error["input"]
    if error["type"] == "literal_error":  # pydantic's message already lists the choices
        return tuple(location), f", got {given!r}"
    suffix = f", got {given!r} (allowed: {describe_type(annotation, bounds)})"
    if isinstance(given, str) and "number" in describe_type(annotation) and _is_float_text(given):
        suffix += _text_number_hint(given, whole="whole number" in describe_type(annotation))
    return tuple(location), suffix


def _text_number_hint(given: str, whole: bool) -> str:
    """How to write a number YAML read as text: a quoted one (``"4"``, ``"3.5"``) without its quotes; an exponent
    YAML 1.1 does not read (``1e23``, ``5e-2``) with a decimal point, or, for a whole number, in digits."""
    import yaml

    try:
        unquoted = yaml.safe_load(given)
    except yaml.YAMLError:
        unquoted = given
    if isinstance(unquoted, (int, float)) and not isinstance(unquoted, bool):  # YAML reads it as a number bare
        return f"; it was written as text (quoted): write it without quotes ({given.strip()})"
    if whole:
        return "; YAML reads it as text: write the whole number in digits"
    return f"; YAML reads {given} as text: write it with a decimal point ({float(given)!r})"


def _is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_location(location: tuple[Any, ...]) -> str:
    """A key path as a user writes it: ``variants[0].features.cache_dit``."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"
