"""Imported once by the forkserver so that every worker forks with torch and diffusers loaded.

Importing only: nothing here runs a kernel or starts a thread pool, which keeps the fork safe.
"""

from __future__ import annotations

import os

from accel.sweep.quiet import accelerator_checks_through_nvml, quiet_libraries

quiet_libraries(verbose=os.environ.get("OMNI_ACCEL_VERBOSE") == "1")
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # torch.cuda.is_available() without cuInit

import torch  # noqa: E402, F401  (imported before diffusers, as the workers will use it)

with accelerator_checks_through_nvml():
    import diffusers
    from diffusers import DiffusionPipeline  # noqa: F401

    # Resolve the lazy pipeline classes the zoo uses so that workers do not import them again.
    for _name in ("FluxPipeline", "WanPipeline", "QwenImagePipeline"):
        getattr(diffusers, _name)
