"""Attention backends (``attention_backend``): every diffusers ``AttentionBackendName``, on every denoiser (a
transformer, a UNet, Wan 2.2's ``transformer`` and ``transformer_2``), with evidence per denoiser.

``check`` probes availability (device, package, hub access) with the reason a user can act on. Evidence
is which backend actually dispatched: the registry's functions are wrapped with counters while the
feature is applied (tensor counters, so code compiled by torch.compile counts too, without recompiling),
so a backend that was set but never reached (a model whose processors bypass the dispatcher) fails the
cell. ``set_attention_backend`` also sets a process-global active backend that
``reset_attention_backend`` does not restore; ``remove`` restores it explicitly.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import Field, field_validator

from accel.errors import unknown_choice
from accel.features.base import (
    LOSSY_LIMITS,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Tally,
    Verdict,
    compute_dtype,
    denoisers,
)
from accel.features.dispatch import native_attention_layers, tallied

# Backends that run on a CPU (seen on CPU fp32 with diffusers 0.42). All others need an accelerator.
CPU_BACKENDS = {"native", "_native_math", "_native_flash", "flex"}
# Backends whose kernels quantise Q/K (and V): their output differs from exact attention.
LOSSY_BACKENDS_PREFIX = ("sage", "_sage")
# Kernels that only take float16/bfloat16 inputs (flash-attn, FlashAttention-3, sageattention; PyTorch's
# flash and cuDNN SDPA kernels on CUDA). On a CPU, PyTorch's flash kernel also takes float32.
HALF_ONLY_PREFIXES = ("flash", "_flash", "sage", "_sage")
HALF_ONLY_CUDA = ("_native_flash", "_native_cudnn")
HALF_DTYPES = ("float16", "bfloat16")
# Optional packages by backend prefix, and the extra that installs them.
PACKAGES = {
    "flash": "flash_attn",
    "_flash_3": "flash_attn_interface",
    "sage": "sageattention",
    "_sage": "sageattention",
    "xformers": "xformers",
}


def backend_names() -> list[str]:
    """Every backend name diffusers knows."""
    from diffusers.models.attention_dispatch import AttentionBackendName

    return [member.value for member in AttentionBackendName]


class AttentionBackendConfig(FeatureConfig):
    """Options of ``attention_backend``."""

    backend: str = Field(
        default="native",
        description="A diffusers AttentionBackendName value, e.g. native, _native_math, flash, sage.",
    )

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        names = backend_names()
        if value.lower() not in names:
            raise ValueError(unknown_choice("attention backend", value, names))
        return value.lower()


def _required_package(backend: str) -> str | None:
    for prefix, package in sorted(PACKAGES.items(), key=lambda kv: -len(kv[0])):
        if backend.startswith(prefix) and not backend.endswith("_hub"):
            return package
    return None


def _attention_modules(model: Any) -> list[Any]:
    """The diffusers attention modules of ``model`` (those whose processor ``set_attention_backend`` sets)."""
    return [
        module
        for module in model.modules()
        if getattr(module, "processor", None) is not None and hasattr(module.processor, "_attention_backend")
    ]


def _backend_name(processor: Any, active: Any) -> Any:
    """The backend a processor dispatches to: its own, or (None) the registry's active one, by value."""
    return getattr(getattr(processor, "_attention_backend", None) or active, "value", None)


def _adding(tally: Tally) -> Any:
    """A forward pre-hook that counts the module's calls on ``tally``."""

    def count(module: Any, args: Any) -> None:
        tally.add()

    return count


def _processors(model: Any) -> list[Any]:
    """The processors of every attention module of ``model``."""
    return [module.processor for module in model.modules() if getattr(module, "processor", None) is not None]


def _attention_processors(transformer: Any) -> list[Any]:
    """The processors of the transformer's diffusers attention modules (those set_attention_backend sets)."""
    return [processor for processor in _processors(transformer) if hasattr(processor, "_attention_backend")]


def bypassing_processors(model: Any) -> list[str]:
    """The processor classes of ``model``'s attention modules when none of them dispatches through diffusers'
    registry (no ``_attention_backend``: ``set_attention_backend`` skips them), else []."""
    processors = _processors(model)
    if not processors or _attention_processors(model):
        return []
    return sorted({type(processor).__name__ for processor in processors})


