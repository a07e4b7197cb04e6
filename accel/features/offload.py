"""Offload: weights live off the accelerator and move on when needed. Lossless; trades time for memory.

- ``enable_cpu_offload``: model-level (``pipe.enable_model_cpu_offload``): whole components swap.
- ``enable_sequential_cpu_offload``: every leaf module moves on and off (accelerate); slowest, smallest.
- ``group_offload``: diffusers group offloading, block or leaf level, blocks per group, CUDA streams.
- ``enable_layerwise_offload``: the transformer's blocks one at a time (group offload, one block per
  group; with a CUDA stream prefetching the next block on a GPU), as vLLM-Omni's layerwise offload.

On a CPU-only host the onload device is the CPU: the hooks, the plumbing and parity are exercised, the
memory saving is not. Evidence: the number of onload events during each timed run, counted by wrapping
the installed hooks, and the number of hooks installed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    ConfigT,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    denoisers,
)


class _OffloadHandle(Handle):
    """Onloads per run, by component, and each denoiser's calls (a pre-hook on its top module): a denoiser that
    was called and onloaded nothing of its own ran untouched, and the verdict is partial (Wan 2.2's
    ``transformer_2`` beside ``transformer``; the other components' onloads would otherwise hide it)."""

    hooks_installed = 0  # set by the subclass: the offload hooks it counts

    def __init__(self, denoiser_roots: dict[str, Any], undo: Any) -> None:
        super().__init__()
        self.undo = undo
        self.hooks = [root.register_forward_pre_hook(self._call_counter(name)) for name, root in denoiser_roots.items()]

    def _bump(self, key: str, name: str) -> None:
        counts = self.current.setdefault(key, {})
        counts[name] = counts.get(name, 0) + 1

    def _onload(self, component: str) -> None:
        self.current["onloads"] = self.current.get("onloads", 0) + 1
        self._bump("onloads_by_component", component)

    def _call_counter(self, denoiser: str) -> Any:
        def count(module: Any, args: Any) -> None:
            self._bump("denoiser_calls", denoiser)

        return count

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.undo()


class _OnloadCounter(_OffloadHandle):
    """Counts onload events of installed hooks by wrapping their ``onload_`` methods, by component."""

    def __init__(self, targets: list[tuple[Any, str, str]], denoiser_roots: dict[str, Any], undo: Any) -> None:
        super().__init__(denoiser_roots, undo)
        self.hooks_installed = len(targets)
        for obj, method, component in targets:
            setattr(obj, method, self._counted(getattr(obj, method), component))

    def _counted(self, original: Any, component: str) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._onload(component)
            return original(*args, **kwargs)

        return counted


class _ClassHookCounter(_OffloadHandle):
    """Counts ``pre_forward`` calls of an accelerate hook class on the pipeline's modules, by component.

    Counting on the class, not the hook objects: diffusers re-enables model offload at the end of every
    pipeline call (``maybe_free_model_hooks``), which replaces the hook objects.
    """

    def __init__(self, hook_cls: Any, pipeline: Any, undo: Any) -> None:
        super().__init__(denoisers(pipeline), undo)
        self.hook_cls = hook_cls
        self.component_of = {id(m): name for name, root in _torch_modules(pipeline).items() for m in root.modules()}
        self.hooks_installed = len(_accelerate_hooks(pipeline))
        self.original = hook_cls.__dict__["pre_forward"]
        original = self.original

        def pre_forward(hook: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
            component = self.component_of.get(id(module))
            if component is not None:
                self._onload(component)
            return original(hook, module, *args, **kwargs)

        hook_cls.pre_forward = pre_forward

    def remove(self) -> None:
        self.hook_cls.pre_forward = self.original
        super().remove()


def _untouched_denoisers(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Denoiser name -> its calls in runs where none of its own hooks onloaded anything."""
    untouched: dict[str, int] = {}
    for run in runs:
        onloads = run.get("onloads_by_component", {})
        for name, calls in run.get("denoiser_calls", {}).items():
            if calls and not onloads.get(name):
                untouched[name] = untouched.get(name, 0) + calls
    return untouched


def _verify_onloads(handle: _OffloadHandle, what: str) -> Verdict:
    onloads = [run.get("onloads", 0) for run in handle.runs]
    by_denoiser = [
        {name: run.get("onloads_by_component", {}).get(name, 0) for name in run.get("denoiser_calls", {})}
        for run in handle.runs
    ]
    evidence: dict[str, Any] = {
        "hooks_installed": handle.hooks_installed,
        "onloads_per_run": onloads,
        "onloads_by_denoiser_per_run": by_denoiser,
        "denoiser_calls_per_run": [run.get("denoiser_calls", {}) for run in handle.runs],
    }
    if not (handle.hooks_installed and onloads and all(n > 0 for n in onloads)):
        return Verdict(False, f"{what} enabled but no onload happened during the timed runs", evidence)
    untouched = _untouched_denoisers(handle.runs)
    if untouched:
        total = {name: sum(run.get("denoiser_calls", {}).get(name, 0) for run in handle.runs) for name in untouched}
        ran = ", ".join(f"{name} on {calls} of {total[name]} calls" for name, calls in untouched.items())
        return Verdict(
            False,
            f"partial: a denoiser ran without its offload hooks ({ran}); {what} hooks onloaded the others",
            {**evidence, "partial": True, "untouched_denoiser_calls": untouched},
        )
    return Verdict(True, f"{handle.hooks_installed} {what} hooks, {onloads[0]} onloads per run", evidence)


def _accelerate_hooks(pipeline: Any) -> list[tuple[Any, str]]:
    import torch

    hooks = []
    for component in pipeline.components.values():
        if isinstance(component, torch.nn.Module):
            hooks += [(m._hf_hook, "pre_forward") for m in component.modules() if hasattr(m, "_hf_hook")]
    return hooks


def _group_hooks(modules: dict[str, Any]) -> list[tuple[Any, str, str]]:
    """(group, "onload_", component) for each offload group installed on ``modules`` (component -> module)."""
    from diffusers.hooks.group_offloading import _GROUP_OFFLOADING

    groups = {}
    for component, module in modules.items():
        for sub in module.modules():
            registry = getattr(sub, "_diffusers_hook", None)
            hook = registry.get_hook(_GROUP_OFFLOADING) if registry is not None else None
            if hook is not None and hook.group is not None:
                groups[id(hook.group)] = (hook.group, "onload_", component)
    return list(groups.values())


def _remove_group_offload(modules: list[Any], device: str) -> None:
    from diffusers.hooks.group_offloading import _GROUP_OFFLOADING, _LAZY_PREFETCH_GROUP_OFFLOADING

    for module in modules:
        for sub in module.modules():
            registry = getattr(sub, "_diffusers_hook", None)
            if registry is not None:
                for name in (_GROUP_OFFLOADING, _LAZY_PREFETCH_GROUP_OFFLOADING):
                    if registry.get_hook(name) is not None:
                        registry.remove_hook(name, recurse=False)
        module.to(device)


def _torch_modules(pipeline: Any) -> dict[str, Any]:
    """The pipeline's torch components, by name."""
    import torch

    return {name: m for name, m in pipeline.components.items() if isinstance(m, torch.nn.Module)}


def _accelerate_offload(pipeline: Any, method: str, hook_cls: Any) -> _ClassHookCounter:
    """Enable an accelerate-based offload method of the pipeline; the handle counts ``hook_cls`` onloads."""
    device = str(pipeline.device)
    getattr(pipeline, method)(device=device)

    def undo() -> None:
        pipeline.remove_all_hooks()
        pipeline.to(device)

    return _ClassHookCounter(hook_cls, pipeline, undo)


class ModelOffloadConfig(FeatureConfig):
    """``enable_cpu_offload`` has no options."""


OFFLOAD_NO_EFFECT_ON_CPU = "nothing moved off any device: the weights already live in host memory"


class ModelOffload(Feature[ModelOffloadConfig, _ClassHookCounter]):
    """Keep components on the CPU and move each to the device while it runs."""

    name = "enable_cpu_offload"
    family = "offload"
    denoiser_evidence = ("onloads_by_denoiser_per_run", "onloads")
    no_effect_on_cpu = OFFLOAD_NO_EFFECT_ON_CPU
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.OFFLOAD
    config_cls = ModelOffloadConfig
    description = "model-level CPU offload (pipe.enable_model_cpu_offload)"

    def check(self, pipeline: Any, device: str, options: ModelOffloadConfig) -> Support:
        if not hasattr(pipeline, "enable_model_cpu_offload"):
            return Support.no(f"pipeline {type(pipeline).__name__} has no enable_model_cpu_offload()", Owner.HARNESS)
        return Support.yes()

    def apply(self, pipeline: Any, options: ModelOffloadConfig, context: RunContext) -> _ClassHookCounter:
        from accelerate.hooks import CpuOffload

        return _accelerate_offload(pipeline, "enable_model_cpu_offload", CpuOffload)

    def verify(self, handle: _ClassHookCounter) -> Verdict:
        return _verify_onloads(handle, "model offload")


class SequentialOffloadConfig(FeatureConfig):
    """``enable_sequential_cpu_offload`` has no options."""


class SequentialOffload(Feature[SequentialOffloadConfig, _ClassHookCounter]):
    """Move every leaf module to the device just before it runs: least memory, slowest."""

    name = "enable_sequential_cpu_offload"
    family = "offload"
    denoiser_evidence = ("onloads_by_denoiser_per_run", "onloads")
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.OFFLOAD
    config_cls = SequentialOffloadConfig
    description = "sequential (leaf-level) CPU offload (pipe.enable_sequential_cpu_offload)"

    def probe(self, device: str, options: SequentialOffloadConfig, dtype: str | None = None) -> Support:
        if not device.startswith("cuda"):
            return Support.no(
                f"sequential offload needs an accelerator to offload from (found: {device})", Owner.DEVICE
            )
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: SequentialOffloadConfig) -> Support:
        return self.probe(device, options)

    def apply(self, pipeline: Any, options: SequentialOffloadConfig, context: RunContext) -> _ClassHookCounter:
        from accelerate.hooks import AlignDevicesHook

        return _accelerate_offload(pipeline, "enable_sequential_cpu_offload", AlignDevicesHook)

    def verify(self, handle: _ClassHookCounter) -> Verdict:
        return _verify_onloads(handle, "sequential offload")


class GroupOffloadConfig(FeatureConfig):
    """Options of ``group_offload`` (diffusers ``enable_group_offload``)."""

    offload_type: Literal["block_level", "leaf_level"] = Field(
        default="block_level", description="block_level: groups of blocks (faster); leaf_level: each leaf (smaller)."
    )
    num_blocks_per_group: int = Field(default=1, gt=0, description="block_level only; more: faster, more memory.")
    use_stream: bool = Field(default=False, description="Prefetch on a CUDA stream (GPU only); overlaps copies.")
    record_stream: bool = Field(default=False, description="With use_stream: faster, a little more memory.")
    low_cpu_mem_usage: bool = Field(default=False, description="With use_stream: pin on the fly, less host memory.")


class _GroupOffloadFeature(Feature[ConfigT, _OnloadCounter]):
    family = "offload"
    denoiser_evidence = ("onloads_by_denoiser_per_run", "onloads")
    no_effect_on_cpu = OFFLOAD_NO_EFFECT_ON_CPU
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.OFFLOAD

    def _modules(self, pipeline: Any) -> dict[str, Any]:
        """The components to offload, by name."""
        return _torch_modules(pipeline)

    def _kwargs(self, options: ConfigT, device: str) -> dict[str, Any]:
        raise NotImplementedError

    def probe(self, device: str, options: ConfigT, dtype: str | None = None) -> Support:
        if self._kwargs(options, device).get("use_stream") and not device.startswith("cuda"):
            return Support.no(f"use_stream needs CUDA streams (found: {device}); set use_stream: false", Owner.DEVICE)
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: ConfigT) -> Support:
        modules = self._modules(pipeline)
        if not modules:
            return Support.no(
                f"pipeline {type(pipeline).__name__} has no denoiser (transformer, transformer_2 or unet) to offload",
                Owner.MODEL,
            )
        for name, module in modules.items():  # diffusers' enable_group_offload raises on these (ValueError)
            if getattr(module, "_supports_group_offloading", True) is False:
                return Support.no(
                    f"{type(module).__name__} ({name}) declares _supports_group_offloading = False; diffusers' "
                    f'enable_group_offload: "{type(module).__name__} does not support group offloading"',
                    Owner.LIBRARY,
                )
        return self.probe(device, options)

    def apply(self, pipeline: Any, options: ConfigT, context: RunContext) -> _OnloadCounter:
        from diffusers.hooks import apply_group_offloading

        device = str(pipeline.device)
        modules = self._modules(pipeline)
        for module in modules.values():
            if hasattr(module, "enable_group_offload"):
                module.enable_group_offload(**self._kwargs(options, device))
            else:  # transformers models: the generic hook
                apply_group_offloading(module, **self._kwargs(options, device))
        roots = {name: root for name, root in denoisers(pipeline).items() if name in modules}

        def undo() -> None:
            _remove_group_offload(list(modules.values()), device)

        return _OnloadCounter(_group_hooks(modules), roots, undo)

    def verify(self, handle: _OnloadCounter) -> Verdict:
        return _verify_onloads(handle, "group offload")


class GroupOffload(_GroupOffloadFeature[GroupOffloadConfig]):
    """diffusers group offloading of every component."""

    name = "group_offload"
    config_cls = GroupOffloadConfig
    description = "group offloading (pipe.enable_group_offload), block or leaf level"

    def _kwargs(self, options: GroupOffloadConfig, device: str) -> dict[str, Any]:
        import torch

        kwargs = options.model_dump()
        if options.offload_type == "leaf_level":
            kwargs.pop("num_blocks_per_group")
        return {"onload_device": torch.device(device), "offload_device": torch.device("cpu"), **kwargs}


class LayerwiseOffloadConfig(FeatureConfig):
    """Options of ``enable_layerwise_offload``."""

    use_stream: bool | None = Field(
        default=None, description="Prefetch the next block on a CUDA stream; default: on a GPU, yes."
    )


class LayerwiseOffload(_GroupOffloadFeature[LayerwiseOffloadConfig]):
    """Every denoiser's blocks one at a time (a transformer, a UNet, Wan 2.2's two), the rest resident."""

    name = "enable_layerwise_offload"
    reach = Reach.EVERY_DENOISER
    config_cls = LayerwiseOffloadConfig
    description = "layerwise offload of every denoiser's blocks (group offload, one block per group)"

    def _modules(self, pipeline: Any) -> dict[str, Any]:
        return denoisers(pipeline)

    def _kwargs(self, options: LayerwiseOffloadConfig, device: str) -> dict[str, Any]:
        import torch

        use_stream = device.startswith("cuda") if options.use_stream is None else options.use_stream
        return {
            "onload_device": torch.device(device),
            "offload_device": torch.device("cpu"),
            "offload_type": "block_level",
            "num_blocks_per_group": 1,
            "use_stream": use_stream,
        }
