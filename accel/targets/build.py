"""``make_target``: the in-process target of a model spec, its kind's class imported by the path the registry
(``accel.targets.registry``) names. Apart from the registry because the classes it imports (the adapter and
native targets) read the profile, which reads the registry: the registry stays plain data under the profile.
"""

from __future__ import annotations

import importlib
from typing import Any

from accel.errors import ConfigError, UnavailableError, unknown_choice
from accel.targets.registry import TARGETS, Target


def make_target(spec: Any) -> Target:
    """The in-process target for a model spec (its ``target`` kind's class, built with the spec)."""
    kind = TARGETS.get(spec.target)
    if kind is None:
        raise ConfigError(unknown_choice("target", spec.target, TARGETS))
    if kind.target_class is None:
        raise UnavailableError(f"target '{kind.name}' runs in its engine's own environment, not in this process")
    module_name, _, class_name = kind.target_class.partition(":")
    target: Target = getattr(importlib.import_module(module_name), class_name)(spec)
    return target
