"""A YAML loader that bounds the work a document can ask for: alias expansion, nesting and size.

PyYAML shares an anchored node between its aliases, so composing an alias bomb is cheap; the blow-up
comes later, when the document is validated, copied and hashed as if every alias were written out.
``BoundedLoader`` counts, while composing, how many nodes and scalar characters the document expands to
(each node's expanded size is computed once, from its children's), and stops at the first node that
passes the budget, naming its key path. Recursive aliases and nesting deeper than the limit are refused.
``read_utf8_text`` reads such a file's text first, with errors that name the file, the line and the byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class ExpansionError(ValueError):
    """The document expands past the budget, nests too deep or refers to itself."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with an expansion budget checked while composing (before any construction)."""

    def __init__(self, stream: str, max_nodes: int, max_chars: int, max_depth: int) -> None:
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
        self._account(node)
        self._path.pop()
        return node

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
