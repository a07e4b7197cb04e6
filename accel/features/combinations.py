"""Pairwise combination planning: a covering set of variants far smaller than the full product.

Given features and, for each, the option values to try, build variants such that every option value
appears at least once and every compatible pair of features appears together at least once. Pairs the
conflict rules exclude are skipped and reported with the rule's reason. Greedy construction: each new
variant starts from an uncovered pair (or option) and adds every further feature whose option covers
something new without breaking a rule. Written here because no maintained library covers pairs under
our conflict rules (allpairspy and friends know nothing of them) and the greedy set is small and
deterministic.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from accel.errors import ConfigError


@dataclass
class PairwisePlan:
    """The generated variants and what they cover."""

    variants: list[dict[str, Any]]  # name, features (as written), configs (parsed)
    covered_pairs: set[frozenset[str]]
    skipped_pairs: dict[frozenset[str], str] = field(default_factory=dict)
    full_product: int = 0


def _compatible(chosen: dict[str, Any]) -> str | None:
    """None when the parsed features can run together, else the rule's reason."""
    from accel.features.rules import find_conflict

    found = find_conflict(chosen)
    return None if found is None else found[0].reason


def plan_pairwise(options: dict[str, list[Any]], where: str, prefix: str = "pairwise") -> PairwisePlan:
    """Variants covering every option value and every compatible feature pair of ``options``."""
    from accel.features import parse_feature_options

    if len(options) < 2:
        raise ConfigError(f"{where}.features: pairwise needs at least two features, got {len(options)}")
    parsed: dict[str, list[Any]] = {}
    for name, values in options.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.features.{name}: expected a non-empty list of option values")
        parsed[name] = [parse_feature_options(name, raw, f"{where}.features") for raw in values]

    names = list(options)
    skipped: dict[frozenset[str], str] = {}
    wanted_pairs: set[frozenset[str]] = set()
    for a, b in itertools.combinations(names, 2):
        reasons = [_compatible({a: x, b: y}) for x, y in itertools.product(parsed[a], parsed[b])]
        if all(reasons):
            skipped[frozenset((a, b))] = reasons[0] or ""
        else:
            wanted_pairs.add(frozenset((a, b)))
    wanted_options = {(n, i) for n in names for i in range(len(parsed[n]))}

    variants: list[dict[str, Any]] = []
    covered_pairs: set[frozenset[str]] = set()
    while wanted_pairs or wanted_options:
        chosen: dict[str, int] = {}
        seed = sorted(wanted_pairs, key=lambda p: sorted(p))[0] if wanted_pairs else None
        order = sorted(seed) + [n for n in names if n not in seed] if seed else names
        for name in order:
            # The seed pair's features join even before they gain anything: they are why the variant exists.
            best, best_gain = None, (-1 if seed and name in seed else 0)
            for index in range(len(parsed[name])):
                trial = {n: parsed[n][i] for n, i in chosen.items()} | {name: parsed[name][index]}
                if _compatible(trial):
                    continue
                gain = sum(1 for other in chosen if frozenset((name, other)) in wanted_pairs)
                gain += 1 if (name, index) in wanted_options else 0
                if gain > best_gain:
                    best, best_gain = index, gain
            if best is not None:
                chosen[name] = best
        newly = {frozenset(p) for p in itertools.combinations(chosen, 2)} & wanted_pairs
        if not newly and not wanted_options & set(chosen.items()):
            break  # nothing left that any variant could cover
        for a, b in itertools.combinations(chosen, 2):
            pair = frozenset((a, b))
            wanted_pairs.discard(pair)
            covered_pairs.add(pair)
        wanted_options -= set(chosen.items())
        features = {n: options[n][i] for n, i in chosen.items()}
        configs = {n: parsed[n][i] for n, i in chosen.items()}  # parsed above, checked against the rules
        variants.append({"name": f"{prefix}-{len(variants) + 1:02d}", "features": features, "configs": configs})

    full = 1
    for values in options.values():
        full *= len(values) + 1  # each feature off or at one of its values
    return PairwisePlan(variants, covered_pairs, skipped, full - 1)
