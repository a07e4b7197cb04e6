"""The roofline of a real model without a GPU: FLOPs counted on the meta device, floors on a named device.

``omni-accel roofline synthetic:flux.1-dev --height 1024 --width 1024 --steps 28 --device h200`` builds
the pipeline's components with their published shapes on the ``meta`` device (nothing is allocated),
runs one denoiser forward, the text encoders and one VAE decode under ``FlopCounterMode`` with inputs
of the real shapes, and turns the counts into floors (FLOPs / dense datasheet peak) per step and per
image, and into the most each feature family can save:

- attention: its share of a step's FLOPs is the Amdahl bound of any faster attention kernel;
- fp8 linears: the linear layers' FLOPs at the fp8 peak (twice the bf16 one on Hopper);
- cache: each skipped step saves one step's share of the denoising floor;
- compile: removes no FLOPs; it can only close the gap between a measured step and its floor.

Attention FLOPs are counted by wrapping ``scaled_dot_product_attention`` (``4 * B * H * Sq * Sk * D``),
as the meta device runs SDPA as plain matmuls; linear FLOPs are the ``mm``/``addmm`` counts.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.errors import ConfigError, unknown_choice
from accel.measure.flops import PEAK_FLOPS
from accel.zoo import synthetic

DEVICES = {key.lower(): key for key in PEAK_FLOPS}
DTYPES = ("bf16", "fp8")


@dataclass
class Count:
    """FLOPs of one call of one component, split into attention, linear and the rest."""

    total: int = 0
    attention: int = 0
    linear: int = 0
    error: str | None = None

    @property
    def other(self) -> int:
        return self.total - self.attention - self.linear


@dataclass
class Roofline:
    """What ``omni-accel roofline`` prints, as data (FLOPs, floors in seconds, savings as fractions)."""

    source: str
    height: int
    width: int
    frames: int
    steps: int
    device: str
    dtype: str
    image_tokens: int
    text_tokens: int
    denoiser_calls_per_step: int
    forward: Count
    encoders: dict[str, Count]
    vae_decode: Count
    peak_bf16: float
    peak_fp8: float | None
    per_step: int = 0
    per_image: int = 0
    floor_step_s: float = 0.0
    floor_image_s: float = 0.0
    savings: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def _attention_tally(sink: list[int]) -> Iterator[None]:
    """Add the FLOPs of every ``scaled_dot_product_attention`` call (QK^T and AV) to ``sink``."""
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def counted(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        *batch, sq, d = query.shape
        sk, dv = key.shape[-2], value.shape[-1]
        sink.append(2 * math.prod(batch) * sq * sk * d + 2 * math.prod(batch) * sq * sk * dv)
        return original(query, key, value, *args, **kwargs)

    F.scaled_dot_product_attention = counted
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def count_call(function: Any) -> Count:
    """FLOPs of ``function()`` (no autograd), split into attention, linear and other."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    attention: list[int] = []
    try:
        with torch.no_grad(), _attention_tally(attention), FlopCounterMode(display=False) as counter:
            function()
    except Exception as error:  # a component that cannot run on meta: reported, the rest still counts
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return Count(error=f"{type(error).__name__}: {first[:160]}")
    ops = counter.get_flop_counts().get("Global", {})
    linear = sum(v for k, v in ops.items() if str(k).split(".")[-1] in ("mm", "addmm"))
    return Count(total=int(counter.get_total_flops()), attention=int(sum(attention)), linear=int(linear))


def _meta(*shape: int, dtype: Any = None) -> Any:
    import torch

    return torch.empty(*shape, device="meta", dtype=dtype or torch.bfloat16)


def _ids(length: int) -> Any:
    import torch

    return torch.zeros(1, length, dtype=torch.long, device="meta")


def _denoiser_call(arch_name: str, transformer: Any, tokens: dict[str, Any]) -> Any:
    import torch

    text = tokens["text"]
    if arch_name == "flux.1-dev":
        n = tokens["image"]
        return lambda: transformer(
            hidden_states=_meta(1, n, transformer.config.in_channels),
            encoder_hidden_states=_meta(1, text, transformer.config.joint_attention_dim),
            pooled_projections=_meta(1, transformer.config.pooled_projection_dim),
            timestep=_meta(1),
            img_ids=_meta(n, 3),
            txt_ids=_meta(text, 3),
            guidance=_meta(1, dtype=torch.float32),
            return_dict=False,
        )
    if arch_name == "qwen-image":
        h, w = tokens["grid"]
        return lambda: transformer(
            hidden_states=_meta(1, h * w, transformer.config.in_channels),
            encoder_hidden_states=_meta(1, text, transformer.config.joint_attention_dim),
            encoder_hidden_states_mask=torch.ones(1, text, dtype=torch.long, device="meta"),
            timestep=_meta(1),
            img_shapes=[[(1, h, w)]],
            return_dict=False,
        )
    frames, h, w = tokens["latent"]
    return lambda: transformer(
        hidden_states=_meta(1, transformer.config.in_channels, frames, h, w),
        timestep=_meta(1),
        encoder_hidden_states=_meta(1, text, transformer.config.text_dim),
        return_dict=False,
    )


