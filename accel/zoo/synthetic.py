"""``synthetic:<name>`` sources: real pipeline classes with published shapes and random weights.

``source: synthetic:flux.1-dev`` builds diffusers' ``FluxPipeline`` with FLUX.1-dev's published
architecture (``accel.zoo.architectures``) and random weights made directly on the target device and
dtype: no checkpoint, no disk round trip, no hub. Tokenizers are the offline zoo's. Speed, memory and
FLOPs depend on shapes, not weights, so these sources measure what a real checkpoint would cost; their
images are noise, so quality against their own baseline means something only for lossless features.

Options follow the name after ``?``: ``synthetic:flux.1-dev?depth=2`` keeps every width and builds 2
blocks per block stack (transformer, text encoders, vision tower); ``depth=0.25`` keeps a quarter of
each (at least one). The CPU test suite builds the GPU check's models this way.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from accel.errors import ConfigError, unknown_choice
from accel.zoo.architectures import ARCHITECTURES, Architecture

PREFIX = "synthetic:"
OPTIONS = ("depth", "width")


@dataclass(frozen=True)
class SyntheticSource:
    """A parsed ``synthetic:`` source: the architecture and the depth option."""

    architecture: Architecture
    depth: float | None = None  # None: the published depth; < 1: a fraction; >= 1: blocks per stack
    width: int = 1  # divisor of every width (channels, heads); 1: the published widths

    @property
    def published_shapes(self) -> bool:
        """Whether widths are the published ones (only then do FLOPs and speed mean the real model's)."""
        return self.width == 1


def is_synthetic(source: str) -> bool:
    """Whether ``source`` is a ``synthetic:`` source."""
    return source.startswith(PREFIX)


def parse(source: str, where: str = "source") -> SyntheticSource:
    """Parse ``synthetic:<name>[?depth=N]``; a ConfigError naming the allowed names and options otherwise."""
    body = source[len(PREFIX) :]
    name, _, query = body.partition("?")
    if name not in ARCHITECTURES:
        raise ConfigError(f"{where}: {unknown_choice('synthetic model', name, ARCHITECTURES)}")
    options: dict[str, float] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key not in OPTIONS:
            raise ConfigError(f"{where}: {unknown_choice('synthetic option', key, OPTIONS)}")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if key == "depth" and (not number > 0 or (number > 1 and number != int(number))):
            raise ConfigError(
                f"{where}: depth={value!r}: expected a fraction in (0, 1] or a whole number of blocks per stack"
            )
        if key == "width" and (number < 1 or number != int(number)):
            raise ConfigError(f"{where}: width={value!r}: expected a whole divisor of the widths (1, 2, 4, ...)")
        options[key] = number
    parsed = SyntheticSource(ARCHITECTURES[name], options.get("depth"), int(options.get("width", 1)))
    component_configs(parsed, where)  # a width that does not divide every width key is refused here
    return parsed


def scaled_blocks(published: int, depth: float | None) -> int:
    """Blocks kept for a stack of ``published`` blocks: a fraction (at least 1) or a count (at most all)."""
    if depth is None:
        return published
    if depth <= 1 and depth != int(depth):
        return max(1, round(published * depth))
    return max(1, min(published, int(depth)))


def _holder(config: dict[str, Any], dotted: str) -> tuple[dict[str, Any], str]:
    *parents, key = dotted.split(".")
    for part in parents:
        config = config[part]
    return config, key


def _divide(value: Any, width: int, where: str) -> Any:
    if isinstance(value, list):
        return [_divide(v, width, where) for v in value]
    if value % width:
        raise ConfigError(f"{where}: width={width} does not divide {value}")
    return value // width


def component_configs(synthetic: SyntheticSource, where: str = "source") -> dict[str, dict[str, Any]]:
    """Each component's config with its block counts scaled by ``depth`` and widths divided by ``width``."""
    configs = {}
    for name, component in synthetic.architecture.components.items():
        config = copy.deepcopy(component.config)
        for dotted in component.depth_keys:
            holder, key = _holder(config, dotted)
            holder[key] = scaled_blocks(holder[key], synthetic.depth)
        if synthetic.width > 1:
            for dotted in component.width_keys:
                holder, key = _holder(config, dotted)
                holder[key] = _divide(holder[key], synthetic.width, f"{where}: {name}.{dotted}")
        if component.cls == "transformers.Qwen2_5_VLForConditionalGeneration":
            vision = config["vision_config"]
            vision["fullatt_block_indexes"] = [i for i in vision["fullatt_block_indexes"] if i < vision["depth"]]
        configs[name] = config
    return configs


def _resolve_class(dotted: str) -> Any:
    package, _, name = dotted.partition(".")
    return getattr(importlib.import_module(package), name)


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _instantiate(cls_path: str, config: dict[str, Any]) -> Any:
    cls = _resolve_class(cls_path)
    if cls_path.startswith("transformers."):
        import transformers

        config_cls = getattr(transformers, cls.__name__.removesuffix("ForConditionalGeneration") + "Config", None)
        if config_cls is None:  # CLIPTextModel -> CLIPTextConfig, T5EncoderModel -> T5Config, ...
            config_cls = {
                "CLIPTextModel": transformers.CLIPTextConfig,
                "T5EncoderModel": transformers.T5Config,
                "UMT5EncoderModel": transformers.UMT5Config,
            }[cls.__name__]
        return cls(config_cls(**config)).eval()
    if cls_path.endswith("Scheduler"):
        return cls(**config)
    return cls(**config).eval()


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """Skip the classes' own weight initialisers (transformers' ``no_init_weights`` patches torch's too)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers < 5
        # Where transformers 4 kept it (this environment has 5; vLLM-Omni's may not).
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined,no-redef]
    with no_init_weights():
        yield


def _fast_random_init(module: Any, seed: int) -> None:
    """Fill every floating parameter with small seeded random values in place (norm weights 1, biases 0).

    On an accelerator: ``normal_(0, 0.02)`` with a seeded generator on the device. On a CPU, where
    drawing a billion normals takes tens of seconds on 2 cores, each weight is a seeded block of 1M
    normals tiled from a random offset: still finite, still different per tensor, and built at memory
    speed. Either way the same seed gives the same weights on the same device; the scale keeps
    activations finite through dozens of blocks in bf16.
    """
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    block = torch.randn(1 << 20, generator=generator) * 0.02
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if not parameter.is_floating_point():
                continue
            if parameter.ndim == 1:
                is_scale = "norm" in name and name.endswith("weight")
                parameter.fill_(1.0 if is_scale else 0.0)
                continue
            offset = int(torch.randint(0, block.numel(), (1,), generator=generator))
            if parameter.device.type == "cpu":
                flat = parameter.view(-1)
                source = torch.roll(block, -offset).to(parameter.dtype)
                for start in range(0, flat.numel(), source.numel()):
                    chunk = flat[start : start + source.numel()]
                    chunk.copy_(source[: chunk.numel()])
            else:
                seeded = torch.Generator(device=parameter.device).manual_seed(offset)
                parameter.normal_(0.0, 0.02, generator=seeded)


def build_components(
    synthetic: SyntheticSource, device: str = "cpu", dtype: str = "float32", init: bool = True
) -> dict[str, Any]:
    """The pipeline's components, each built on ``device`` in ``dtype`` (``meta``: shapes only).

    Modules are constructed under ``torch.device(device)`` with ``dtype`` as the default dtype, so
    weights are allocated once, where they run; ``init`` then fills them with seeded random values.
    """
    import torch

    from accel.zoo.tokenizers import clip_tokenizer, qwen2_tokenizer, t5_tokenizer

    torch_dtype = getattr(torch, dtype)
    configs = component_configs(synthetic)
    components: dict[str, Any] = {}
    for index, (name, component) in enumerate(synthetic.architecture.components.items()):
        if component.cls.endswith("Scheduler"):
            components[name] = _instantiate(component.cls, configs[name])
            continue
        with torch.device(device), default_dtype(torch_dtype), _no_init():
            module = _instantiate(component.cls, configs[name])
        if hasattr(module, "tie_weights"):  # transformers ties shared embeddings in init_weights, skipped above
            module.tie_weights()
        module.to(torch_dtype)
        if init and device != "meta":
            _fast_random_init(module, seed=index)
        module.requires_grad_(False)
        components[name] = module
    builders = {
        "clip": clip_tokenizer,
        "t5": t5_tokenizer,
        "qwen2": qwen2_tokenizer,
    }
    for attribute, kind in synthetic.architecture.tokenizers.items():
        tokenizer = builders[kind]()
        if kind == "t5":
            tokenizer.model_max_length = max(tokenizer.model_max_length, synthetic.architecture.text_tokens)
        components[attribute] = tokenizer
    return components


def build_pipeline(source: str, device: str = "cpu", dtype: str = "float32") -> Any:
    """The diffusers pipeline for a ``synthetic:`` source, on ``device`` in ``dtype``."""
    import diffusers

    synthetic = parse(source)
    components = build_components(synthetic, device, dtype)
    pipeline = getattr(diffusers, synthetic.architecture.pipeline_class)(**components)
    return pipeline


def parameter_count(module: Any) -> int:
    """Number of parameters of a module (meta or real)."""
    return sum(math.prod(p.shape) for p in module.parameters())
