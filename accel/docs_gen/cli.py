"""The CLI page (``docs/reference/cli.md``): every ``omni-accel`` command with its usage line, arguments and
options (type, default, help), walked from typer's own command tree."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from typing import Any

from accel.docs_gen.markdown import HEADER, cell


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    if hasattr(command, "commands"):  # a group (typer ships its own copy of click: no isinstance on click's classes)
        for name in sorted(command.commands):
            yield from _commands(command.commands[name], (*path, name))


_TYPE_NAMES = {"str": "text", "int": "integer", "float": "number", "bool": "boolean", "Path": "path"}


def _annotation_name(param: Any) -> str:
    """A typer parameter's Python type as a word (``path``, ``integer``, ``list of path``)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is None:
        return "text"
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is list and arguments:
        return "list of " + _TYPE_NAMES.get(getattr(arguments[0], "__name__", ""), str(arguments[0]))
    if arguments and typing.get_origin(annotation) is not list:
        return " or ".join(_TYPE_NAMES.get(getattr(a, "__name__", ""), str(a)) for a in arguments)
    name = getattr(annotation, "__name__", str(annotation))
    return _TYPE_NAMES.get(name, name)


def _usage(command: Any, path: tuple[str, ...]) -> str:
    """``omni-accel gate [OPTIONS] RESULTS``: the command, ``[OPTIONS]`` and its arguments in order."""
    if hasattr(command, "commands"):
        return f"{' '.join(path)} COMMAND [ARGS]..."
    pieces = [*path, "[OPTIONS]"]
    for param in command.params:
        if param.param_type_name != "argument":
            continue
        word = (param.name or "").upper() + ("..." if param.nargs == -1 else "")
        pieces.append(word if param.required else f"[{word}]")
    return " ".join(pieces)


def cli_page() -> str:
    """Every command of ``omni-accel`` and its arguments and options, from typer's command tree."""
    import typer.main

    from accel.cli import app

    root = typer.main.get_command(app)
    out = [
        HEADER,
        "# CLI",
        "",
        "Every `omni-accel` command, from the typer application in `accel/cli.py`. Exit codes: 0 ok, 1 a gate "
        "failed (or, for `sweep`, every cell of a model failed), 2 bad input or something unavailable, 130 "
        "interrupted. How the commands fit together: [The CLI](../cli.md).",
        "",
    ]
    for path, command in _commands(root, ("omni-accel",)):
        if path == ("omni-accel",):
            continue
        out += [
            f"## `{' '.join(path)}`",
            "",
            " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split()),
            "",
        ]
        out += ["```", _usage(command, path), "```", ""]
        if hasattr(command, "commands"):
            out += [f"- [`{' '.join(path)} {name}`](#{'-'.join((*path, name))})" for name in sorted(command.commands)]
            out.append("")
            continue
        rows = ["| argument or option | type | default | what |", "|---|---|---|---|"]
        for param in command.params:
            if param.name == "help":
                continue
            option = param.param_type_name == "option"
            names = (
                ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
                if option
                else f"`{(param.name or '').upper()}`"
            )
            default = param.default if not callable(param.default) else None
            shown = "required" if param.required else ("–" if default in (None, (), False) else f"`{default}`")
            kind = "flag" if option and param.is_flag else _annotation_name(param)
            rows.append(f"| {names} | {cell(kind)} | {cell(shown)} | {cell(getattr(param, 'help', None) or '–')} |")
        out += [*rows, ""] if len(rows) > 2 else ["No arguments or options.", ""]
    return "\n".join(out)
