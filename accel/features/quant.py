"""torchao quantization (``quantization``): weights of chosen components in int8, float8 or int4.

Applied after loading with ``torchao.quantization.quantize_`` (default) or at load time through
diffusers' ``PipelineQuantizationConfig(quant_mapping=...)`` (``at_load: true``). Evidence: the number of
linear layers whose weight became a torchao tensor, and weight bytes before and after, per component.
``remove`` restores the original weights (kept on the CPU) for post-load quantization.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    RunContext,
    Stage,
    Support,
    Verdict,
    compute_dtype,
)

Method = Literal["int8wo", "int8dq", "fp8wo", "fp8dq", "fp8dq_row", "int4wo"]

METHODS: dict[str, str] = {
    "int8wo": "int8 weight-only (Int8WeightOnlyConfig)",
    "int8dq": "int8 dynamic activations, int8 weights (Int8DynamicActivationInt8WeightConfig)",
    "fp8wo": "float8 weight-only (Float8WeightOnlyConfig)",
    "fp8dq": "float8 dynamic activations and weights, per tensor (Float8DynamicActivationFloat8WeightConfig)",
    "fp8dq_row": "float8 dynamic activations and weights, per row",
    "int4wo": "int4 weight-only (Int4WeightOnlyConfig)",
}


def torchao_config(method: str) -> Any:
    """The torchao config object for a method name."""
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Float8WeightOnlyConfig,
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        PerRow,
        PerTensor,
    )

    return {
        "int8wo": Int8WeightOnlyConfig,
        "int8dq": Int8DynamicActivationInt8WeightConfig,
        "fp8wo": Float8WeightOnlyConfig,
        "fp8dq": lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()),
        "fp8dq_row": lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
        "int4wo": Int4WeightOnlyConfig,
    }[method]()


class QuantizationConfig(FeatureConfig):
    """Options of ``quantization``."""

    method: Method = Field(
        default="int8wo",
        description="int8wo | int8dq | fp8wo | fp8dq | fp8dq_row | int4wo. Fewer bits: less memory, more error.",
    )
    components: tuple[str, ...] = Field(
        default=("transformer",), description="Pipeline components to quantize (default: the transformer)."
    )
    at_load: bool = Field(
        default=False, description="Quantize while loading (PipelineQuantizationConfig) instead of after."
    )


def _is_quantized(tensor: Any) -> bool:
    import torch

    return type(tensor) not in (torch.Tensor, torch.nn.Parameter)


def _linear_census(module: Any) -> tuple[int, int]:
    """(quantized linear layers, all linear layers) of a module."""
    import torch

    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    return sum(1 for m in linears if _is_quantized(m.weight)), len(linears)


def _weight_bytes(module: Any) -> int:
    """Bytes of parameters, counting torchao tensors by their packed storage."""
    total = 0
    for tensor in [*module.parameters(), *module.buffers()]:
        inner = getattr(tensor, "__tensor_flatten__", None)
        if inner is not None and _is_quantized(tensor):
            names, _ = tensor.__tensor_flatten__()
            total += sum(getattr(tensor, n).numel() * getattr(tensor, n).element_size() for n in names)
        else:
            total += tensor.numel() * tensor.element_size()
    return total


class _QuantHandle(Handle):
    def __init__(self, pipeline: Any, originals: dict[str, dict[str, Any]], census: dict[str, Any]) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.originals = originals
        self.census = census

    def remove(self) -> None:
        import torch

        for component, weights in self.originals.items():
            module = getattr(self.pipeline, component)
            for name, weight in weights.items():
                linear = module.get_submodule(name)
                device = next(iter(linear.parameters())).device
                linear.weight = torch.nn.Parameter(weight.to(device), requires_grad=False)
        self.originals = {}


class Quantization(Feature):
    """Quantize linear layers with torchao."""

    name = "quantization"
    family = "quant"
    feature_class = FeatureClass.LOSSY
    stage = Stage.QUANTIZE
    config_cls = QuantizationConfig
    primary_option = "method"
    description = "torchao quantization of linear layers (quantize_ / PipelineQuantizationConfig)"

    def probe(self, device: str, options: QuantizationConfig, dtype: str | None = None) -> Support:  # type: ignore[override]
        import importlib.util

        if importlib.util.find_spec("torchao") is None:
            return Support.no("package torchao not installed: pip install torchao")
        if options.method in ("fp8dq", "fp8dq_row"):
            support = _needs_sm89(device)
            if not support.supported:
                return support
        if options.method == "fp8dq_row" and dtype is not None and dtype != "bfloat16":
            return Support.no(
                f"fp8dq_row (per-row float8) needs bfloat16 weights (torchao asserts it; the model is {dtype}): "
                "set the model's dtype: bfloat16"
            )
        if options.method == "int4wo":
            if not device.startswith("cuda"):
                return Support.no(f"int4wo needs a CUDA GPU with torchao's int4 kernels (found: {device})")
            package = _int4_packing_package()
            if package is not None:
                return Support.no(f"int4wo needs torchao's int4 packing package {package}: pip install {package}")
            if dtype is not None and dtype != "bfloat16":
                return Support.no(f"int4wo needs bfloat16 weights (the model is {dtype}): set the model's dtype")
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: QuantizationConfig) -> Support:
        probed = self.probe(device, options, compute_dtype(pipeline))
        if not probed.supported:
            return probed
        if options.at_load and not hasattr(pipeline, "save_pretrained"):
            return Support.no("at_load quantization goes through diffusers' from_pretrained: adapter target only")
        for component in options.components:
            if getattr(pipeline, component, None) is None:
                present = sorted(n for n, m in pipeline.components.items() if hasattr(m, "parameters"))
                return Support.no(f"pipeline has no component '{component}' (has: {', '.join(present)})")
        return Support.yes()

    def load_kwargs(self, options: QuantizationConfig) -> dict[str, Any]:
        if not options.at_load:
            return {}
        from diffusers import PipelineQuantizationConfig, TorchAoConfig

        mapping = {c: TorchAoConfig(torchao_config(options.method)) for c in options.components}
        return {"quantization_config": PipelineQuantizationConfig(quant_mapping=mapping)}

    def apply(self, pipeline: Any, options: QuantizationConfig, context: RunContext) -> Handle:
        import torch
        from torchao.quantization import quantize_

        census: dict[str, Any] = {}
        originals: dict[str, dict[str, Any]] = {}
        for component in options.components:
            module = getattr(pipeline, component)
            before = _weight_bytes(module)
            if not options.at_load:
                originals[component] = {
                    name: m.weight.detach().to("cpu", copy=True)
                    for name, m in module.named_modules()
                    if isinstance(m, torch.nn.Linear)
                }
                quantize_(module, torchao_config(options.method))
            quantized, linears = _linear_census(module)
            census[component] = {
                "quantized_linears": quantized,
                "linears": linears,
                "weight_bytes_before": None if options.at_load else before,
                "weight_bytes_after": _weight_bytes(module),
            }
        return _QuantHandle(pipeline, originals, census)

    def verify(self, handle: Handle) -> Verdict:
        census = handle.census
        quantized = sum(c["quantized_linears"] for c in census.values())
        linears = sum(c["linears"] for c in census.values())
        evidence = {"components": census}
        if quantized > 0:
            return Verdict(True, f"{quantized}/{linears} linear layers quantized", evidence)
        return Verdict(False, f"quantization requested but 0/{linears} linear layers were quantized", evidence)


def _int4_packing_package() -> str | None:
    """The package torchao's int4 weight-only tensors pack with, when it is missing; None when present.

    torchao >= 0.17 packs with ``mslk``; earlier releases with ``fbgemm-gpu-genai`` (``fbgemm_gpu``).
    """
    import importlib.util

    try:
        import torchao.utils as ao_utils
    except ImportError:
        return "torchao"
    if hasattr(ao_utils, "_is_mslk_available"):
        return None if importlib.util.find_spec("mslk") is not None else "mslk"
    return None if importlib.util.find_spec("fbgemm_gpu") is not None else "fbgemm-gpu-genai"


def _needs_sm89(device: str) -> Support:
    if not device.startswith("cuda"):
        return Support.no(f"needs a CUDA GPU with SM >= 8.9 (found: {device})")
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return Support.no(f"needs a CUDA GPU with SM >= 8.9 (found: SM {major}.{minor})")
    return Support.yes()
