"""Known-incompatible feature combinations: ``feature_matrix/rules.yaml``'s, then those features declare
themselves (``Feature.conflicts``), checked before anything runs (profiles, ``apply``, pairwise planning).

A rule matches a variant when every item of its ``match`` list is met by a different feature of the
variant: an item names a feature or a family, optionally with options the feature must have.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from accel.errors import ConfigError, explain_error, format_location, unknown_choice


@dataclass(frozen=True)
class MatchItem:
    """One side of a rule: a feature or a family, with the options it must have."""

    feature: str | None
    family: str | None
    options: tuple[tuple[str, Any], ...] = ()

    def matches(self, name: str, options: Any) -> bool:
        from accel.features.registry import FEATURES

        if self.feature is not None and name != self.feature:
            return False
        if self.family is not None and FEATURES[name].family != self.family:
            return False
        return all(getattr(options, key, None) == value for key, value in self.options)

    def describe(self) -> str:
        what = self.feature or f"a {self.family} feature"
        if self.options:
            what += " with " + ", ".join(f"{k}={v}" for k, v in self.options)
        return what


@dataclass(frozen=True)
class ConflictRule:
    """Features that cannot run together, why, and where the rule comes from."""

    match: tuple[MatchItem, ...]
    reason: str
    source: str

    def matched_by(self, parsed: dict[str, Any]) -> tuple[str, ...] | None:
        """The variant's features that meet the rule (one per item), or None."""
        for chosen in itertools.permutations(parsed, len(self.match)):
            if all(item.matches(name, parsed[name]) for item, name in zip(self.match, chosen, strict=True)):
                return chosen
        return None


def parse_rules(data: dict[str, Any], where: str) -> list[ConflictRule]:
    """Rules from the YAML document ``data``; every named feature and family must be registered, and every
    key known (a misspelt ``reason`` or ``options`` would silently weaken a rule)."""
    from accel.features.registry import FEATURES

    families = {f.family for f in FEATURES.values()}
    unknown = [key for key in data if key not in ("rules", "order")]
    if unknown:
        raise ConfigError(f"{where}: {unknown_choice('key', unknown[0], ['order', 'rules'])}")
    raws = data.get("rules") or []
    if not isinstance(raws, list):
        raise ConfigError(f"{where}: rules: expected a list of rules, got {raws!r}")
    rules = []
    for index, raw in enumerate(raws):
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: rules[{index}]: expected a mapping with keys {', '.join(RULE_KEYS)}")
        for key in raw:
            if key not in RULE_KEYS:
                raise ConfigError(f"{where}: rules[{index}]: {unknown_choice('key', key, RULE_KEYS)}")
        match = raw.get("match") or []
        if not isinstance(match, list):
            raise ConfigError(f"{where}: rules[{index}].match: expected a list of {{feature|family, options}}")
        items = []
        for item in match:
            if not isinstance(item, dict) or set(item) - set(MATCH_KEYS):
                raise ConfigError(
                    f"{where}: rules[{index}].match: {item!r} must be a mapping with keys {', '.join(MATCH_KEYS)}"
                )
            feature, family = item.get("feature"), item.get("family")
            known = (feature in FEATURES) if feature else (family in families)
            options = item.get("options") or {}
            if bool(feature) == bool(family) or not known or not isinstance(options, dict):
                raise ConfigError(
                    f"{where}: rules[{index}].match: {item} must name one registered feature or family "
                    f"(features: {', '.join(sorted(FEATURES))}; families: {', '.join(sorted(families))})"
                )
            _check_match_options(feature, family, options, f"{where}: rules[{index}].match")
            items.append(MatchItem(feature, family, tuple(sorted(options.items()))))
        reason, source = raw.get("reason"), raw.get("source", "")
        if len(items) < 2 or not isinstance(reason, str) or not reason or not isinstance(source, str):
            raise ConfigError(f"{where}: rules[{index}]: needs at least two match items and a reason (text)")
        rules.append(ConflictRule(tuple(items), reason, source))
    return rules


