"""Prompt sets with expected attributes (ground truth for adherence): built-in ones and YAML files.

Read by the profile (``workload.prompt_set`` fills the prompts) and by the sweep's adherence scoring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.errors import ConfigError, did_you_mean
from accel.yaml_bounds import load_yaml_file
from accel.zoo.world import HELD_OUT_EXPECTED, HELD_OUT_PROMPTS, PALETTE, POSITIONS, SHAPES

_ALLOWED = {
    "background": tuple(PALETTE),
    "colour": tuple(PALETTE),
    "shape": SHAPES,
    "position": tuple(POSITIONS),
}
_REQUIRED = ("background", "colour", "shape")  # position may be left open
BUILTIN_PROMPT_SETS = {"shapes-held-out": "the held-out combinations of the shapes world (never seen in training)"}


def load_prompt_set(name: str) -> list[dict[str, Any]]:
    """Entries ``{prompt, expect: {background, colour, shape[, position]}}`` of a built-in set or a YAML file.

    ``position`` may be left out of ``expect`` for a prompt that leaves it open; it is then not scored.

    ``name`` is a built-in set's name or a path; a relative path is read from the working directory (a
    profile loaded from a file has already made it absolute against the profile's folder).

    Raises ValueError naming the file or the allowed names (the profile turns it into a ConfigError).
    """
    if name == "shapes-held-out":
        return [
            {"prompt": prompt, "expect": expected.attributes()}
            for prompt, expected in zip(HELD_OUT_PROMPTS, HELD_OUT_EXPECTED, strict=True)
        ]
    path = Path(name).expanduser()
    if not path.is_file():
        hint = did_you_mean(path.name, BUILTIN_PROMPT_SETS)
        raise ValueError(
            f"prompt set '{name}' is neither a file nor a built-in set.{hint} "
            f"Built-in: {', '.join(BUILTIN_PROMPT_SETS)}"
        )
    try:
        data = load_yaml_file(path, "prompt set", advice="a prompt set is a UTF-8 YAML file", mapping=False) or {}
    except ConfigError as error:
        raise ValueError(str(error)) from error
    entries = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a mapping with a non-empty list 'prompts'")
    extra = sorted(set(data) - {"prompts", "description"})
    if extra:
        raise ValueError(f"{path}: unknown key '{extra[0]}'. Allowed keys: prompts, description")
    return check_prompt_entries(entries, str(path))


def check_prompt_entries(entries: list[Any], where: str, list_key: str = "prompts") -> list[dict[str, Any]]:
    """``entries`` if each is ``{prompt, expect}`` with an expectation the world can draw; ValueError naming
    ``where`` (a file, or the profile holding them) and the entry (``list_key[i]``) otherwise."""
    seen: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        expect = entry.get("expect") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) or not isinstance(expect, dict):
            raise ValueError(f"{where}: {list_key}[{index}]: expected {{prompt: <text>, expect: {{...}}}}")
        extra = sorted(set(entry) - {"prompt", "expect"})
        if extra:
            raise ValueError(f"{where}: {list_key}[{index}]: unknown key '{extra[0]}'. Allowed keys: prompt, expect")
        if entry["prompt"] in seen:
            first = seen[entry["prompt"]]
            raise ValueError(
                f"{where}: {list_key}[{index}]: '{entry['prompt']}' is listed twice (first at {list_key}[{first}]): "
                "each prompt has one expectation"
            )
        seen[entry["prompt"]] = index
        for key in expect:
            if key not in _ALLOWED:
                raise ValueError(
                    f"{where}: {list_key}[{index}].expect: unknown key {str(key)!r}.{did_you_mean(str(key), _ALLOWED)} "
                    f"Allowed keys: {', '.join(_ALLOWED)}"
                )
        missing = [key for key in _REQUIRED if key not in expect]
        if missing:
            raise ValueError(
                f"{where}: {list_key}[{index}].expect: missing key '{missing[0]}'; keys must be background, colour, "
                "shape and optionally position"
            )
        for key, allowed in _ALLOWED.items():
            if key in expect and expect[key] not in allowed:
                raise ValueError(
                    f"{where}: {list_key}[{index}].expect.{key}: {expect[key]!r} is not one of the world's "
                    f"{key}s. Allowed: {', '.join(allowed)}"
                )
        if expect["background"] == expect["colour"]:
            raise ValueError(
                f"{where}: {list_key}[{index}].expect: the background and the shape are both {expect['colour']}: the "
                "world draws a shape in another colour than its background"
            )
    return entries
