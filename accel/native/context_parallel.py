"""Context parallelism on a native transformer: diffusers' split/gather hooks, the native layer's Ulysses.

A native transformer declares a ``_cp_plan`` in diffusers' own terms (``ContextParallelInput`` /
``ContextParallelOutput``: which inputs are split along the sequence on entry, which output is gathered), and
diffusers' ``apply_context_parallel`` installs the hooks that do it, as ``ModelMixin.enable_parallelism`` does
for the library's models. What diffusers' attention dispatcher does inside the library's models, the native
attention layer does itself (``accel.native.attention.ulysses_attention``): every ``Attention`` module of the
transformer gets the Ulysses group. Ring attention is not implemented by the native layer (refused before any
rank starts, by the feature).

The mesh is the one diffusers would build (``ContextParallelConfig.mesh_shape`` / ``mesh_dim_names``) on the
cell's device type, so no accelerator count is read and no CPU shim is needed here.
"""

from __future__ import annotations

from typing import Any

from accel.native.attention import Attention, UlyssesGroup


def native_cp_refusal(transformer: Any, ulysses: int, ring: int, anything: bool = False) -> str | None:
    """Why this native transformer cannot be split as asked, or None (``anything``: uneven shares allowed)."""
    if getattr(transformer, "_cp_plan", None) is None:
        return f"{type(transformer).__name__} has no _cp_plan (the context-parallel plan a native model declares)"
    if ring > 1:
        return "the native attention layer implements Ulysses (all-to-all) only, not ring attention: use ring: 1"
    heads = {module_heads(module) for module in transformer.modules() if hasattr(module, "attention")}
    uneven = sorted(h for h in heads if h is not None and h % ulysses)
    if uneven and not anything:
        return (
            f"Ulysses over {ulysses} ranks needs head counts divisible by it; {type(transformer).__name__} has "
            f"{uneven} (anything: true pads them)"
        )
    return None


def module_heads(module: Any) -> int | None:
    """The head count of a native attention block (its query projection's width / head_dim), or None."""
    to_q, head_dim = getattr(module, "to_q", None), getattr(module, "head_dim", None)
    if to_q is None or not head_dim:
        return None
    return int(to_q.out_features // head_dim)


def enable_native_context_parallel(transformer: Any, config: Any, device: str) -> None:
    """Split ``transformer`` over the ranks of ``config`` (a diffusers ``ContextParallelConfig``): build and
    record the mesh, install diffusers' split/gather hooks from ``transformer._cp_plan``, give every native
    attention layer the Ulysses group. ``disable_native_context_parallel`` undoes it."""
    import torch
    import torch.distributed as dist
    from diffusers.hooks.context_parallel import apply_context_parallel

    device_type = torch.device(device).type
    mesh = dist.device_mesh.init_device_mesh(
        device_type=device_type, mesh_shape=config.mesh_shape, mesh_dim_names=config.mesh_dim_names
    )
    config.setup(dist.get_rank(), dist.get_world_size(), torch.device(device), mesh)
    group = UlyssesGroup(config._ulysses_mesh, config.ulysses_degree, uneven=bool(config.ulysses_anything))
    for module in transformer.modules():
        if isinstance(module, Attention):
            module.ulysses = group
    apply_context_parallel(transformer, config, transformer._cp_plan)


def disable_native_context_parallel(transformer: Any) -> None:
    """Remove the split/gather hooks and the attention layers' Ulysses group."""
    from diffusers.hooks.context_parallel import remove_context_parallel

    remove_context_parallel(transformer, transformer._cp_plan)
    for module in transformer.modules():
        if isinstance(module, Attention):
            module.ulysses = None
