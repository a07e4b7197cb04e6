"""Finding the native pipeline for a checkpoint: the in-tree ones (registered by importing them here) and
out-of-tree ones named by import path (``native_pipeline: package.module:ClassName``).

Above both ``contract.py`` (the base class and the ``register_native`` decorator) and the in-tree pipelines
that use it, so neither imports the other's importer.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

# Imported for their side effect: each registers its in-tree pipeline.
import accel.native.flux
import accel.native.qwen_image  # noqa: F401
from accel.errors import ConfigError, unknown_choice
from accel.native.contract import NATIVE_PIPELINES, NativePipeline


def import_native(path: str) -> type[NativePipeline]:
    """An out-of-tree native pipeline class from ``package.module:ClassName``."""
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(
            f"native_pipeline '{path}': cannot import it ({error}); use 'package.module:ClassName'"
        ) from error
    if not (isinstance(cls, type) and issubclass(cls, NativePipeline)):
        raise ConfigError(f"native_pipeline '{path}' is not a subclass of accel.native.NativePipeline")
    return cls


def native_for(checkpoint: str | Path, override: str | None = None) -> type[NativePipeline]:
    """The native pipeline class for a diffusers-layout checkpoint directory."""
    if override:
        return import_native(override)
    index = Path(checkpoint) / "model_index.json"
    class_name = json.loads(index.read_text()).get("_class_name", "?")
    return native_for_class(class_name, where=str(index))


def native_for_class(class_name: str, override: str | None = None, where: str = "source") -> type[NativePipeline]:
    """The native pipeline class registered for a diffusers pipeline class name (or ``override``)."""
    if override:
        return import_native(override)
    if class_name not in NATIVE_PIPELINES:
        raise ConfigError(
            f"{where}: {unknown_choice('native pipeline for _class_name', class_name, NATIVE_PIPELINES)}; "
            "use target: adapter, or register one with native_pipeline: package.module:ClassName"
        )
    return NATIVE_PIPELINES[class_name]
