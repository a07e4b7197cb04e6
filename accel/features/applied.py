"""``apply(pipe, *configs)``: the one way to apply acceleration features to a loaded pipeline.

In the style of torchao's ``quantize_(model, config)`` and diffusers' hooks, the config object is the API::

    from accel import apply
    from accel.features import CacheDitConfig, CompileConfig

    with apply(pipe, CacheDitConfig(residual_diff_threshold=0.12), CompileConfig(granularity="regional")) as applied:
        image = pipe(prompt, num_inference_steps=28).images[0]
    print(applied.evidence())  # per feature: engaged or not, and the counters that prove it

The feature is found by the config's type; the features are applied in the order of their stage; a
combination ``feature_matrix/rules.yaml`` forbids, and a feature this pipeline or device cannot run, are
rejected before anything is applied. Leaving the block (or ``applied.remove()``) removes every feature in
reverse order, then deletes what the libraries' removal leaves behind (``accel.features.restore``): the
pipeline is the untouched one, bit for bit. Each call of the pipeline is one evidence window
(``begin_run``/``end_run`` of every handle) unless the caller opens one itself with ``applied.window()``
(the sweep's cell does, to keep the evidence reads outside its timer).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from accel.errors import ConfigError, UnavailableError
from accel.features.base import (
    OWNER_OF_SCOPE,
    AnyFeature,
    FeatureConfig,
    Handle,
    Owner,
    RunContext,
    Verdict,
    compute_dtype,
    untouched_denoisers_refusal,
)
from accel.features.registry import FEATURES
from accel.features.restore import PipelineState
from accel.features.rules import check_conflicts


class FeatureUnavailable(UnavailableError):
    """A feature cannot run here; ``scope`` says where it was found: ``environment`` (device, installation,
    dtype) or ``model`` (this pipeline); ``owner`` who refuses it (``Owner``: library, model, device, harness;
    None: the owner of its scope)."""

    def __init__(self, feature: str, scope: str, reason: str, owner: Owner | None = None) -> None:
        super().__init__(f"{feature}: {reason}")
        self.feature = feature
        self.scope = scope
        self.reason = reason
        self.owner = owner or OWNER_OF_SCOPE[scope]


# The pipeline attribute that holds its active ``Applied`` (stacked apply() calls would skip the conflict rules
# and could only be removed in the reverse order).
ACTIVE_ATTRIBUTE = "_omni_accel_applied"


class Applied:
    """Features applied to one pipeline: their evidence, and ``remove()`` (or leaving ``with``) to undo them."""

    def __init__(self, pipeline: Any, context: RunContext) -> None:
        self.pipeline = pipeline
        self.context = context
        self.applied: list[tuple[AnyFeature, FeatureConfig, Handle]] = []
        self._original_class: type | None = None
        self._window_open = False
        self._removed = False
        self._before = PipelineState(pipeline)  # what the libraries' own removal leaves behind is deleted again
        # Feature -> why its calibration's range was not applied (made for another workload): in its evidence.
        self.calibration_notes: dict[str, str] = {}

    @property
    def features(self) -> list[AnyFeature]:
        """The applied features, in application order."""
        return [feature for feature, _, _ in self.applied]

    @property
    def handles(self) -> list[Handle]:
        """The features' handles, in application order."""
        return [handle for _, _, handle in self.applied]

    @contextmanager
    def window(self) -> Iterator[None]:
        """One evidence window around one pipeline call: every handle's ``begin_run`` before, ``end_run`` after.

        Calls of the pipeline inside it open no window of their own.
        """
        for handle in self.handles:
            handle.begin_run()
        self._window_open = True
        try:
            yield
        finally:
            self._window_open = False
            for handle in self.handles:
                handle.end_run()

    def reset_evidence(self) -> None:
        """Forget the evidence gathered so far (after warm-up calls: evidence counts the measured calls only)."""
        for handle in self.handles:
            handle.calls_before_window += len(handle.runs)
            handle.runs.clear()

    def verdicts(self) -> dict[str, Verdict]:
        """Each feature's judgement of its evidence: did it engage on every call since apply (or the reset); a
        calibration made for another workload is said in the evidence (``calibration_workload``)."""
        verdicts = {feature.name: feature.verify(handle) for feature, _, handle in self.applied}
        for name, note in self.calibration_notes.items():
            verdict = verdicts[name]
            verdicts[name] = Verdict(
                verdict.engaged, verdict.summary, {**verdict.evidence, "calibration_workload": note}
            )
        return verdicts

    def evidence(self) -> dict[str, dict[str, Any]]:
        """Per feature: ``engaged``, a one-line ``summary`` and the counters that prove it."""
        return {
            name: {"engaged": verdict.engaged, "summary": verdict.summary, **verdict.evidence}
            for name, verdict in self.verdicts().items()
        }

    @contextmanager
    def global_state_paused(self) -> Iterator[None]:
        """The process-global state the features set (diffusers' active attention backend) as before apply."""
        with ExitStack() as paused:
            for handle in self.handles:
                paused.enter_context(handle.global_state_paused())
            yield

    def remove(self) -> None:
        """Remove every feature in reverse order; the pipeline behaves as before ``apply``. Idempotent."""
        if self._removed:
            return
        self._removed = True
        if getattr(self.pipeline, ACTIVE_ATTRIBUTE, None) is self:
            delattr(self.pipeline, ACTIVE_ATTRIBUTE)
        if self._original_class is not None:
            self.pipeline.__class__ = self._original_class
            self._original_class = None
        errors: list[BaseException] = []
        for _, _, handle in reversed(self.applied):
            try:
                handle.remove()
            except Exception as error:  # remove the others before reporting the first failure
                errors.append(error)
        self._before.restore()
        if errors:
            raise errors[0]

    def __enter__(self) -> Applied:
        if self._removed:  # a second `with applied:` would run the plain pipeline under the old evidence
            raise ConfigError("these features were already removed: call accel.apply(pipe, ...) again")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def _open_windows_on_calls(self) -> None:
        """Make every call of the pipeline one evidence window (a subclass with the same name, removed again
        by ``remove``): ``pipe(...)`` works as before, and per-call state (TeaCache's) starts fresh."""
        original = type(self.pipeline)
        call = original.__call__
        applied = self

        @functools.wraps(call)
        def __call__(pipeline: Any, *args: Any, **kwargs: Any) -> Any:
            if applied._window_open:
                return call(pipeline, *args, **kwargs)
            applied._check_steps(kwargs.get("num_inference_steps"))
            with applied.window():
                return call(pipeline, *args, **kwargs)

        namespace = {"__call__": __call__, "__module__": original.__module__, "__qualname__": original.__qualname__}
        self.pipeline.__class__ = type(original.__name__, (original,), namespace)
        self._original_class = original

    def _check_steps(self, steps: Any) -> None:
        needing = [f.name for f in self.features if f.needs_steps]
        asks = "asks for"
        if steps is None:  # a call that leaves the steps out runs the pipeline's default
            steps, asks = default_steps(self.pipeline), "leaves num_inference_steps out: the pipeline's default is"
        if needing and steps is not None and steps != self.context.steps:
            raise ConfigError(
                f"apply(): {', '.join(needing)} were set up for num_inference_steps={self.context.steps}, the call "
                f"{asks} {steps}: pass num_inference_steps={steps} to apply(), or the same steps to the call"
            )


