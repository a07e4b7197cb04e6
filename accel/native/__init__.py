"""Native pipelines: the project's own implementations behind one contract (``contract.py``)."""

from accel.native.contract import NATIVE_PIPELINES, NativePipeline, register_native
from accel.native.registry import native_for, native_for_class

__all__ = ["NATIVE_PIPELINES", "NativePipeline", "native_for", "native_for_class", "register_native"]
