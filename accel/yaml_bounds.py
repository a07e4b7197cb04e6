"""The one YAML loader of the project: every YAML file it reads (profiles, thresholds, claims, performance
baselines, prompt sets, rules, engine mappings) goes through ``load_yaml_file`` or ``parse_yaml``.

Strict where PyYAML is lax:

- A key written twice in one mapping is refused, naming both lines (PyYAML silently keeps the last value,
  so a second ``measure:`` section or ``features:`` key replaced the first without a word).
- The text must be UTF-8 (``read_utf8_text`` names the line and the byte) and at most ``MAX_FILE_BYTES``.
- The work a document can ask for is bounded: alias expansion, nesting and size. PyYAML shares an anchored
  node between its aliases, so composing an alias bomb is cheap; the blow-up comes later, when the document
  is validated, copied and hashed as if every alias were written out. ``BoundedLoader`` counts, while
  composing, how many nodes and scalar characters the document expands to (each node's expanded size is
  computed once, from its children's), and stops at the first node that passes the budget, naming its key
  path. Recursive aliases and nesting deeper than the limit are refused.
- Values are plain JSON types (``check_plain``): no dates, bytes, sets, non-string keys or NaN.

Every error is a ``ConfigError`` of one line naming the file (and the key path or line).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel.errors import ConfigError

# A real profile or data file has a few hundred YAML nodes; an alias bomb (nine levels of nine aliases)
# expands to 9**9 nodes from 1 kB of text and exhausted 4 GB while hashing.
MAX_FILE_BYTES = 4 * 2**20
MAX_EXPANDED_NODES = 100_000
MAX_EXPANDED_CHARS = 16 * 2**20
MAX_NESTING = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"


class ExpansionError(ValueError):
    """The document expands past the budget, nests too deep or refers to itself."""


class DuplicateKeyError(ValueError):
    """A mapping holds the same key twice."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with an expansion budget and a duplicate-key check, both applied while composing
    (before any construction), so each error can name its key path."""

    def __init__(
        self,
        stream: str,
        max_nodes: int = MAX_EXPANDED_NODES,
        max_chars: int = MAX_EXPANDED_CHARS,
        max_depth: int = MAX_NESTING,
    ) -> None:
        super().__init__(stream)
        self.max_nodes = max_nodes
        self.max_chars = max_chars
        self.max_depth = max_depth
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded scalar chars)
        self._path: list[str | int | None] = []

    def _where(self) -> str:
        text = ""
        for part in self._path:
            if isinstance(part, int):
                text += f"[{part}]"
            elif part is not None:
                text += f".{part}" if text else part
        return text or "(top level)"

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]  # unannotated in types-PyYAML
            node = self.anchors.get(anchor)
            if node is not None and id(node) not in self._sizes:  # its own composition is not finished
                raise ExpansionError(f"{self._where()}: alias '*{anchor}' refers to a node that contains it")
            return super().compose_node(parent, index)
        if isinstance(index, ScalarNode):
            label: str | int | None = str(index.value)
        elif isinstance(index, int):
            label = index
        else:
            label = None  # a mapping key
        self._path.append(label)
        if len(self._path) > self.max_depth:
            raise ExpansionError(f"{self._where()}: nested more than {self.max_depth} levels deep")
        node = super().compose_node(parent, index)
        if isinstance(node, MappingNode):
            self._check_duplicates(node)
        self._account(node)
        self._path.pop()
        return node

    def _check_duplicates(self, node: MappingNode) -> None:
        """Refuse a key written twice in ``node`` (the same tag and text: ``steps`` and ``steps``, ``1`` and
        ``1``); merge keys (``<<: *base``) may be overridden, as YAML intends."""
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
                continue
            line = key.start_mark.line + 1
            first = seen.get((key.tag, key.value))
            seen.setdefault((key.tag, key.value), line)
            if first is not None:
                lines = f"lines {first} and {line}" if first != line else f"twice on line {line}"
                raise DuplicateKeyError(
                    f"{self._where()}: duplicate key '{key.value}' ({lines}): the second would "
                    "silently replace the first; write each key once"
                )

    def _account(self, node: Node | None) -> None:
        if isinstance(node, ScalarNode):
            size = (1, len(node.value))
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [item for pair in node.value for item in pair]
            nodes, chars = 1, 0
            for child in children:
                child_nodes, child_chars = self._sizes[id(child)]
                nodes += child_nodes
                chars += child_chars
            size = (nodes, chars)
        self._sizes[id(node)] = size
        if size[0] > self.max_nodes or size[1] > self.max_chars:
            raise ExpansionError(
                f"{self._where()}: expands to more than {self.max_nodes} YAML nodes or {self.max_chars} characters "
                "once its aliases are written out (an alias bomb?); write the values without nested aliases"
            )


def read_utf8_text(path: Path, what: str, advice: str, error: type[Exception] = ValueError) -> str:
    """The text of ``path``; ``error`` with one line naming the file (and, for bad UTF-8, the line and the
    byte) when it cannot be read. ``what`` names the file's kind ("the profile"), ``advice`` says how to mend
    a file that is not UTF-8 ("save the profile as UTF-8")."""
    try:
        raw = path.read_bytes()
    except OSError as failure:
        raise error(f"{path}: cannot read {what}: {failure.strerror or failure}") from failure
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as failure:
        line = raw[: failure.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte 0x{raw[failure.start]:02x}); {advice}") from failure


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document, composed within the expansion budget, without duplicate keys; errors are
    ConfigErrors naming ``source``."""
    loader = None
    try:
        loader = BoundedLoader(text)
        return loader.get_single_data()
    except (ExpansionError, DuplicateKeyError) as error:
        raise ConfigError(f"{source}: {error}") from error
    except yaml.reader.ReaderError as error:  # a control character YAML does not allow
        line = text[: error.position].count("\n") + 1
        raise ConfigError(
            f"{source}:{line}: malformed YAML: character #x{error.character:04x} is not allowed"
        ) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}: malformed YAML{where}: {problem}") from error
    except (ValueError, TypeError, OverflowError, RecursionError) as error:  # e.g. a timestamp like 2024-13-45
        raise ConfigError(f"{source}: malformed YAML: a value cannot be read: {error}") from error
    finally:
        if loader is not None:
            loader.dispose()