def default_steps(pipeline: Any) -> int | None:
    """The pipeline's default ``num_inference_steps`` (from its ``__call__`` signature), or None."""
    try:
        parameter = inspect.signature(type(pipeline).__call__).parameters.get("num_inference_steps")
    except (TypeError, ValueError):
        return None
    default = getattr(parameter, "default", None)
    return default if isinstance(default, int) and not isinstance(default, bool) else None


def resolve(configs: tuple[Any, ...], where: str = "apply()") -> list[tuple[AnyFeature, FeatureConfig]]:
    """The feature of each config (found by the config's type), in application order; conflicts rejected."""
    chosen: dict[str, tuple[AnyFeature, FeatureConfig]] = {}
    for config in configs:
        feature = FEATURES.for_config(config)
        if feature.name in chosen:
            raise ConfigError(f"{where}: {feature.name} is given twice; pass one {type(config).__name__}")
        chosen[feature.name] = (feature, config)
    check_conflicts({name: config for name, (_, config) in chosen.items()}, where)
    return sorted(chosen.values(), key=lambda pair: (int(pair[0].stage), pair[0].name))


def apply(
    pipeline: Any,
    *configs: FeatureConfig,
    num_inference_steps: int | None = None,
    device: str | None = None,
    check: bool = True,
    windows_on_calls: bool = True,
    workload: Mapping[str, Any] | None = None,
) -> Applied:
    """Apply the features given by ``configs`` to a loaded ``pipeline``; returns the handle of all of them.

    Use it as a context manager (leaving the block removes the features in reverse order) or keep the
    handle and call ``remove()``. Nothing is applied when a config is unknown, two features conflict
    (``feature_matrix/rules.yaml``: ConfigError) or, with ``check``, a feature cannot run on this device or
    pipeline (``FeatureUnavailable``, with the reason). A feature whose apply fails leaves nothing applied.

    - ``num_inference_steps``: the steps of the calls to come; default: the pipeline's default. Features
      that plan by step (``tea_cache``, ``mag_cache``, ``cache_dit``) need it; a call with other steps is
      refused (ConfigError) instead of caching the wrong steps.
    - ``device``: where the pipeline runs; default: ``pipeline.device`` (else ``cpu``).
    - ``workload``: the calls' ``height``, ``width``, ``num_frames``, ``guidance_scale`` where known: a cache's
      calibration judges a threshold inert only on the workload it was made on (the steps are always compared).
    - ``windows_on_calls``: make each ``pipeline(...)`` call one evidence window (default). The sweep's cell
      opens the windows itself (``Applied.window``) to keep the evidence reads outside its timer.
    """
    active = getattr(pipeline, ACTIVE_ATTRIBUTE, None)
    if active is not None:
        names = ", ".join(feature.name for feature in active.features) or "none"
        raise ConfigError(
            f"apply(): this pipeline already has features applied by an earlier apply() ({names}); remove them "
            "first (leave its with-block or call .remove()), or pass every config to one apply() so that their "
            "conflicts are checked and they are removed together"
        )
    resolved = resolve(configs)
    device = device or str(getattr(pipeline, "device", None) or "cpu")
    steps = num_inference_steps if num_inference_steps is not None else default_steps(pipeline)
    needing = [feature.name for feature, _ in resolved if feature.needs_steps]
    if needing and steps is None:
        raise ConfigError(f"apply(): {', '.join(needing)} plan by step: pass num_inference_steps=...")
    from accel.calibration.workload import run_workload
    from accel.features.calibration import calibration_workload_note

    applied = Applied(pipeline, RunContext(device=device, steps=steps or 0))
    with run_workload({**(workload or {}), "steps": steps}):
        if check:
            _check_all(pipeline, device, compute_dtype(pipeline), resolved)
        notes = {feature.name: calibration_workload_note(feature.name, config) for feature, config in resolved}
    applied.calibration_notes = {name: note for name, note in notes.items() if note is not None}
    setattr(pipeline, ACTIVE_ATTRIBUTE, applied)  # one apply() at a time: removed again by remove()
    try:
        for feature, config in resolved:  # one by one: a failing apply still removes the earlier ones
            applied.applied.append((feature, config, feature.apply(pipeline, config, applied.context)))
        if windows_on_calls:
            applied._open_windows_on_calls()
    except BaseException:
        applied.remove()
        raise
    return applied


def _check_all(pipeline: Any, device: str, dtype: Any, resolved: list[tuple[AnyFeature, FeatureConfig]]) -> None:
    """Each feature's probe and check: FeatureUnavailable with the reason of the first refusal."""
    for feature, config in resolved:
        for scope, support in (
            ("environment", feature.probe(device, config, dtype)),
            ("model", feature.check(pipeline, device, config)),
        ):
            if not support.supported:
                raise FeatureUnavailable(feature.name, scope, support.reason, support.owner)
        untouched = untouched_denoisers_refusal(feature, pipeline, config)
        if untouched is not None:  # the feature could reach it through the library: omni-accel does not yet
            raise FeatureUnavailable(feature.name, "model", untouched, Owner.HARNESS)
