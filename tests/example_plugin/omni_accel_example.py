"""A third-party feature, as another package would ship it: ``transformer_call_counter``.

It accelerates nothing; it counts the transformer's forward calls during each pipeline call, which is all a
feature needs to show the whole contract: a config, its class and stage, ``check``, ``apply`` returning a
handle that ``remove``s itself, and ``verify`` judging the evidence. ``tests/test_feature_plugins.py``
registers it through the ``omni_accel.features`` entry point and runs it through a sweep, the gate, the
tables and ``omni-accel features``; ``docs/adding-a-feature.md`` walks through it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from accel.features.base import Feature, FeatureClass, FeatureConfig, Handle, RunContext, Support, Verdict


class TransformerCallCounterConfig(FeatureConfig):
    """Options of ``transformer_call_counter``."""

    min_calls: int = Field(default=1, ge=1, description="Fewest forward calls per pipeline call to count as engaged.")


class _CounterHandle(Handle):
    def __init__(self, transformer: Any, min_calls: int) -> None:
        super().__init__()
        self.min_calls = min_calls
        self.hook = transformer.register_forward_pre_hook(self._count)

    def _count(self, *args: Any) -> None:
        self.current["calls"] = self.current.get("calls", 0) + 1

    def remove(self) -> None:
        self.hook.remove()


class TransformerCallCounter(Feature[TransformerCallCounterConfig, _CounterHandle]):
    """Count the transformer's forward calls (a lossless no-op with evidence)."""

    name = "transformer_call_counter"
    family = "example"
    feature_class = FeatureClass.LOSSLESS
    stage = 45  # any int: between offload (40) and compile (50)
    config_cls = TransformerCallCounterConfig
    description = "counts transformer forward calls (example plugin)"

    def check(self, pipeline: Any, device: str, options: TransformerCallCounterConfig) -> Support:
        if getattr(pipeline, "transformer", None) is None:
            return Support.no(f"pipeline {type(pipeline).__name__} has no transformer")
        return Support.yes()

    def apply(self, pipeline: Any, options: TransformerCallCounterConfig, context: RunContext) -> _CounterHandle:
        return _CounterHandle(pipeline.transformer, options.min_calls)

    def verify(self, handle: _CounterHandle) -> Verdict:
        calls = [run.get("calls", 0) for run in handle.runs]
        evidence = {"calls_per_run": calls}
        if calls and all(n >= handle.min_calls for n in calls):
            return Verdict(True, f"{min(calls)}-{max(calls)} transformer calls per run", evidence)
        return Verdict(False, f"fewer than {handle.min_calls} transformer calls on a run", evidence)
