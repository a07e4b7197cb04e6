"""Process-global state that features change as a side effect, saved and restored by name.

Features undo their own changes on ``remove``; what the libraries they drive change besides (dynamo's
caches, inductor flags torchao sets, diffusers' active attention backend) is declared on the feature
(``Feature.global_state``) and restored here after a cell that ran in the sweep's own process (the inline
executor). A plugin that changes other global state registers a saver with ``register_global_state``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from accel.errors import ConfigError, unknown_choice

# name -> save(): takes a snapshot and returns the function that restores it.
Saver = Callable[[], Callable[[], None]]


def _dynamo() -> Callable[[], None]:
    import torch

    config = torch._dynamo.config.save_config()

    def restore() -> None:
        torch._dynamo.reset()
        torch._dynamo.config.load_config(config)

    return restore


def _inductor() -> Callable[[], None]:
    import torch

    config = torch._inductor.config.save_config()
    return lambda: torch._inductor.config.load_config(config)


def _attention_backends() -> Callable[[], None]:
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry as registry

    active = registry._active_backend
    backends = dict(registry._backends)

    def restore() -> None:
        registry._active_backend = active
        registry._backends.clear()
        registry._backends.update(backends)

    return restore


GLOBAL_STATE: dict[str, Saver] = {
    "dynamo": _dynamo,
    "inductor": _inductor,
    "attention_backends": _attention_backends,
}


def register_global_state(name: str, save: Saver) -> None:
    """Add a kind of global state features may declare: ``save()`` snapshots it and returns its restorer."""
    if name in GLOBAL_STATE:
        raise ConfigError(f"global state '{name}' is already registered")
    GLOBAL_STATE[name] = save


def declared_global_state() -> list[str]:
    """Every kind of global state a registered feature declares, in a fixed order; unknown names are errors."""
    from accel.features.registry import FEATURES

    names: dict[str, None] = {}
    for feature in FEATURES.values():
        for name in feature.global_state:
            if name not in GLOBAL_STATE:
                known = unknown_choice("global state", name, GLOBAL_STATE)
                raise ConfigError(f"feature {feature.name}: global_state: {known}")
            names[name] = None
    return list(names)


@contextmanager
def global_state_restored(names: Iterable[str] | None = None) -> Iterator[None]:
    """Inside: anything; after: the named global state (default: every declared kind) as before."""
    restorers = [GLOBAL_STATE[name]() for name in (declared_global_state() if names is None else names)]
    try:
        yield
    finally:
        for restore in reversed(restorers):
            restore()