def _encoder_calls(components: dict[str, Any], arch_name: str, text: int) -> dict[str, Any]:
    calls = {}
    if arch_name == "flux.1-dev":
        clip = components["text_encoder"]
        calls["text_encoder"] = lambda: clip(_ids(clip.config.max_position_embeddings))
        t5 = components["text_encoder_2"]
        calls["text_encoder_2"] = lambda: t5(_ids(text))
    elif arch_name == "qwen-image":
        import torch

        qwen = components["text_encoder"]
        length = text + 34  # the chat template's prefix, dropped after encoding
        position_ids = torch.zeros(3, 1, length, dtype=torch.long, device="meta")
        calls["text_encoder"] = lambda: qwen(input_ids=_ids(length), position_ids=position_ids)
    else:
        umt5 = components["text_encoder"]
        calls["text_encoder"] = lambda: umt5(_ids(text))
    return calls


def _vae_call(vae: Any, arch_name: str, latent: tuple[int, int, int]) -> Any:
    frames, h, w = latent
    channels = vae.config.latent_channels if hasattr(vae.config, "latent_channels") else vae.config.z_dim
    if arch_name == "flux.1-dev":
        return lambda: vae.decode(_meta(1, channels, h, w), return_dict=False)
    return lambda: vae.decode(_meta(1, channels, frames, h, w), return_dict=False)


def peaks(device: str) -> tuple[float, float | None]:
    """Dense bf16 and fp8 peaks (FLOP/s) of a named device (``h200``, ``h100``, ...)."""
    if device.lower() not in DEVICES:
        raise ConfigError(f"--device: {unknown_choice('device', device, DEVICES)}")
    table = PEAK_FLOPS[DEVICES[device.lower()]]
    return table["bfloat16"], table.get("float8")


