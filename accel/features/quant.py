"""torchao quantization (``quantization``): weights of chosen components in int8, float8 or int4.

Applied after loading with ``torchao.quantization.quantize_`` (default) or at load time through
diffusers' ``PipelineQuantizationConfig(quant_mapping=...)`` (``at_load: true``).

Evidence, per component: the eligible linear layers (those ``quantize_`` visits), and after every timed
run the share of them whose weight is a torchao tensor; the layers left unquantized, each with torchao's
reason (torchao skips shapes its kernels reject with an INFO log line and no error: captured here, or the
shape rule when quantized at load); weight bytes before and after. A share below ``min_quantized_share``
on any run fails the cell; a partial quantization above it is reported as partial.
``remove`` restores the original weights (kept on the CPU) for post-load quantization.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    DENOISER_COMPONENTS,
    LOSSY_LIMITS,
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    compute_dtype,
    denoisers,
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
    components: tuple[str, ...] | None = Field(
        default=None,
        description="Pipeline components to quantize (default: every denoiser: transformer, transformer_2, unet).",
    )
    at_load: bool = Field(
        default=False, description="Quantize while loading (PipelineQuantizationConfig) instead of after."
    )
    exclude: tuple[str, ...] = Field(
        default=(),
        description="Linear layers to leave unquantized, by dotted name inside their component (e.g. "
        "'proj_out', 'single_transformer_blocks.3.proj_out'): the sensitivity table of `omni-accel diverge "
        "--sensitivity` names the ones that cost the most quality. Excluded layers are not counted as eligible.",
    )
    min_quantized_share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Least share of eligible linear layers that must be quantized on every run (torchao skips "
        "shapes its kernels reject); below it the cell fails.",
    )


def quantized_components(pipeline: Any, options: QuantizationConfig) -> tuple[str, ...]:
    """The components ``options`` quantize on ``pipeline``: those named, else every denoiser it has."""
    return options.components if options.components is not None else tuple(denoisers(pipeline))


def _is_quantized(tensor: Any) -> bool:
    import torch

    return type(tensor) not in (torch.Tensor, torch.nn.Parameter)


def _eligible_linears(module: Any) -> dict[str, Any]:
    """The linear layers ``quantize_`` visits (torchao's own filter), by dotted name."""
    from torchao.quantization.quant_api import _is_linear

    return {name: m for name, m in module.named_modules() if _is_linear(m, name)}


def _shape_rule(method: str, weight: Any) -> str:
    """Why torchao would skip this weight for ``method``, from its rules (used when no log line was seen)."""
    out_dim, in_dim = weight.shape[-2:]
    if method.startswith("fp8") and (in_dim % 16 or out_dim % 16):
        return f"float8 needs both weight dimensions multiples of 16 (weight {tuple(weight.shape)})"
    if method == "int4wo" and in_dim % 128:
        return f"int4 needs in_features a multiple of group_size 128 (weight {tuple(weight.shape)})"
    return "torchao left the weight unquantized without a reason"


class _TorchaoSkips:
    """Collects torchao's "Skipping ..." log lines during ``quantize_``, attributed to the layer being visited."""

    def __init__(self, exclude: tuple[str, ...] = ()) -> None:
        import logging

        self.exclude = set(exclude)
        self.layer = ""
        self.reasons: dict[str, str] = {}
        self.logger = logging.getLogger("torchao")
        outer = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if "skip" in message.lower():
                    outer.reasons[outer.layer] = message.strip()

        self.handler = _Handler(logging.INFO)

    def filter_fn(self, module: Any, name: str) -> bool:
        from torchao.quantization.quant_api import _is_linear

        if _is_linear(module, name) and name not in self.exclude:
            self.layer = name
            return True
        return False

    def __enter__(self) -> _TorchaoSkips:
        self.level = self.logger.level
        self.logger.setLevel(min(self.level or 20, 20))
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)


