"""SDPA attention for the CPU platform: vLLM-Omni's AttentionImpl.forward dispatches only for GPU
platforms, so this backend routes forward to the SDPA implementation directly."""

from __future__ import annotations

from typing import Any

from vllm_omni.diffusion.attention.backends.sdpa import SDPABackend, SDPAImpl


class CpuSDPAImpl(SDPAImpl):
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward_cuda(*args, **kwargs)


class CpuSDPABackend(SDPABackend):
    @staticmethod
    def get_impl_cls() -> type[CpuSDPAImpl]:
        return CpuSDPAImpl