class _DispatchHandle(Handle):
    """Wraps every registered backend function with a ``Tally``: counts survive torch.compile unchanged. Per
    denoiser (``transformer``, ``transformer_2``, ``unet``), a ``Tally`` of its calls and of its attention
    modules' calls (pre-hooks adding to a tensor: no guard for dynamo to fail), so that a denoiser that ran
    without its attention modules reaching the dispatcher shows by name."""

    def __init__(self, models: dict[str, Any], wanted: str, previous_active: Any, device: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.already_in_use = False  # set by apply: the processors used this backend before
        from diffusers.models.attention_dispatch import _AttentionBackendRegistry

        self.models = models
        self.registry = _AttentionBackendRegistry
        self.previous_active = previous_active
        self.originals = dict(self.registry._backends)
        self.tallies: dict[str, Tally] = {}
        for name, function in self.originals.items():
            key = getattr(name, "value", str(name))
            self.tallies[key] = Tally(device)
            self.registry._backends[name] = tallied(function, self.tallies[key])
        self.start = dict.fromkeys(self.tallies, 0)
        self.calls = {name: Tally(device) for name in models}
        self.attention_calls = {name: Tally(device) for name in models}
        self.hooks = []
        for name, model in models.items():
            self.hooks.append(model.register_forward_pre_hook(_adding(self.calls[name])))
            for module in _attention_modules(model):
                self.hooks.append(module.register_forward_pre_hook(_adding(self.attention_calls[name])))
        self.backend_by_denoiser = {
            name: sorted({_backend_name(p, None) for p in _attention_processors(model)}, key=str)
            for name, model in models.items()
        }
        self.denoiser_start = self._denoiser_counts()

    def _denoiser_counts(self) -> dict[str, tuple[int, int]]:
        return {name: (self.calls[name].value, self.attention_calls[name].value) for name in self.models}

    def begin_run(self) -> None:
        super().begin_run()
        self.start = {key: tally.value for key, tally in self.tallies.items()}
        self.denoiser_start = self._denoiser_counts()

    def end_run(self) -> None:
        counts = {key: tally.value - self.start[key] for key, tally in self.tallies.items()}
        self.current["dispatched"] = {key: count for key, count in counts.items() if count}
        now = self._denoiser_counts()
        self.current["denoiser_calls"] = {n: now[n][0] - self.denoiser_start[n][0] for n in self.models}
        self.current["attention_calls_by_denoiser"] = {n: now[n][1] - self.denoiser_start[n][1] for n in self.models}

    @contextmanager
    def global_state_paused(self) -> Iterator[None]:
        """The process-global active backend as before ``apply`` (this transformer's processors keep theirs)."""
        active = self.registry._active_backend
        self.registry.set_active_backend(self.previous_active)
        try:
            yield
        finally:
            self.registry.set_active_backend(active)

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.registry._backends.update(self.originals)
        for model in self.models.values():
            model.reset_attention_backend()
        self.registry.set_active_backend(self.previous_active)


class _NativeAttentionHandle(Handle):
    """Sets the backend of every native attention layer; evidence from their dispatch counters."""

    def __init__(self, layers: list[Any], backend: str) -> None:
        super().__init__()
        self.layers = layers
        self.wanted = backend
        self.previous = [layer.backend for layer in layers]
        # Every layer already dispatched to this backend: the setting changes nothing (shown as "no effect").
        self.already_in_use = all(previous == backend for previous in self.previous)
        for layer in layers:
            layer.backend = backend
            layer.count_calls = True
            layer.reset_calls()

    def begin_run(self) -> None:
        super().begin_run()
        for layer in self.layers:
            layer.reset_calls()

    def end_run(self) -> None:
        dispatched: dict[str, int] = {}
        for layer in self.layers:
            for name, count in layer.calls.items():
                dispatched[name] = dispatched.get(name, 0) + count
        self.current["dispatched"] = dispatched

    def remove(self) -> None:
        for layer, backend in zip(self.layers, self.previous, strict=True):
            layer.backend = backend
            layer.count_calls = False


def _untouched(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Denoisers that were called in a run without any call of their attention modules: their calls, summed."""
    untouched: dict[str, int] = {}
    for run in runs:
        for name, calls in run.get("denoiser_calls", {}).items():
            if calls and not run.get("attention_calls_by_denoiser", {}).get(name):
                untouched[name] = untouched.get(name, 0) + calls
    return untouched


# The handle of either route: diffusers' dispatcher or the native attention layers.
_AttentionHandle = _DispatchHandle | _NativeAttentionHandle


class AttentionBackend(Feature[AttentionBackendConfig, _AttentionHandle]):
    """Route every denoiser's attention through one diffusers backend."""

    name = "attention_backend"
    reach = Reach.EVERY_DENOISER
    denoiser_evidence = ("attention_calls_by_denoiser_per_run", "attention calls")
    family = "attention"
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.ATTENTION
    config_cls = AttentionBackendConfig
    lossy_limits = LOSSY_LIMITS  # the quantised kernels (sage)
    global_state = ("attention_backends",)  # set_attention_backend sets the process-global active backend
    primary_option = "backend"
    description = "attention backend of every denoiser (set_attention_backend on each)"

    def feature_class_for(self, options: AttentionBackendConfig) -> FeatureClass:
        """Sage kernels quantise Q/K: lossy. Exact backends: lossless."""
        return FeatureClass.LOSSY if options.backend.startswith(LOSSY_BACKENDS_PREFIX) else FeatureClass.LOSSLESS

    def option_values(self) -> list[str]:
        return backend_names()

    def check(self, pipeline: Any, device: str, options: AttentionBackendConfig) -> Support:
        transformer = getattr(pipeline, "transformer", None)
        if native_attention_layers(transformer):
            from accel.native.attention import BACKENDS

            if options.backend not in BACKENDS:
                return Support.no(
                    f"the native attention layer has no backend {options.backend} (has: {', '.join(BACKENDS)})",
                    Owner.HARNESS,
                )
            return self.probe(device, options, compute_dtype(pipeline))
        models = denoisers(pipeline)
        if not models:
            return Support.no(
                f"pipeline {type(pipeline).__name__} has no denoiser (transformer, transformer_2 or unet)", Owner.MODEL
            )
        without = [name for name, model in models.items() if not hasattr(model, "set_attention_backend")]
        if without:
            return Support.no(
                f"pipeline {type(pipeline).__name__}: {', '.join(without)} has no set_attention_backend() (not a "
                "diffusers model): omni-accel sets backends through diffusers only",
                Owner.HARNESS,
            )
        bypassing = {name: bypassing_processors(model) for name, model in models.items()}
        if any(bypassing.values()):
            named = "; ".join(f"{name}: {', '.join(classes)}" for name, classes in bypassing.items() if classes)
            return Support.no(
                "diffusers' set_attention_backend sets only processors that dispatch through its attention registry "
                f"(those with an _attention_backend) and passes over the rest without a word; {named} call torch's "
                "attention directly, so no backend can reach them",
                Owner.LIBRARY,
            )
        return self.probe(device, options, compute_dtype(pipeline))

    def probe(self, device: str, options: AttentionBackendConfig, dtype: str | None = None) -> Support:
        backend = options.backend
        package = _required_package(backend)
        if package and importlib.util.find_spec(package) is None:
            return Support.no(f"package {package} not installed: pip install 'omni-accel[gpu]'", Owner.DEVICE)
        if backend.endswith("_hub"):
            return Support.no(
                f"backend {backend} downloads its kernel from the Hugging Face hub; not offline", Owner.DEVICE
            )
        if device == "cpu" and backend not in CPU_BACKENDS:
            return Support.no(
                f"backend {backend} needs a CUDA GPU (found: cpu); on CPU use {sorted(CPU_BACKENDS)}", Owner.DEVICE
            )
        if backend in ("_native_npu", "_native_xla"):
            return Support.no(f"backend {backend} needs an {'NPU' if 'npu' in backend else 'XLA'} device", Owner.DEVICE)
        half_only = backend.startswith(HALF_ONLY_PREFIXES) or (device.startswith("cuda") and backend in HALF_ONLY_CUDA)
        if dtype is not None and half_only and dtype not in HALF_DTYPES:
            return Support.no(
                f"backend {backend} needs float16 or bfloat16 inputs (the model computes in {dtype}); "
                "set the model's dtype: bfloat16",
                Owner.LIBRARY,
            )
        return Support.yes()

    def apply(self, pipeline: Any, options: AttentionBackendConfig, context: RunContext) -> _AttentionHandle:
        from diffusers.models.attention_dispatch import _AttentionBackendRegistry

        layers = native_attention_layers(getattr(pipeline, "transformer", None))
        if layers:
            return _NativeAttentionHandle(layers, options.backend)

        previous_active = _AttentionBackendRegistry._active_backend
        models = denoisers(pipeline)  # every one: a transformer, a UNet, Wan 2.2's transformer and transformer_2
        # What the processors used before: their own backend, or (None) the registry's active one.
        before = {
            _backend_name(processor, previous_active)
            for model in models.values()
            for processor in _attention_processors(model)
        }
        for model in models.values():
            model.set_attention_backend(options.backend)
        handle = _DispatchHandle(models, options.backend, previous_active, context.device)
        handle.already_in_use = before == {options.backend}
        return handle

    def verify(self, handle: _AttentionHandle) -> Verdict:
        wanted = handle.wanted
        per_run = [run.get("dispatched", {}) for run in handle.runs]
        evidence: dict[str, Any] = {"dispatched_per_run": per_run}
        backends = {name for run in per_run for name in run}
        if isinstance(handle, _DispatchHandle):
            evidence["backend_by_denoiser"] = handle.backend_by_denoiser
            evidence["denoiser_calls_per_run"] = [run.get("denoiser_calls", {}) for run in handle.runs]
            evidence["attention_calls_by_denoiser_per_run"] = [
                run.get("attention_calls_by_denoiser", {}) for run in handle.runs
            ]
        if per_run and all(run for run in per_run) and backends == {wanted}:
            calls = sum(run[wanted] for run in per_run)
            untouched = _untouched(handle.runs)
            if untouched:  # a denoiser ran and none of its attention modules was called: not through the backend
                ran = ", ".join(f"{name} on {count} calls" for name, count in untouched.items())
                return Verdict(
                    False,
                    f"partial: a denoiser ran without calling its attention modules ({ran}); {wanted} dispatched "
                    f"{calls} times from the others",
                    {**evidence, "partial": True, "untouched_denoiser_calls": untouched},
                )
            if handle.already_in_use:  # engaged, but the pipeline did exactly this before: nothing was tested
                evidence["no_effect"] = f"the pipeline already used the {wanted} backend: the setting changes nothing"
            return Verdict(True, f"{wanted} dispatched {calls} times", evidence)
        if not any(per_run):
            return Verdict(False, "backend set but no attention call reached the diffusers dispatcher", evidence)
        return Verdict(False, f"requested {wanted} but dispatched {sorted(backends)}", evidence)
