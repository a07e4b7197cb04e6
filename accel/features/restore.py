"""What a library leaves behind on a pipeline after its own removal, and putting it back as it was.

diffusers' and accelerate's removal functions take their hooks off but leave state that changes what the next
feature does: group offloading and model offload initialise a ``_diffusers_hook`` registry on modules and leave
it there empty (cache-dit then skips its forward-pattern check: "_diffusers_hook is not None, force skip pattern
check"), and ``enable_model_cpu_offload`` leaves ``_offload_device``, ``_offload_gpu_id`` and ``_all_hooks`` on
the pipeline (a later offload reuses the old GPU id). Removing a hook registry's hooks also leaves an
instance-level ``forward`` (the bound original, put back as an attribute): cache-dit, applied next, takes it
for the user's own, patches it and keeps its patch on removal (seen: Flux's transformer running cache-dit's
``__patch_transformer_forward__`` after group offload, then cache_dit, each applied and left).
``PipelineState`` records what was there before ``apply()``;
``restore`` deletes what was added since (``Applied.remove`` calls it after every feature's own removal).
"""

from __future__ import annotations

from typing import Any

# The pipeline attributes diffusers' accelerate-based offloads add (pipeline_utils.enable_model_cpu_offload).
OFFLOAD_ATTRIBUTES = ("_offload_device", "_offload_gpu_id", "_all_hooks")
REGISTRY_ATTRIBUTE = "_diffusers_hook"


def _modules(pipeline: Any) -> list[Any]:
    import torch

    components = getattr(pipeline, "components", {}) or {}
    return [m for c in components.values() if isinstance(c, torch.nn.Module) for m in c.modules()]


class PipelineState:
    """The hook registries on a pipeline's modules and its offload attributes, as they were at construction."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.registries = {id(m) for m in _modules(pipeline) if getattr(m, REGISTRY_ATTRIBUTE, None) is not None}
        self.forwards = {id(m): m.__dict__.get("forward") for m in _modules(pipeline)}
        self.attributes = {name: getattr(pipeline, name) for name in OFFLOAD_ATTRIBUTES if hasattr(pipeline, name)}

    def restore(self) -> None:
        """Delete the empty hook registries and the offload attributes added since; put back changed attributes
        and each module's instance-level ``forward`` as it was (none: the class's).

        A registry that still holds a hook belongs to someone else (a feature applied earlier, the user) and stays.
        """
        for module in _modules(self.pipeline):
            registry = getattr(module, REGISTRY_ATTRIBUTE, None)
            if registry is not None and id(module) not in self.registries and not registry.hooks:
                delattr(module, REGISTRY_ATTRIBUTE)
            forward = self.forwards.get(id(module))
            if forward is not None:
                module.forward = forward
            elif "forward" in module.__dict__ and id(module) in self.forwards:
                del module.__dict__["forward"]
        for name in OFFLOAD_ATTRIBUTES:
            if name in self.attributes:
                setattr(self.pipeline, name, self.attributes[name])
            elif hasattr(self.pipeline, name):
                delattr(self.pipeline, name)
