"""VAE tiling and slicing (``vae_use_tiling``, ``vae_use_slicing``): lossless memory savers for decode.

Evidence comes from counters wrapped around the VAE instance's ``tiled_decode`` and ``_decode``: tiling
engaged when the tiled path ran on every timed call; slicing engaged when a decode split its batch into
more than one slice. Both are silent no-ops in diffusers when the image is smaller than a tile or the
batch is 1, which is exactly what the evidence catches.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from pydantic import Field

from accel.features.base import (
    LOSSY_LIMITS,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    RunContext,
    Stage,
    Support,
    Verdict,
)


class _CountingHandle(Handle):
    """Wraps named methods of one module instance with call counters; ``remove`` unwraps them."""

    def __init__(self, module: Any, method_names: tuple[str, ...]) -> None:
        super().__init__()
        self.module = module
        self.wrapped: list[str] = []
        for method_name in method_names:
            original = getattr(module, method_name, None)
            if original is None:
                continue
            setattr(module, method_name, self._counter(method_name, original))
            self.wrapped.append(method_name)

    def _counter(self, key: str, original: Any) -> Any:
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.current[key] = self.current.get(key, 0) + 1
            return original(*args, **kwargs)

        return counted

    def unwrap(self) -> None:
        for method_name in self.wrapped:
            # The counters were instance attributes shadowing the class methods: deleting restores them.
            self.module.__dict__.pop(method_name, None)
        self.wrapped.clear()


def _find_vae(pipeline: Any) -> Any:
    """The pipeline's VAE, or None (``check`` refuses a pipeline without one before ``apply``)."""
    return getattr(pipeline, "vae", None)


class VaeTilingConfig(FeatureConfig):
    """Options of ``vae_use_tiling``."""

    tile_size: int | None = Field(
        default=None,
        gt=0,
        description="Tile edge in pixels; default: the VAE's own. Smaller tiles: less memory, more seams.",
    )
    tile_stride: int | None = Field(
        default=None,
        gt=0,
        description="Pixels between tile starts; default: the VAE's own. Less overlap: faster, more seams.",
    )


def tiling_geometry(vae: Any) -> str:
    """What diffusers' tiled decode of ``vae`` does with its current tile settings, in pixels: the tile, the
    step between tiles, the overlap it blends, and that each tile is decoded alone. Why tiling changes an image
    is the library's algorithm, not the harness: said in the verdict and beside an out-of-parity cell.

    AutoencoderKL style (``tile_sample_min_size``, ``tile_overlap_factor``): tiles of ``tile_latent_min_size``
    latents start every ``int(tile_latent_min_size * (1 - factor))`` latents, ``int(tile_sample_min_size *
    factor)`` pixels are blended, ``tile_sample_min_size`` minus that kept per tile. Wan / Qwen-Image style
    (``tile_sample_min_height``, ``tile_sample_stride_height``): the blend is the tile minus the stride."""
    name = type(vae).__name__
    if hasattr(vae, "tile_sample_stride_height") and hasattr(vae, "tile_sample_min_height"):
        tile, stride = int(vae.tile_sample_min_height), int(vae.tile_sample_stride_height)
        blend = max(0, tile - stride)
        latents = ""
    elif hasattr(vae, "tile_overlap_factor_height") and hasattr(vae, "tile_sample_min_height"):  # CogVideoX style
        tile = int(vae.tile_sample_min_height)
        blend = int(tile * vae.tile_overlap_factor_height)
        stride = tile - blend
        latents = ""
    else:
        tile = int(vae.tile_sample_min_size)
        blend = int(tile * vae.tile_overlap_factor)
        stride = tile - blend
        latents = f" ({int(vae.tile_latent_min_size)} latents)"
    return (
        f"diffusers' {name}.tiled_decode decodes {tile}-px tiles{latents} every {stride} px, each alone (its "
        f"normalisation statistics and convolution borders its own), and blends the {blend}-px overlaps linearly"
    )


class _TilingHandle(_CountingHandle):
    def __init__(self, vae: Any, saved: dict[str, Any]) -> None:
        super().__init__(vae, ("tiled_decode",))
        self.saved = saved
        self.geometry = tiling_geometry(vae)

    def remove(self) -> None:
        self.unwrap()
        self.module.disable_tiling()
        for attribute, value in self.saved.items():
            setattr(self.module, attribute, value)