def _check_match_options(feature: str | None, family: str | None, options: dict[str, Any], where: str) -> None:
    """Refuse a match item's options that no feature it names could ever have: an unknown option (a misspelt
    ``granularity``) or a value the feature refuses or reads differently (``granularity: ful``) would make the
    rule match nothing, silently. A family's option must be one a feature of the family takes, with a value it
    accepts as written."""
    from accel.features.registry import FEATURES

    candidates = [FEATURES[feature]] if feature else [f for f in FEATURES.values() if f.family == family]
    who = f"feature {feature}" if feature else f"family {family}"
    for key, value in options.items():
        taking = [f for f in candidates if key in f.config_cls.model_fields]
        if not taking:
            allowed = {name for f in candidates for name in f.config_cls.model_fields}
            raise ConfigError(f"{where}: {who}: {unknown_choice('option', str(key), allowed)}")
        problems = []
        for candidate in taking:
            try:
                parsed = candidate.parse_options({key: value})
            except ValidationError as error:
                location, suffix = explain_error(candidate.config_cls, error.errors()[0])
                problems.append(
                    f"options.{candidate.name}.{format_location(location)}: {error.errors()[0]['msg']}{suffix}"
                )
                continue
            except (TypeError, ValueError) as error:
                problems.append(f"options.{candidate.name}: {error}")
                continue
            if getattr(parsed, key) == value:
                break
            problems.append(f"{candidate.name} reads {value!r} as {getattr(parsed, key)!r}")
        else:
            raise ConfigError(f"{where}: {who}: options.{key}: {value!r} would never match ({problems[0]})")


RULE_KEYS = ("match", "reason", "source")
MATCH_KEYS = ("feature", "family", "options")


@functools.cache
def _file_rules(path: Path) -> tuple[ConflictRule, ...]:
    from accel.yaml_bounds import load_yaml_file

    return tuple(parse_rules(load_yaml_file(path, "rules"), str(path)))


@dataclass(frozen=True)
class OrderRule:
    """Features that combine only when ``first`` is applied before ``then`` (its stage is lower), why, and the
    source. The stages (``Feature.stage``) make the order; a rule catches a feature declared at the wrong one."""

    first: MatchItem
    then: MatchItem
    reason: str
    source: str


def parse_order(data: dict[str, Any], where: str) -> list[OrderRule]:
    """The ``order`` rules of the YAML document ``data``; every named feature and family must be registered."""
    from accel.features.registry import FEATURES

    families = {f.family for f in FEATURES.values()}
    rules = []
    raws = data.get("order") or []
    if not isinstance(raws, list):
        raise ConfigError(f"{where}: order: expected a list of {{first, then, reason, source}} entries")
    for index, raw in enumerate(raws):
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: order[{index}]: expected a mapping with keys first, then, reason, source")
        unknown = [key for key in raw if key not in ("first", "then", "reason", "source")]
        if unknown:
            choice = unknown_choice("key", unknown[0], ["first", "then", "reason", "source"])
            raise ConfigError(f"{where}: order[{index}]: {choice}")
        items = []
        for key in ("first", "then"):
            item = raw.get(key) or {}
            if not isinstance(item, dict):
                raise ConfigError(f"{where}: order[{index}].{key}: expected {{feature: NAME}} or {{family: NAME}}")
            feature, family = item.get("feature"), item.get("family")
            known = (feature in FEATURES) if feature else (family in families)
            if bool(feature) == bool(family) or not known:
                raise ConfigError(
                    f"{where}: order[{index}].{key}: {item} must name one registered feature or family "
                    f"(features: {', '.join(sorted(FEATURES))}; families: {', '.join(sorted(families))})"
                )
            items.append(MatchItem(feature, family))
        if not raw.get("reason"):
            raise ConfigError(f"{where}: order[{index}]: needs a reason")
        rules.append(OrderRule(items[0], items[1], raw["reason"], raw.get("source", "")))
    return rules


