"""What a target is (the ``Target`` protocol) and the target kinds a profile's ``models[].target`` names.

Every kind is registered here, once: the profile's schema takes its allowed values from ``TARGETS``, the
sweep's cell asks ``is_engine``, the engine mapping takes its paths from it, and ``accel.targets.build``'s
``make_target`` builds the in-process ones. A kind's class is named by import path and imported when a target
is made, so the profile can read the registry without importing torch or diffusers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from accel.errors import ConfigError


@runtime_checkable
class Target(Protocol):
    """How the sweep loads and drives one pipeline in its own process."""

    device: str
    pipeline: Any
    # True when the pipeline times its own stages (``stage_report()``); else the stage recorder hooks them.
    explicit_stages: bool

    def load(self, extra_kwargs: dict[str, Any] | None = None) -> Any:
        """Load the pipeline onto ``device`` (``extra_kwargs``: features' load-time kwargs); returns it."""
        ...

    def generate(self, request: Any) -> list[Any]:
        """Run one request; one float32 array in [0, 1] per generated image or video."""
        ...


@dataclass(frozen=True)
class TargetKind:
    """One value of ``models[].target``: what it runs, and the class that runs it in this process (None: an
    engine that runs in its own environment, driven by ``accel.engines``)."""

    name: str
    description: str
    target_class: str | None = None  # "package.module:ClassName"

    @property
    def engine(self) -> bool:
        return self.target_class is None


TARGETS: dict[str, TargetKind] = {
    kind.name: kind
    for kind in (
        TargetKind("adapter", "any diffusers DiffusionPipeline as a black box", "accel.targets.adapter:AdapterTarget"),
        TargetKind("native", "omni-accel's own pipeline", "accel.targets.native:NativeTarget"),
        TargetKind("vllm-omni", "vLLM-Omni's native pipeline"),
        TargetKind("vllm-omni-adapter", "vLLM-Omni's diffusers backend"),
    )
}


def register_target(kind: TargetKind) -> None:
    """Add a target kind (before profiles naming it are loaded)."""
    if kind.name in TARGETS:
        raise ConfigError(f"target '{kind.name}' is already registered")
    TARGETS[kind.name] = kind


def describe_targets() -> str:
    """``adapter: ...; native: ...`` for the profile schema's description."""
    return "; ".join(f"{kind.name}: {kind.description}" for kind in TARGETS.values())


def engine_targets() -> tuple[str, ...]:
    """The kinds that run in an engine's own environment."""
    return tuple(name for name, kind in TARGETS.items() if kind.engine)


def is_engine(name: str) -> bool:
    """Whether the target kind runs in an engine's own environment (not a ``Target`` in this process)."""
    return name in TARGETS and TARGETS[name].engine
