"""Keeping the libraries quiet, and importing them without initialising CUDA: what the sweep's parent, the
forkserver (``accel.sweep.preload``) and the workers share. Importing this module imports nothing heavy: the
parent quiets the libraries before importing them, so their import-time logs obey it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def quiet_libraries(verbose: bool = False) -> None:
    """Silence progress bars, warnings and library logs unless ``verbose``; cheap: imports nothing. Warnings
    and the log lines of ``accel.sweep.runlog.HELD_LOGGERS`` are kept for the run's log file either way."""
    from accel.sweep.runlog import HELD_LOGGERS, hold_library_logs

    hold_library_logs(verbose)
    if verbose:
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "error")
    warnings.filterwarnings("default")  # each warning once per place, to the log file (py.warnings), not stderr

    for name in (
        "torch",
        "diffusers",
        "transformers",
        "cache_dit",
        "accelerate",
        "huggingface_hub",
    ):
        if name not in HELD_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
    # diffusers and transformers read the variables above when they are imported; once imported, they are told.
    if "diffusers" in sys.modules:
        from diffusers.utils import logging as diffusers_logging

        diffusers_logging.set_verbosity_error()
        diffusers_logging.disable_progress_bar()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


@contextlib.contextmanager
def accelerator_checks_through_nvml() -> Iterator[None]:
    """While importing, answer ``torch.accelerator``'s availability through NVML, which initialises nothing.

    diffusers' ``pipeline_utils`` asks ``torch.accelerator.is_available()`` at import (for its
    ``SUPPORTED_DEVICE_MAP``): through the CUDA runtime, that initialises the driver, and every worker forked
    from this process then fails at its first CUDA call (seen on an H200: the preload probe refused it). With
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (the workers set it) ``torch.cuda.is_available()`` asks NVML instead.
    diffusers caches the answer ("cuda" on a GPU host), which is what the workers use.
    """
    import torch

    accelerator = torch.accelerator
    saved = accelerator.is_available, accelerator.current_accelerator
    accelerator.is_available = torch.cuda.is_available

    def current_accelerator(check_available: bool = False) -> torch.device | None:
        return torch.device("cuda") if torch.cuda.is_available() else None

    accelerator.current_accelerator = current_accelerator
    try:
        yield
    finally:
        accelerator.is_available, accelerator.current_accelerator = saved


def import_libraries_quietly() -> None:
    """Import diffusers (and torch) here without initialising CUDA, then quiet them as ``OMNI_ACCEL_VERBOSE``
    says. The sweep's parent calls it after starting the forkserver, so that the two imports overlap."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    with accelerator_checks_through_nvml():
        import diffusers  # noqa: F401

    quiet_libraries(verbose=os.environ.get("OMNI_ACCEL_VERBOSE") == "1")


def import_comparison_libraries() -> None:
    """Import what the parent needs once cells come back (torchmetrics for parity, matplotlib for the figures,
    pandas and pyarrow for the parquet table): about 5 s on 2 cores, otherwise paid between the noise floor and
    the next cell. The sweep calls it while its untimed warm-up cell runs, never beside a measured one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot
    import pandas  # noqa: F401
    import pyarrow.parquet  # type: ignore[import-untyped]  # noqa: F401
    from torchmetrics.functional.image import structural_similarity_index_measure  # noqa: F401