def _check_excluded(pipeline: Any, options: QuantizationConfig) -> None:
    """Refuse an ``exclude`` name that is no linear layer of any quantized component (a typo would quietly
    quantize the layer it meant to keep)."""
    import torch

    from accel.errors import ConfigError

    components = quantized_components(pipeline, options)
    known = {
        name
        for component in components
        for name, m in getattr(pipeline, component).named_modules()
        if isinstance(m, torch.nn.Linear)
    }
    unknown = [name for name in options.exclude if name not in known]
    if unknown:
        raise ConfigError(
            f"quantization.exclude: {', '.join(unknown)} is no linear layer of {', '.join(components)}; "
            "give dotted names inside the component, as the sensitivity table prints them (e.g. 'proj_out')"
        )


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
    """Checks after every run which eligible linear layers hold a torchao weight."""

    def __init__(
        self,
        pipeline: Any,
        originals: dict[str, dict[str, Any]],
        census: dict[str, Any],
        eligible: dict[str, dict[str, Any]],
        min_share: float,
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.originals = originals
        self.census = census
        self.eligible = eligible
        self.min_share = min_share

    def end_run(self) -> None:
        # Type checks only (cheap): the weights the run used, whatever ran between apply and now.
        self.current["quantized"] = {
            component: sum(1 for m in linears.values() if _is_quantized(m.weight))
            for component, linears in self.eligible.items()
        }

    def remove(self) -> None:
        import torch

        for component, weights in self.originals.items():
            module = getattr(self.pipeline, component)
            for name, weight in weights.items():
                linear = module.get_submodule(name)
                device = next(iter(linear.parameters())).device
                if isinstance(weight, torch.nn.Parameter) and weight.device == device:
                    linear.weight = weight  # the original Parameter, storage and all
                else:
                    linear.weight = torch.nn.Parameter(weight.to(device), requires_grad=False)
        self.originals = {}


class Quantization(Feature[QuantizationConfig, _QuantHandle]):
    """Quantize linear layers with torchao."""

    name = "quantization"
    family = "quant"
    feature_class = FeatureClass.LOSSY
    stage = Stage.QUANTIZE
    config_cls = QuantizationConfig
    lossy_limits = LOSSY_LIMITS
    roofline_exempt = "the peak depends on the quantized kernel"
    global_state = ("inductor",)  # torchao's quantize_ sets inductor flags
    primary_option = "method"
    description = "torchao quantization of linear layers (quantize_ / PipelineQuantizationConfig)"
    denoiser_evidence = ("quantized_linears_by_component_per_run", "linear layers quantized")
    reach = Reach.EVERY_DENOISER  # by default; the denoisers named in components otherwise (``denoisers_reached``)
    untouched_hint = "name every denoiser in quantization's components, e.g. [transformer, transformer_2]"

    def denoisers_reached(self, pipeline: Any, options: QuantizationConfig) -> set[str] | None:
        """The denoisers quantized: every one by default, else those among ``components``."""
        return set(quantized_components(pipeline, options)) & set(denoisers(pipeline))

    def probe(self, device: str, options: QuantizationConfig, dtype: str | None = None) -> Support:
        import importlib.util

        if importlib.util.find_spec("torchao") is None:
            return Support.no("package torchao not installed: pip install torchao", Owner.DEVICE)
        if options.method in ("fp8dq", "fp8dq_row"):
            support = _needs_sm89(device)
            if not support.supported:
                return support
        if options.method == "fp8dq_row" and dtype is not None and dtype != "bfloat16":
            return Support.no(
                f"fp8dq_row (per-row float8) needs bfloat16 weights (torchao asserts it; the model is {dtype}): "
                "set the model's dtype: bfloat16",
                Owner.LIBRARY,
            )
        if options.method == "int4wo":
            if not device.startswith("cuda"):
                return Support.no(
                    f"int4wo needs a CUDA GPU with torchao's int4 kernels (found: {device})", Owner.DEVICE
                )
            package = _int4_packing_package()
            if package is not None:
                return Support.no(
                    f"int4wo needs torchao's int4 packing package {package}: pip install {package}", Owner.DEVICE
                )
            if dtype is not None and dtype != "bfloat16":
                return Support.no(
                    f"int4wo needs bfloat16 weights (the model is {dtype}): set the model's dtype", Owner.LIBRARY
                )
        return Support.yes()

    def check(self, pipeline: Any, device: str, options: QuantizationConfig) -> Support:
        probed = self.probe(device, options, compute_dtype(pipeline))
        if not probed.supported:
            return probed
        if options.at_load and not hasattr(pipeline, "save_pretrained"):
            return Support.no(
                "at_load quantization goes through diffusers' from_pretrained: adapter target only", Owner.HARNESS
            )
        components = getattr(pipeline, "components", None)
        if not isinstance(components, dict):  # a bare module (nn.Linear) has no components to name
            return Support.no(
                f"{type(pipeline).__name__} is not a pipeline: quantization quantizes a pipeline's components "
                f"({', '.join(options.components or ('every denoiser',))}); pass the loaded pipeline, or quantize a "
                "bare module with torchao.quantization.quantize_",
                Owner.HARNESS,
            )
        present = sorted(n for n, m in components.items() if hasattr(m, "parameters"))
        if options.components is None and not denoisers(pipeline):
            return Support.no(
                f"pipeline {type(pipeline).__name__} has no denoiser (transformer, transformer_2 or unet) to quantize "
                f"(has: {', '.join(present)}); name the components to quantize",
                Owner.MODEL,
            )
        for component in options.components or ():
            if getattr(pipeline, component, None) is None:
                return Support.no(f"pipeline has no component '{component}' (has: {', '.join(present)})", Owner.MODEL)
        return Support.yes()

    def load_kwargs(self, options: QuantizationConfig) -> dict[str, Any]:
        if not options.at_load:
            return {}
        from diffusers import PipelineQuantizationConfig, TorchAoConfig

        # Before loading the pipeline's denoisers are not known: every name one may have (diffusers quantizes the
        # components the mapping names and skips the names the pipeline lacks).
        names = options.components or DENOISER_COMPONENTS
        exclude = list(options.exclude) or None
        mapping: dict[str, Any] = {
            c: TorchAoConfig(torchao_config(options.method), modules_to_not_convert=exclude) for c in names
        }
        return {"quantization_config": PipelineQuantizationConfig(quant_mapping=mapping)}

    def apply(self, pipeline: Any, options: QuantizationConfig, context: RunContext) -> _QuantHandle:
        import torch
        from torchao.quantization import quantize_

        _check_excluded(pipeline, options)  # before anything is quantized
        census: dict[str, Any] = {}
        originals: dict[str, dict[str, Any]] = {}
        eligible: dict[str, dict[str, Any]] = {}
        for component in quantized_components(pipeline, options):
            module = getattr(pipeline, component)
            before = _weight_bytes(module)
            reasons: dict[str, str] = {}
            if not options.at_load:
                # On the CPU the original Parameter itself is kept (quantize_ builds new weights and drops it from
                # the module; keeping it costs what a copy would): remove() puts back the very storage, so the
                # outputs after removal are bit-exact (a copy lands at another alignment, and CPU kernels choose
                # their path by alignment: 1e-6 apart). On an accelerator a CPU copy keeps device memory free.
                originals[component] = {
                    name: m.weight if m.weight.device.type == "cpu" else m.weight.detach().to("cpu", copy=True)
                    for name, m in module.named_modules()
                    if isinstance(m, torch.nn.Linear)
                }
                names = [name for name in _eligible_linears(module) if name not in options.exclude]
                with _TorchaoSkips(options.exclude) as skips:
                    quantize_(module, torchao_config(options.method), filter_fn=skips.filter_fn)
                reasons = skips.reasons
                # Looked up after quantize_: a config may replace a layer's module, not only its weight.
                eligible[component] = {name: module.get_submodule(name) for name in names}
            else:
                eligible[component] = {
                    name: m
                    for name, m in module.named_modules()
                    if isinstance(m, torch.nn.Linear) and name not in options.exclude
                }
            linears = eligible[component]
            census[component] = {
                "eligible_linears": len(linears),
                "skipped": {
                    name: reasons.get(name) or _shape_rule(options.method, m.weight)
                    for name, m in linears.items()
                    if not _is_quantized(m.weight)
                },
                "weight_bytes_before": None if options.at_load else before,
                "weight_bytes_after": _weight_bytes(module),
            }
        return _QuantHandle(pipeline, originals, census, eligible, options.min_quantized_share)

    def verify(self, handle: _QuantHandle) -> Verdict:
        census = handle.census
        eligible = sum(c["eligible_linears"] for c in census.values())
        per_run = [sum(run.get("quantized", {}).values()) for run in handle.runs]
        shares = [quantized / eligible if eligible else 0.0 for quantized in per_run]
        for component, module_census in census.items():  # bytes after the runs, what they ran with
            module_census["weight_bytes_after"] = _weight_bytes(getattr(handle.pipeline, component))
        skipped = {f"{c}.{name}": reason for c, entry in census.items() for name, reason in entry["skipped"].items()}
        evidence = {
            "components": census,
            "quantized_linears_per_run": per_run,
            "quantized_linears_by_component_per_run": [dict(run.get("quantized", {})) for run in handle.runs],
            "quantized_share_per_run": [round(share, 4) for share in shares],
            "min_quantized_share": handle.min_share,
            "partial": bool(shares) and min(shares) < 1.0,
        }
        if not eligible:
            return Verdict(False, "quantization requested but the components have no linear layer", evidence)
        if not shares:
            return Verdict(False, "no timed run to check the quantized weights on", evidence)
        worst = min(shares)
        counted = f"{min(per_run)}/{eligible} eligible linear layers quantized"
        why = ""
        if skipped:
            name, reason = next(iter(skipped.items()))
            why = f"; {len(skipped)} skipped by torchao, e.g. {name}: {reason}"
        if worst == 0:
            return Verdict(False, f"quantization requested but {counted}{why}", evidence)
        # min_quantized_share allows torchao's skips, not a denoiser that ran with none of its layers quantized
        # (Wan 2.2's transformer_2 beside transformer: half the layers, a share of 0.5 on its own).
        untouched = sorted(
            component
            for run in handle.runs
            for component, quantized in run.get("quantized", {}).items()
            if not quantized and census[component]["eligible_linears"] and component in denoisers(handle.pipeline)
        )
        if untouched:
            names = ", ".join(dict.fromkeys(untouched))
            return Verdict(
                False,
                f"partial: a denoiser ran with none of its linear layers quantized ({names}); {counted}{why}",
                {**evidence, "untouched_denoisers": list(dict.fromkeys(untouched))},
            )
        if worst < handle.min_share:
            return Verdict(
                False,
                f"partial quantization: {counted} ({worst:.0%} < min_quantized_share {handle.min_share:.0%}){why}",
                evidence,
            )
        return Verdict(True, f"{'partial quantization: ' if worst < 1 else ''}{counted}{why}", evidence)


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
        return Support.no(f"needs a CUDA GPU with SM >= 8.9 (found: {device})", Owner.DEVICE)
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return Support.no(f"needs a CUDA GPU with SM >= 8.9 (found: SM {major}.{minor})", Owner.DEVICE)
    return Support.yes()