@functools.cache
def _file_order(path: Path) -> tuple[OrderRule, ...]:
    from accel.yaml_bounds import load_yaml_file

    return tuple(parse_order(load_yaml_file(path, "rules"), str(path)))


def load_order(path: Path | None = None) -> tuple[OrderRule, ...]:
    """The order rules shipped in ``feature_matrix/rules.yaml`` (or ``path``)."""
    from accel.data import data_dir

    return _file_order(path or data_dir("feature_matrix") / "rules.yaml")


def check_order(parsed: dict[str, Any], where: str, rules: tuple[OrderRule, ...] | None = None) -> None:
    """Raise a ConfigError when two features of a variant would be applied in an order a rule forbids."""
    from accel.features.registry import FEATURES

    for rule in load_order() if rules is None else rules:
        for first, then in itertools.permutations(parsed, 2):
            matched = rule.first.matches(first, parsed[first]) and rule.then.matches(then, parsed[then])
            if matched and int(FEATURES[first].stage) >= int(FEATURES[then].stage):
                raise ConfigError(
                    f"{where}: '{first}' must be applied before '{then}' ({rule.reason}; {rule.source}), but "
                    f"its stage {int(FEATURES[first].stage)} is not below {int(FEATURES[then].stage)}"
                )


def declared_rules() -> tuple[ConflictRule, ...]:
    """The conflicts features declare themselves (``Feature.conflicts``), as rules."""
    from accel.features.registry import FEATURES

    families = {f.family for f in FEATURES.values()}
    rules = []
    for feature in FEATURES.values():
        for index, conflict in enumerate(feature.conflicts):
            known = (conflict.feature in FEATURES) if conflict.feature else (conflict.family in families)
            if bool(conflict.feature) == bool(conflict.family) or not known:
                raise ConfigError(
                    f"feature {feature.name}: conflicts[{index}] must name one registered feature or family "
                    f"(features: {', '.join(sorted(FEATURES))}; families: {', '.join(sorted(families))})"
                )
            where = f"feature {feature.name}: conflicts[{index}]"
            _check_match_options(feature.name, None, dict(conflict.own_options), where)
            _check_match_options(conflict.feature, conflict.family, dict(conflict.options), where)
            own = MatchItem(feature.name, None, tuple(sorted(conflict.own_options)))
            other = MatchItem(conflict.feature, conflict.family, tuple(sorted(conflict.options)))
            rules.append(ConflictRule((own, other), conflict.reason, conflict.source or f"declared by {feature.name}"))
    return tuple(rules)


def load_rules(path: Path | None = None) -> tuple[ConflictRule, ...]:
    """The rule table shipped in ``feature_matrix/rules.yaml`` (or ``path``), then the features' own."""
    from accel.data import data_dir

    return _file_rules(path or data_dir("feature_matrix") / "rules.yaml") + declared_rules()


def find_conflict(
    parsed: dict[str, Any], rules: tuple[ConflictRule, ...] | None = None
) -> tuple[ConflictRule, tuple[str, ...]] | None:
    """The first rule the parsed features of a variant break, with the features that break it."""
    for rule in load_rules() if rules is None else rules:
        chosen = rule.matched_by(parsed)
        if chosen is not None:
            return rule, chosen
    return None


def check_conflicts(parsed: dict[str, Any], where: str, rules: tuple[ConflictRule, ...] | None = None) -> None:
    """Raise a ConfigError naming the features and the reason for the first rule a variant breaks."""
    found = find_conflict(parsed, rules)
    if found is not None:
        rule, chosen = found
        joined = "' and '".join(chosen)
        raise ConfigError(f"{where}: features '{joined}' cannot be combined: {rule.reason}")
    check_order(parsed, where)
