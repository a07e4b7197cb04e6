"""Uneven context-parallel shares gathered on gloo: each rank's share padded to the longest, then cut back.

With ``ulysses_anything`` / ``ring_anything`` diffusers splits a sequence the degree does not divide into
unequal shares (``tensor_split``: 9 tokens over 2 ranks are 5 + 4) and gathers them at the plan's output with
``torch.distributed.all_gather`` into tensors of each rank's size (``hooks/context_parallel.py``,
``_all_gather_anything``, diffusers 0.42). NCCL accepts unequal sizes there; gloo does not ("ProcessGroupGloo::
allgather: invalid tensor size"). No library offers the padded form, so it is written here: while a
context-parallel handle with uneven shares is applied on a gloo group, diffusers' function is replaced by
``padded_all_gather_anything`` (same result, one all_gather of equal sizes), and restored when it is removed.
The evidence names the replacement (``GLOO_UNEVEN_GATHER_NOTE``).

Without ``anything`` diffusers splits evenly and asserts that the degree divides the length
(``EquipartitionSharder.shard``: "Tensor size along dimension to be sharded must be divisible by mesh size"), an
AssertionError in the middle of the call that says nothing of the option that would split it. While such a
handle is applied, ``EvenSplitRequired`` refuses that call instead (``ModelUnavailable``, scope model: the cell is
recorded unsupported for this model and workload), naming the length, the degree and ``anything: true``.
"""

from __future__ import annotations

from typing import Any

from accel.errors import ModelUnavailable

GLOO_UNEVEN_GATHER_NOTE = (
    "gloo's all_gather refuses unequal sizes: uneven shares were padded to the longest, gathered and cut back "
    "(diffusers' _all_gather_anything replaced while the feature was applied)"
)


def padded_all_gather_anything(tensor: Any, dim: int, group: Any) -> Any:
    """``tensor`` (this rank's share along ``dim``) from every rank of ``group``, concatenated in rank order,
    through one all_gather of equal-sized tensors (each share zero-padded to the longest)."""
    return _padded_gather(tensor, dim, group)[0]


def _padded_gather(tensor: Any, dim: int, group: Any) -> tuple[Any, bool]:
    """``padded_all_gather_anything``'s result and whether the shares were uneven (a share was padded)."""
    import torch
    import torch.distributed as dist
    from diffusers.models._modeling_parallel import gather_size_by_comm

    tensor = tensor.contiguous()
    sizes = gather_size_by_comm(tensor.shape[dim], group)
    longest = max(sizes)
    padded = tensor
    if tensor.shape[dim] < longest:
        pad_shape = list(tensor.shape)
        pad_shape[dim] = longest - tensor.shape[dim]
        padded = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=dim)
    gathered = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(gathered, padded, group=group)  # looked up at call time: the collective counter sees it
    parts = [part.narrow(dim, 0, size) for part, size in zip(gathered, sizes, strict=True)]
    return torch.cat(parts, dim=dim), len(set(sizes)) > 1


class UnevenGatherOnGloo:
    """Installs ``padded_all_gather_anything`` in place of diffusers' gather while applied, if the default
    process group is gloo; ``installed`` says whether it did; ``uneven_gathers`` counts the gathers whose shares
    were uneven (padded: what the evidence reports; even shares go through unpadded); ``remove`` restores
    diffusers' function."""

    def __init__(self) -> None:
        import torch.distributed as dist
        from diffusers.hooks import context_parallel

        self.installed = False
        self.uneven_gathers = 0
        self._module = context_parallel
        self._original = getattr(context_parallel, "_all_gather_anything", None)
        if self._original is not None and dist.is_initialized() and dist.get_backend() == "gloo":
            context_parallel._all_gather_anything = self._gather
            self.installed = True

    def _gather(self, tensor: Any, dim: int, group: Any) -> Any:
        gathered, uneven = _padded_gather(tensor, dim, group)
        self.uneven_gathers += uneven
        return gathered

    def remove(self) -> None:
        if self.installed:
            self._module._all_gather_anything = self._original
            self.installed = False


class EvenSplitRequired:
    """Installs, while applied, a check before diffusers' even split: a length ``degree`` does not divide is
    refused with what to do (``ModelUnavailable``), where diffusers asserts; ``remove`` restores its method."""

    def __init__(self, degree: str) -> None:
        from diffusers.hooks.context_parallel import EquipartitionSharder

        self._sharder = EquipartitionSharder
        self._original = EquipartitionSharder.__dict__["shard"]
        split = self._original.__func__

        def shard(cls: Any, tensor: Any, dim: int, mesh: Any) -> Any:
            length = tensor.size()[dim]
            if length % mesh.size():
                raise ModelUnavailable(
                    "model",
                    f"context_parallel: {degree} does not divide the sequence this call splits ({length} along dim "
                    f"{dim} of a tensor of shape {tuple(tensor.shape)}); set context_parallel.anything: true (uneven "
                    "shares) or choose a height and width whose token count it divides",
                    "library",  # diffusers' even sharder asserts; the harness refuses in its place
                )
            return split(cls, tensor, dim, mesh)

        setattr(EquipartitionSharder, "shard", classmethod(shard))  # noqa: B010 (a classmethod mypy would refuse)

    def remove(self) -> None:
        setattr(self._sharder, "shard", self._original)  # noqa: B010
