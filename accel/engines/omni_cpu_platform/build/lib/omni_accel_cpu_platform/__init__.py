"""vLLM-Omni platform plugin for CPU-only hosts (vLLM-Omni ships none).

``activate`` is the ``vllm_omni.platform_plugins`` entry point: it returns the platform class only when
``OMNI_ACCEL_CPU_PLATFORM=1`` and no CUDA device is present, so a GPU host never uses it.
"""

from __future__ import annotations

import os


def activate() -> str | None:
    """The platform's qualified name when asked for by the environment, else None."""
    if os.environ.get("OMNI_ACCEL_CPU_PLATFORM") != "1":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return "omni_accel_cpu_platform.platform.CpuOmniPlatform"
