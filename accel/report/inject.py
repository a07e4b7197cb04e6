"""Docs injection: replace generated blocks between markers in any markdown file, nothing else.

A block is ``<!-- omni-accel:begin NAME -->`` ... ``<!-- omni-accel:end NAME -->``; everything outside the
markers is left byte for byte. ``check`` reports the blocks whose content differs from the fresh tables.
"""

from __future__ import annotations

import re
from pathlib import Path

from accel.errors import ConfigError

# A begin marker on a line of its own (one quoted in prose, inside backticks, is not a block).
BEGIN = re.compile(r"^<!-- omni-accel:begin (?P<name>[\w.+-]+) -->$", re.MULTILINE)
BLOCK = re.compile(
    r"(<!-- omni-accel:begin (?P<name>[\w.+-]+) -->\n)(?P<body>.*?)(<!-- omni-accel:end (?P=name) -->)", re.DOTALL
)


def inject(text: str, tables: dict[str, str], source: str = "<text>") -> tuple[str, list[str]]:
    """The text with every marked block replaced, and the names of the blocks whose content changed."""
    changed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in tables:
            raise ConfigError(f"{source}: block '{name}' names no table. Allowed: {', '.join(sorted(tables))}")
        body = tables[name] if tables[name].endswith("\n") else tables[name] + "\n"
        if body != match.group("body"):
            changed.append(name)
        return match.group(1) + body + match.group(4)

    new_text = BLOCK.sub(replace, text)
    filled = [match.group("name") for match in BLOCK.finditer(text)]
    begun = [match.group("name") for match in BEGIN.finditer(text)]
    for name in dict.fromkeys(begun):
        if filled.count(name) < begun.count(name):
            raise ConfigError(
                f"{source}: block '{name}' has no '<!-- omni-accel:end {name} -->' after its begin marker: add it"
            )
    if not filled:
        raise ConfigError(f"{source}: no '<!-- omni-accel:begin NAME -->' block to fill")
    return new_text, changed


def read_injectable(path: Path) -> str:
    """The UTF-8 text of a markdown file to fill; a missing, directory or binary file is a ConfigError.

    ``omni-accel table`` calls it for every ``--inject`` file before it reads the run, so a wrong file
    the user named is reported before any problem of the run.
    """
    from accel.yaml_bounds import read_utf8_text

    if path.is_dir():
        raise ConfigError(f"{path}: --inject: is a directory; give the markdown file to fill")
    if not path.is_file():
        from accel.yaml_bounds import why_not_a_file

        raise ConfigError(
            why_not_a_file(path, "--inject").replace("--inject file not found", "file to inject into not found")
        )
    # A binary file (or another encoding) is refused before anything is written; it was a UnicodeDecodeError.
    return read_utf8_text(path, "the file to inject into", "--inject fills markdown files, UTF-8 text", ConfigError)


def inject_file(path: Path, tables: dict[str, str], check: bool = False) -> list[str]:
    """Fill the blocks of ``path`` (or, with ``check``, only report the stale ones); returns those names."""
    new_text, changed = inject(read_injectable(path), tables, str(path))
    if changed and not check:
        write_injected(path, new_text)
    return changed


def write_injected(path: Path, text: str) -> None:
    """Write a filled markdown file; an unwritable one is a ConfigError naming it."""
    try:
        path.write_text(text)
    except OSError as error:
        raise ConfigError(f"{path}: cannot write the filled blocks: {error.strerror or error}") from error
