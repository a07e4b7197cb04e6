"""Imported once by the forkserver so that every worker forks with torch and diffusers loaded.

Importing only: nothing here runs a kernel or starts a thread pool, which keeps the fork safe.
"""

from __future__ import annotations

import logging
import os
import warnings


def quiet_libraries(verbose: bool = False) -> None:
    """Silence progress bars, warnings and library logs unless ``verbose``."""
    if verbose:
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "error")
    warnings.filterwarnings("ignore")

    for name in (
        "torch",
        "torch.utils._pytree",
        "torchao",
        "diffusers",
        "transformers",
        "cache_dit",
        "accelerate",
        "huggingface_hub",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from diffusers.utils import logging as diffusers_logging
        from transformers.utils import logging as transformers_logging

        diffusers_logging.set_verbosity_error()
        diffusers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
    except ImportError:
        pass


quiet_libraries(verbose=os.environ.get("OMNI_ACCEL_VERBOSE") == "1")

import diffusers  # noqa: E402
import torch  # noqa: E402, F401
from diffusers import DiffusionPipeline  # noqa: E402, F401

# Resolve the lazy pipeline classes the zoo uses so that workers do not import them again.
for _name in ("FluxPipeline", "WanPipeline", "QwenImagePipeline"):
    getattr(diffusers, _name)