def check_plain(data: Any, source: str, where: str = "", what: str = "a profile", nan: bool = False) -> None:
    """Reject what JSON cannot hold the same way (dates, bytes, sets, non-string keys, NaN).

    The resolved profile is stored as JSON-compatible YAML and compared on ``--resume``: such a value would
    come back different and make every resume look like a changed profile. The gate's data files are held to
    the same: NaN compares false with everything, so a NaN limit or tolerance would decide nothing.
    ``nan``: NaN is left to the caller, whose range check names the allowed values.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise ConfigError(f"{source}: {where or '(top level)'}: key {key!r} is not a string; quote it")
            check_plain(value, source, f"{where}.{key}" if where else key, what, nan)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            check_plain(value, source, f"{where}[{index}]", what, nan)
    elif isinstance(data, float) and data != data and not nan:
        raise ConfigError(f"{source}: {where or '(top level)'}: NaN is not a value {what} can hold")
    elif data is not None and not isinstance(data, (str, int, float, bool)):
        raise ConfigError(
            f"{source}: {where or '(top level)'}: a YAML {type(data).__name__} value is not allowed "
            "(use strings, numbers, booleans, lists and mappings; quote dates)"
        )


def why_not_a_file(path: Path, what: str) -> str:
    """Why ``path`` is not a regular file to read, said for what it is: missing, a link loop, a link to nothing,
    a character device (``/dev/null``), a FIFO, a socket; ``what`` names the file's kind ("profile")."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"{path}: is a symbolic link loop, not a {what} file (point the link at the file itself)"
        if os.path.islink(path):
            return f"{path}: is a symbolic link to {os.readlink(path)}, which does not exist: no {what} file there"
        if error.errno == errno.ENOENT:
            return f"{path}: {what} file not found"
        return f"{path}: cannot read the {what} file: {error.strerror or error}"
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISFIFO: "a FIFO (named pipe)",
        stat.S_ISSOCK: "a socket",
    }
    kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    return f"{path}: is {kind}, not a regular {what} file (give the file itself)"


def load_yaml_file(
    path: Path, what: str, *, advice: str | None = None, mapping: bool = True, ranges_checked: bool = False
) -> Any:
    """The document of the YAML file ``path``, checked as this module says (``what``: the file's kind, a noun
    such as "profile" or "thresholds"; ``advice``: how to mend a file that is not UTF-8). With ``mapping`` the
    document must be a mapping (an empty file is ``{}``). Every error is a one-line ConfigError naming the
    file. ``ranges_checked``: the caller checks every number against its range, which refuses NaN naming the
    allowed values (the gate's data files)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a {what} file (give the YAML file itself)")
    if not path.is_file():
        raise ConfigError(why_not_a_file(path, what))
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the {what}: {error.strerror or error}") from error
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size} bytes; a {what} file is at most {MAX_FILE_BYTES} bytes")
    text = read_utf8_text(path, f"the {what}", advice or f"save the {what} file as UTF-8", ConfigError)
    data = parse_yaml(text, str(path))
    check_plain(data, str(path), what=f"a {what} file", nan=ranges_checked)
    if mapping:
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping (key: value lines) in the {what} file, got a {_kind(data)}")
    return data


def _kind(value: Any) -> str:
    return {list: "list", str: "text", int: "number", float: "number", bool: "boolean"}.get(type(value), "value")
