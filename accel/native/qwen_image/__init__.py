"""Native Qwen-Image: our transformer and pipeline, registered for ``QwenImagePipeline`` checkpoints."""

from accel.native.qwen_image.pipeline import NativeQwenImagePipeline
from accel.native.qwen_image.transformer import NativeQwenImageTransformer

__all__ = ["NativeQwenImagePipeline", "NativeQwenImageTransformer"]
