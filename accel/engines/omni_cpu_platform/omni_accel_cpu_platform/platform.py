"""The CPU OmniPlatform: vLLM's CpuPlatform plus the diffusion-side methods vLLM-Omni calls."""

from __future__ import annotations

import psutil
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum


class CpuOmniPlatform(OmniPlatform, CpuPlatform):
    """Diffusion on the CPU: one device, no-op synchronisation, memory figures from psutil."""

    _omni_enum = OmniPlatformEnum.OOT

    @classmethod
    def get_diffusion_attn_backend_cls(cls, selected_backend: str | None, head_size: int, **_: object) -> str:
        if selected_backend not in (None, "TORCH_SDPA", "torch_sdpa"):
            raise ValueError(f"the CPU platform runs TORCH_SDPA attention only, not {selected_backend}")
        return "omni_accel_cpu_platform.attention.CpuSDPABackend"

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/model_executor/stage_configs"

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None

    @classmethod
    def empty_cache(cls) -> None:
        return None

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "cpu"

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return psutil.virtual_memory().available

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return psutil.virtual_memory().total

    @classmethod
    def memory_reserved(cls, device: object = None) -> int:
        return 0

    @classmethod
    def reset_peak_memory_stats(cls, device: object = None) -> None:
        return None

    @classmethod
    def max_memory_allocated(cls, device: object = None) -> int:
        return psutil.Process().memory_info().rss

    @classmethod
    def max_memory_reserved(cls, device: object = None) -> int:
        return psutil.Process().memory_info().rss

    @classmethod
    def record_device_event(cls) -> None:
        return None
