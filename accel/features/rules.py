"""Known-incompatible feature combinations, read from ``feature_matrix/rules.yaml``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from accel.errors import ConfigError


@dataclass(frozen=True)
class ConflictRule:
    """Features that cannot run together, why, and where the rule comes from."""

    features: frozenset[str]
    reason: str
    source: str


def parse_rules(data: dict, where: str) -> list[ConflictRule]:
    """Rules from the YAML document ``data``; every named feature must be registered."""
    from accel.features import FEATURES

    rules = []
    for index, raw in enumerate(data.get("rules") or []):
        names = frozenset(raw.get("features", []))
        unknown = sorted(names - set(FEATURES))
        if len(names) < 2 or unknown or not raw.get("reason"):
            raise ConfigError(
                f"{where}: rules[{index}]: needs 2+ registered features and a reason (unknown: {unknown})"
            )
        rules.append(ConflictRule(names, raw["reason"], raw.get("source", "")))
    return rules


@functools.cache
def load_rules(path: Path | None = None) -> tuple[ConflictRule, ...]:
    """The rule table shipped in ``feature_matrix/rules.yaml``."""
    from accel.profile import data_dir

    path = path or data_dir("feature_matrix") / "rules.yaml"
    return tuple(parse_rules(yaml.safe_load(path.read_text()) or {}, str(path)))


def check_conflicts(names: list[str], where: str, rules: tuple[ConflictRule, ...] | None = None) -> None:
    """Raise a ConfigError for the first rule whose features are all in ``names``."""
    for rule in load_rules() if rules is None else rules:
        if rule.features <= set(names):
            joined = "' and '".join(sorted(rule.features))
            raise ConfigError(f"{where}: features '{joined}' cannot be combined: {rule.reason}")
