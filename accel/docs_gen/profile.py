"""The profile keys page (``docs/reference/profile.md``), from the pydantic models of ``accel.profile``; and the
option table of any pydantic model (type, default, allowed values, description, from ``model_json_schema()``),
which the features page uses for each feature's config class."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from pydantic import BaseModel

from accel.docs_gen.markdown import HEADER, cell, code


def _type_of(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON schema's type as a reader writes it in YAML: ``integer``, ``list of string``, ``a | null``."""
    if "$ref" in schema:
        return str(schema["$ref"].rsplit("/", 1)[1])
    if "anyOf" in schema:
        return " \\| ".join(_type_of(option, defs) for option in schema["anyOf"])
    if "const" in schema:
        return code(schema["const"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items") or {}
        return f"list of {_type_of(items, defs)}" if items else "list"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"mapping of string to {_type_of(values, defs)}"
        return "mapping"
    return str(kind or "any")


_BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minItems", "at least {} item(s)"),
    ("maxItems", "at most {} item(s)"),
    ("minLength", "at least {} character(s)"),
)


def _allowed(schema: dict[str, Any]) -> str:
    """Enumerated values and bounds of a field's schema (and of each ``anyOf`` option)."""
    parts: list[str] = []
    for option in schema.get("anyOf", [schema]):
        if "enum" in option:
            parts.append(", ".join(code(value) for value in option["enum"]))
        for key, word in _BOUNDS:
            if key in option:
                parts.append(word.format(option[key]) if "{}" in word else f"{word} {option[key]}")
    return "; ".join(parts) or "–"


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        return "each key's default (below)"
    return code(default)


def option_table(model: type[BaseModel], prefix: str = "") -> tuple[list[str], list[tuple[str, type[BaseModel]]]]:
    """The table of ``model``'s fields, and the nested models (key path, class) its fields hold."""
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    lines = ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, prop in schema.get("properties", {}).items():
        description = prop.get("description") or model.model_fields[name].description or "–"
        key = f"{prefix}{name}"
        lines.append(
            f"| `{key}` | {_type_of(prop, defs)} | {cell(_default(model, name))} | {cell(_allowed(prop))} "
            f"| {cell(description)} |"
        )
        for option in [prop, *prop.get("anyOf", [])]:
            target = option.get("items", option) if option.get("type") == "array" else option
            child = _model_in(model.model_fields[name].annotation)
            if "$ref" in target and child is not None:
                nested.append((key + ("[]" if option.get("type") == "array" else ""), child))
                break
    return lines, nested


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds: itself, the items of a list, or the non-null side of an optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def profile_page() -> str:
    """Every profile key, section by section, from ``accel.profile.Profile``."""
    from accel.profile import Profile

    out = [
        HEADER,
        "# Profile keys",
        "",
        "Every key a profile may hold, from the pydantic models of `accel/profile.py`. Every section is strict: an "
        'unknown key is refused with the allowed keys and a "did you mean"; values are taken as typed (`"3"` '
        'is not an integer, `"yes"` not a boolean) and no number may be infinite or NaN. A variant\'s '
        "`features` map feature names to their options: see [the features reference](features.md). How to "
        "write a profile: [Profiles](../profiles.md).",
        "",
    ]
    queue: list[tuple[str, type[BaseModel]]] = [("", Profile)]
    seen: set[type[BaseModel]] = set()
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        title = f"`{path}`" if path else "The profile (top level)"
        doc = inspect.cleandoc(model.__doc__ or "")
        out += [f"## {title}", "", f"`{model.__module__}.{model.__qualname__}`: {doc}" if doc else "", ""]
        lines, nested = option_table(model, prefix=f"{path}." if path else "")
        out += [*lines, ""]
        queue += nested
    return "\n".join(out).replace("\n\n\n", "\n\n")