class VaeTiling(Feature[VaeTilingConfig, _TilingHandle]):
    """Decode latents in overlapping tiles: bounded memory at large resolutions, approximately the same image.

    Lossy, not lossless: each tile is decoded without its neighbours (GroupNorm statistics are taken per
    tile, convolutions see a cut border) and overlaps are blended. On the tiny zoo with 32-pixel tiles at
    64x64 this moves SSIM to 0.3-0.7; on real VAEs with their default tiles the change is small but real.
    """

    name = "vae_use_tiling"
    family = "vae"
    feature_class = FeatureClass.LOSSY
    stage = Stage.VAE
    config_cls = VaeTilingConfig
    lossy_limits = LOSSY_LIMITS
    description = "VAE tiled decode (pipe.vae.enable_tiling)"

    def check(self, pipeline: Any, device: str, options: VaeTilingConfig) -> Support:
        vae = _find_vae(pipeline)
        if vae is None or not hasattr(vae, "enable_tiling"):
            return Support.no(f"pipeline {type(pipeline).__name__} has no vae with enable_tiling()", Owner.MODEL)
        return Support.yes()

    def apply(self, pipeline: Any, options: VaeTilingConfig, context: RunContext) -> _TilingHandle:
        vae = _find_vae(pipeline)
        tile_attributes = (
            "tile_sample_min_size",
            "tile_latent_min_size",
            "tile_overlap_factor",
            "tile_sample_min_height",
            "tile_sample_min_width",
            "tile_sample_stride_height",
            "tile_sample_stride_width",
            "tile_overlap_factor_height",
            "tile_overlap_factor_width",
        )
        saved = {a: getattr(vae, a) for a in tile_attributes if hasattr(vae, a)}
        accepted = inspect.signature(vae.enable_tiling).parameters
        if "tile_sample_min_height" in accepted:
            # Wan / Qwen-Image style VAEs: sizes and strides in pixels.
            kwargs: dict[str, Any] = {}
            if options.tile_size is not None:
                kwargs["tile_sample_min_height"] = kwargs["tile_sample_min_width"] = options.tile_size
            if options.tile_stride is not None and "tile_sample_stride_height" in accepted:
                kwargs["tile_sample_stride_height"] = kwargs["tile_sample_stride_width"] = options.tile_stride
            elif options.tile_stride is not None:
                # CogVideoX style: the overlap as a share of the tile (1 - stride / size).
                size = options.tile_size or vae.tile_sample_min_height
                overlap = max(0.0, 1.0 - options.tile_stride / size)
                kwargs["tile_overlap_factor_height"] = kwargs["tile_overlap_factor_width"] = overlap
            vae.enable_tiling(**kwargs)
        else:
            # AutoencoderKL style: one tile size and an overlap factor, set as attributes.
            vae.enable_tiling()
            if options.tile_size is not None:
                scale = 2 ** (len(vae.config.block_out_channels) - 1)
                vae.tile_sample_min_size = options.tile_size
                vae.tile_latent_min_size = options.tile_size // scale
            if options.tile_stride is not None:
                size = vae.tile_sample_min_size
                vae.tile_overlap_factor = max(0.0, 1.0 - options.tile_stride / size)
        return _TilingHandle(vae, saved)

    def verify(self, handle: _TilingHandle) -> Verdict:
        counts = [run.get("tiled_decode", 0) for run in handle.runs]
        # parity_note: why the output differs from an untiled decode (shown beside an out-of-parity cell).
        evidence: dict[str, Any] = {"tiled_decodes_per_run": counts, "parity_note": handle.geometry}
        if counts and all(c > 0 for c in counts):
            return Verdict(True, f"tiled decode ran on {len(counts)}/{len(counts)} runs: {handle.geometry}", evidence)
        return Verdict(
            False,
            "tiling enabled but no tiled decode ran: the image is not larger than one tile (lower tile_size)",
            evidence,
        )


class VaeSlicingConfig(FeatureConfig):
    """``vae_use_slicing`` has no options: it decodes a batch one sample at a time."""


class _SlicingHandle(_CountingHandle):
    def __init__(self, vae: Any) -> None:
        super().__init__(vae, ("decode", "_decode"))

    def remove(self) -> None:
        self.unwrap()
        self.module.disable_slicing()


class VaeSlicing(Feature[VaeSlicingConfig, _SlicingHandle]):
    """Decode a batch one sample at a time: lower peak memory for batches, same images."""

    name = "vae_use_slicing"
    family = "vae"
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.VAE
    config_cls = VaeSlicingConfig
    description = "VAE sliced decode (pipe.vae.enable_slicing)"

    def check(self, pipeline: Any, device: str, options: VaeSlicingConfig) -> Support:
        vae = _find_vae(pipeline)
        if vae is None or not hasattr(vae, "enable_slicing"):
            return Support.no(f"pipeline {type(pipeline).__name__} has no vae with enable_slicing()", Owner.MODEL)
        return Support.yes()

    def apply(self, pipeline: Any, options: VaeSlicingConfig, context: RunContext) -> _SlicingHandle:
        vae = _find_vae(pipeline)
        vae.enable_slicing()
        return _SlicingHandle(vae)

    def verify(self, handle: _SlicingHandle) -> Verdict:
        slices = [(run.get("_decode", 0), run.get("decode", 0)) for run in handle.runs]
        evidence = {"slices_per_run": [s for s, _ in slices], "decodes_per_run": [d for _, d in slices]}
        if slices and all(d > 0 and s > d for s, d in slices):
            return Verdict(True, f"sliced decode ran on {len(slices)}/{len(slices)} runs", evidence)
        return Verdict(
            False,
            "slicing enabled but every decode ran as one slice (batch 1): set workload.num_images_per_prompt >= 2",
            evidence,
        )
