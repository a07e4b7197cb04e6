"""The feature registry: built-in features and those other packages register through an entry point.

A feature is registered once, under its ``name`` (the spelling used in YAML, the CLI and results), and is
found again by that name or by the type of its config (``apply(pipe, CacheDitConfig(...))``). Packages add
features through the entry point group ``omni_accel.features``; each entry point names a ``Feature``
subclass (or instance)::

    [project.entry-points."omni_accel.features"]
    my_cache = "my_package.my_cache:MyCache"

Entry points are read the first time the registry is looked at, so a third-party feature works in profiles,
``omni-accel features``, gates and tables exactly like a built-in one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from accel.errors import ConfigError, unknown_choice
from accel.features.base import AnyFeature, Feature, FeatureConfig

ENTRY_POINT_GROUP = "omni_accel.features"


class FeatureRegistry(Mapping[str, AnyFeature]):
    """Features by name (a read-only mapping), with a second index by config type."""

    def __init__(self) -> None:
        self._features: dict[str, AnyFeature] = {}
        self._by_config: dict[type[FeatureConfig], AnyFeature] = {}
        self._sources: dict[str, str] = {}
        self._discovered = False

    def register(self, feature: AnyFeature, source: str = "built-in") -> AnyFeature:
        """Add ``feature``; a ConfigError when its name or config class is taken or it lacks a declaration."""
        missing = [
            attribute
            for attribute in ("name", "family", "feature_class", "stage", "config_cls", "description")
            if not hasattr(feature, attribute)
        ]
        if missing:
            raise ConfigError(f"feature from {source}: {type(feature).__name__} does not declare {', '.join(missing)}")
        if feature.name in self._features:
            raise ConfigError(
                f"feature from {source}: the name '{feature.name}' is already registered by "
                f"{self._sources[feature.name]}; choose another name"
            )
        if feature.config_cls in self._by_config:
            taken = self._by_config[feature.config_cls].name
            raise ConfigError(
                f"feature from {source}: '{feature.name}' reuses {feature.config_cls.__name__}, the config of "
                f"'{taken}'; every feature needs its own config class (apply() finds the feature by its type)"
            )
        self._features[feature.name] = feature
        self._by_config[feature.config_cls] = feature
        self._sources[feature.name] = source
        return feature

    def unregister(self, name: str) -> None:
        """Remove a registered feature (tests; a plugin that is uninstalled)."""
        feature = self._features.pop(name)
        self._by_config.pop(feature.config_cls, None)
        self._sources.pop(name, None)

    def source(self, name: str) -> str:
        """Where a feature was registered from: ``built-in`` or the entry point."""
        self._discover()
        return self._sources[name]

    def for_config(self, config: Any) -> AnyFeature:
        """The feature whose config class is ``type(config)``; a ConfigError listing the config classes."""
        self._discover()
        feature = self._by_config.get(type(config))
        if feature is None:
            known = sorted(cls.__name__ for cls in self._by_config)
            raise ConfigError(
                f"no feature takes a {type(config).__name__}; pass one of the feature configs: {', '.join(known)}"
            )
        return feature

    def discover(self) -> None:
        """(Re)read the ``omni_accel.features`` entry points; already registered features are kept."""
        from importlib.metadata import entry_points

        self._discovered = True
        for entry_point in entry_points(group=ENTRY_POINT_GROUP):
            source = f"entry point '{entry_point.name}' ({entry_point.value})"
            if any(known == source for known in self._sources.values()):
                continue
            try:
                loaded = entry_point.load()
            except Exception as error:  # a broken plugin is named, never skipped silently
                raise ConfigError(f"feature {source} failed to load: {type(error).__name__}: {error}") from error
            feature = loaded() if isinstance(loaded, type) else loaded
            if not isinstance(feature, Feature):
                raise ConfigError(f"feature {source} is a {type(feature).__name__}, not an accel Feature")
            self.register(feature, source)

    def _discover(self) -> None:
        if not self._discovered:
            self.discover()

    def __getitem__(self, name: str) -> AnyFeature:
        self._discover()
        return self._features[name]

    def __iter__(self) -> Iterator[str]:
        self._discover()
        return iter(self._features)

    def __len__(self) -> int:
        self._discover()
        return len(self._features)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._features


FEATURES = FeatureRegistry()


def get_feature(name: str) -> AnyFeature:
    """The feature registered as ``name``; a ConfigError listing the names otherwise."""
    if name not in FEATURES:
        raise ConfigError(unknown_choice("feature", name, FEATURES))
    return FEATURES[name]
