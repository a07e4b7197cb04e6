"""Native pipelines: the project's own implementations behind one contract (``contract.py``)."""

from accel.native.contract import NATIVE_PIPELINES, NativePipeline, native_for, register_native

__all__ = ["NATIVE_PIPELINES", "NativePipeline", "native_for", "register_native"]
