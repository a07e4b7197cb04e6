"""Native FLUX.1: our transformer and pipeline, registered for ``FluxPipeline`` checkpoints."""

from accel.native.flux.pipeline import NativeFluxPipeline
from accel.native.flux.transformer import NativeFluxTransformer

__all__ = ["NativeFluxPipeline", "NativeFluxTransformer"]