def compute(
    source: str,
    height: int,
    width: int,
    steps: int,
    device: str = "h200",
    dtype: str = "bf16",
    frames: int | None = None,
    text_tokens: int | None = None,
) -> Roofline:
    """Count FLOPs of ``source`` (a ``synthetic:`` source) on the meta device and derive its roofline."""
    if not synthetic.is_synthetic(source):
        from accel.zoo.architectures import ARCHITECTURES

        raise ConfigError(
            f"roofline: '{source}' is not a synthetic source; use one of "
            + ", ".join(f"synthetic:{n}" for n in ARCHITECTURES)
        )
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype: {unknown_choice('dtype', dtype, DTYPES)}")
    parsed = synthetic.parse(source, "roofline")
    arch = parsed.architecture
    for name, value in (("--height", height), ("--width", width)):
        if value <= 0 or value % arch.resolution_factor:
            raise ConfigError(f"{name}: {value} is not a positive multiple of {arch.resolution_factor} for {arch.name}")
    if steps <= 0:
        raise ConfigError(f"--steps: {steps} must be positive")
    peak_bf16, peak_fp8 = peaks(device)
    if dtype == "fp8" and peak_fp8 is None:
        raise ConfigError(f"--dtype fp8: no fp8 peak known for {device}")
    frames = frames or arch.default_workload.get("num_frames", 1)
    text = text_tokens or arch.text_tokens
    lh, lw = height // arch.vae_scale, width // arch.vae_scale
    latent_frames = (frames - 1) // arch.temporal_scale + 1 if arch.modality == "video" else 1
    grid = (lh // arch.patch, lw // arch.patch)
    image_tokens = latent_frames * grid[0] * grid[1]
    tokens = {"text": text, "image": image_tokens, "grid": grid, "latent": (latent_frames, lh, lw)}

    components = synthetic.build_components(parsed, "meta", "bfloat16")
    forward = count_call(_denoiser_call(arch.name, components["transformer"], tokens))
    encoders = {name: count_call(call) for name, call in _encoder_calls(components, arch.name, text).items()}
    vae = count_call(_vae_call(components["vae"], arch.name, (latent_frames, lh, lw)))

    result = Roofline(
        source=source, height=height, width=width, frames=frames, steps=steps, device=DEVICES[device.lower()],
        dtype=dtype, image_tokens=image_tokens, text_tokens=text,
        denoiser_calls_per_step=arch.denoiser_calls_per_step, forward=forward, encoders=encoders, vae_decode=vae,
        peak_bf16=peak_bf16, peak_fp8=peak_fp8,
    )  # fmt: skip
    result.per_step = forward.total * arch.denoiser_calls_per_step
    result.per_image = result.per_step * steps + sum(c.total for c in encoders.values()) + vae.total
    step_linear = forward.linear * arch.denoiser_calls_per_step
    step_rest = result.per_step - step_linear
    fp8_floor_step = step_linear / peak_fp8 + step_rest / peak_bf16 if peak_fp8 else None
    # fp8 has a peak here (refused above otherwise), so its floor is a number.
    result.floor_step_s = (
        fp8_floor_step if dtype == "fp8" and fp8_floor_step is not None else result.per_step / peak_bf16
    )
    fixed = sum(c.total for c in encoders.values()) + vae.total
    result.floor_image_s = result.floor_step_s * steps + fixed / peak_bf16
    result.savings = _savings(result, forward, fp8_floor_step)
    return result


def _savings(result: Roofline, forward: Count, fp8_floor_step: float | None) -> dict[str, str]:
    attention_share = forward.attention / forward.total if forward.total else 0.0
    bf16_step = result.per_step / result.peak_bf16
    savings = {
        "attention": (
            f"attention is {attention_share:.1%} of a forward's FLOPs: a faster attention kernel saves at most "
            f"{attention_share:.1%} of a step (Amdahl bound: {1 / max(1e-9, 1 - attention_share):.2f}x)"
        ),
        "quant": (
            f"linear layers are {forward.linear / max(1, forward.total):.1%} of a forward's FLOPs: at the fp8 peak "
            f"the step floor drops from {bf16_step * 1e3:.1f} ms to {fp8_floor_step * 1e3:.1f} ms "
            f"(at most {1 - fp8_floor_step / bf16_step:.1%} saved, {bf16_step / fp8_floor_step:.2f}x)"
            if fp8_floor_step
            else f"no fp8 peak known for {result.device}"
        ),
        "cache": (
            f"each skipped step saves 1/{result.steps} of the denoising floor ({result.floor_step_s * 1e3:.1f} ms); "
            "the first steps and the text encoders and VAE are never skipped"
        ),
        "compile": "removes no FLOPs: it can only close the gap between a measured step and its floor",
    }
    return savings


def _tflop(flops: int) -> str:
    return f"{flops / 1e12:,.2f} TFLOP"


def format_text(result: Roofline) -> str:
    """The roofline as the lines ``omni-accel roofline`` prints."""
    peak = result.peak_fp8 if result.dtype == "fp8" and result.peak_fp8 is not None else result.peak_bf16
    lines = [
        f"{result.source} at {result.height}x{result.width}"
        + (f", {result.frames} frames" if result.frames > 1 else "")
        + f", {result.steps} steps, on {result.device} ({result.dtype}; dense datasheet peaks: "
        f"bf16 {result.peak_bf16 / 1e12:.0f} TFLOP/s"
        + (f", fp8 {result.peak_fp8 / 1e12:.0f} TFLOP/s" if result.peak_fp8 else "")
        + ")",
        "Counted on the meta device (published shapes, nothing allocated); synthetic weights do not change FLOPs.",
        "",
        f"tokens: {result.image_tokens} image + {result.text_tokens} text",
        f"denoiser forward:  {_tflop(result.forward.total)} (attention {_tflop(result.forward.attention)}, "
        f"linear {_tflop(result.forward.linear)}, other {_tflop(result.forward.other)})",
        f"per step:          {_tflop(result.per_step)} ({result.denoiser_calls_per_step} forward(s) per step)",
    ]
    for name, count in result.encoders.items():
        lines.append(f"{name + ':':<19}{_tflop(count.total) if count.error is None else 'not counted: ' + count.error}")
    vae = result.vae_decode
    lines.append(f"{'vae decode:':<19}{_tflop(vae.total) if vae.error is None else 'not counted: ' + vae.error}")
    lines += [
        f"per image:         {_tflop(result.per_image)}",
        "",
        f"floor per step:    {result.floor_step_s * 1e3:.1f} ms ({result.dtype} at {peak / 1e12:.0f} TFLOP/s)",
        f"floor per image:   {result.floor_image_s:.2f} s ({result.steps} steps + text encoders + VAE decode)",
        "",
        "what each feature family can at most save:",
        *(f"- {family}: {text}" for family, text in result.savings.items()),
    ]
    return "\n".join(lines)
