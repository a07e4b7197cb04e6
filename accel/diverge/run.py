"""Loading the two sides of a comparison from a profile and running one designated call on each.

``diverge(profile, model, variant=...)`` compares a variant (its features applied) against the same model
unaccelerated; ``diverge(profile, model, against=...)`` compares two models of the profile (a native port and
the adapter on one checkpoint). A variant with a parallel feature runs as its ranks (``RankedSide``,
``accel.diverge.ranks``): N ranks against one. Both sides get the same request (the workload's first prompt
and seed), or the comparison is refused before anything loads. ``compare_sides`` is the engine, for sides
already loaded (the tests inject faults into copies of a native pipeline this way).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.diverge.capture import Capture
from accel.diverge.compare import tolerance_for
from accel.diverge.ranks import check_ranks, world_size_of
from accel.diverge.result import DivergeResult
from accel.diverge.stages import Traced, analyse
from accel.errors import ConfigError, did_you_mean
from accel.profile import ModelSpec, Profile, load_profile


@dataclass
class Side:
    """A loaded target (``accel.targets``: ``generate(request)`` and ``pipeline``) to compare; ``warmup``
    uncaptured calls come first (compile, caches); ``applied``: the features' handle, removed by ``close``."""

    label: str
    target: Any
    dtype: str = "float32"
    warmup: int = 0
    applied: Any = None

    def run(self, request: Any) -> Traced:
        """The warm-up calls, then the one designated call, captured."""
        for _ in range(self.warmup):
            self.target.generate(request)
        capture = Capture(self.target.pipeline)
        with capture as trace:
            trace.images = self.target.generate(request)
        return Traced(self.label, self.target.pipeline, trace, capture)

    def close(self) -> None:
        """Remove the features applied to this side, if any."""
        if self.applied is not None:
            self.applied.remove()
            self.applied = None


@dataclass
class RankedSide:
    """A side that runs as ranks (a variant with a parallel feature, ``accel.diverge.ranks``): ``spec`` loaded
    and ``configs`` applied in each rank, one warm-up call, rank 0's designated call captured."""

    label: str
    spec: ModelSpec
    configs: dict[str, Any]
    dtype: str = "float32"
    ranks: int = 0  # set by run: how many ran

    def run(self, request: Any) -> Traced:
        """The ranks' warm-up and designated calls; rank 0's trace, with no pipeline in this process."""
        from accel.diverge.ranks import ranked_trace

        trace, self.ranks = ranked_trace(self.spec, self.configs, request)
        return Traced(self.label, None, trace, None)

    def close(self) -> None:
        """Nothing to remove: the ranks' processes have ended."""


def compare_sides(
    a: Side,
    b: Side | RankedSide,
    request: Any,
    tolerance: float | None = None,
    mapping: dict[str, str] | None = None,
) -> DivergeResult:
    """Run ``request`` once on each side and compare ``b`` against the reference ``a``.

    ``tolerance``: the relative-L2 limit (default: the looser of the two dtypes' ``TOLERANCES``); inputs of
    the loop are held to exact equality when both sides compute in one dtype. ``mapping``: side A's module
    names to side B's (dotted names or runs of segments), for the block bisection; default: a port's own
    weight-name mapping, else identical names."""
    limit = tolerance if tolerance is not None else max(tolerance_for(a.dtype), tolerance_for(b.dtype))
    dtype = a.dtype if a.dtype == b.dtype else f"{a.dtype}/{b.dtype}"
    traced_a, traced_b = a.run(request), b.run(request)
    result = DivergeResult(a.label, b.label, dtype, limit)
    if isinstance(b, RankedSide):
        result.notes.append(
            f"{b.label} ran as {b.ranks} ranks; rank 0's call was captured (every rank's final latents equal); "
            f"isolation fed {a.label}'s components {b.label}'s inputs; its denoiser's blocks are not bisected"
        )
    return analyse(traced_a, traced_b, result, exact_inputs=a.dtype == b.dtype, mapping=mapping)


def load_mapping(mapping: dict[str, str] | str | Path | None) -> dict[str, str] | None:
    """A module mapping as a dict of names to names: given, or read from a YAML file (``--mapping``)."""
    if mapping is None or isinstance(mapping, dict):
        data: Any = mapping
        where = "mapping"
    else:
        import yaml

        where = f"{mapping}: --mapping"
        try:
            data = yaml.safe_load(Path(mapping).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"{where}: cannot read it as YAML ({error})") from error
    if data is None:
        return None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ConfigError(
            f"{where}: expected a mapping of module names to module names (reference's name: other side's name, "
            "e.g. 'ff.net.2: ff.fc2')"
        )
    return dict(data)


def _model(profile: Profile, name: str, option: str) -> ModelSpec:
    names = [m.name for m in profile.models]
    for model in profile.models:
        if model.name == name:
            return model
    raise ConfigError(
        f"{option}: '{name}' is not a model of the profile.{did_you_mean(name, names)} Models: {', '.join(names)}"
    )


def check_same_requests(profile: Profile, a: ModelSpec, b: ModelSpec) -> None:
    """Refuse two models whose requests differ (workload or call kwargs), naming the first difference."""
    from accel.targets.adapter import default_call_kwargs

    left, right = profile.workload_for(a).model_dump(), profile.workload_for(b).model_dump()
    left_kwargs = {**default_call_kwargs(a.source), **a.call_kwargs}
    right_kwargs = {**default_call_kwargs(b.source), **b.call_kwargs}
    for where, x, y in (("workload", left, right), ("call_kwargs", left_kwargs, right_kwargs)):
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                raise ConfigError(
                    f"--against: '{a.name}' and '{b.name}' run different requests ({where}.{key}: {x.get(key)!r} vs "
                    f"{y.get(key)!r}); diverge compares one request on both sides: give both models the same {where}"
                )


def _load(spec: ModelSpec, label: str, configs: dict[str, Any] | None, steps: int) -> Side:
    from accel.features import apply, ordered
    from accel.targets.build import make_target

    target = make_target(spec)
    features = ordered(list(configs or {}))
    load_kwargs: dict[str, Any] = {}
    for feature in features:
        assert configs is not None
        extra = feature.load_kwargs(configs[feature.name])
        if extra and spec.target == "native":
            raise ConfigError(
                f"{feature.name}: load-time options go through diffusers' from_pretrained: adapter "
                "target only; compare it on an adapter model"
            )
        load_kwargs.update(extra)
    pipeline = target.load(load_kwargs or None)
    side = Side(label, target, dtype=spec.dtype)
    if features:
        assert configs is not None
        side.applied = apply(
            pipeline, *(configs[f.name] for f in features), num_inference_steps=steps, device=target.device
        )
        side.warmup = 1  # compile and caches: their first call is not the one compared
    return side


def _variant_configs(profile: Profile, model: str, variant: str) -> dict[str, Any]:
    plan = profile.variant_plan().variants
    names = [v.name for v in plan]
    chosen = next((v for v in plan if v.name == variant), None)
    if chosen is None:
        raise ConfigError(
            f"--variant: '{variant}' is not a variant of the profile.{did_you_mean(variant, names)} "
            f"Variants: {', '.join(names) or '(none)'}"
        )
    if chosen.models is not None and model not in chosen.models:
        raise ConfigError(f"--variant: '{variant}' runs on {', '.join(chosen.models)} only, not on '{model}'")
    return dict(chosen.configs)


def sensitivity(profile: Profile | str | Path, model: str, variant: str) -> tuple[list[Any], str, Any]:
    """The per-layer quantization sensitivity table (``accel.diverge.sensitivity``) of ``model`` for the
    quantization method and components of ``variant``, on the workload's first request, and the layers to leave
    unquantized chosen by measuring (``measured_pick``): (rows, method, pick).

    Raises ``ConfigError`` when ``variant`` has no ``quantization`` feature or the model is unknown."""
    from accel.diverge.sensitivity import layer_sensitivity, measured_pick
    from accel.sweep.spec import build_requests

    loaded = profile if isinstance(profile, Profile) else load_profile(profile)
    spec = _model(loaded, model, "--model")
    configs = _variant_configs(loaded, model, variant)
    quant = configs.get("quantization")
    if quant is None:
        raise ConfigError(
            f"--sensitivity: variant '{variant}' has no quantization feature ({', '.join(configs) or 'none'}); "
            "name a variant with `quantization:` (its method and components are the ones measured)"
        )
    request = build_requests(loaded.workload_for(spec))[0]
    side = _load(spec, model, None, request.steps)
    from accel.features.quant import quantized_components

    components = quantized_components(side.target.pipeline, quant)  # unnamed: every denoiser, as the feature does
    rows = layer_sensitivity(side.target, request, quant.method, components)
    return rows, quant.method, measured_pick(side.target, request, rows, quant.method, components)


def diverge(
    profile: Profile | str | Path,
    model: str,
    variant: str | None = None,
    against: str | None = None,
    tolerance: float | None = None,
    mapping: dict[str, str] | str | Path | None = None,
) -> DivergeResult:
    """Where ``variant`` (features applied to ``model``) or the model ``against`` parts from ``model``'s
    unaccelerated run of the workload's first prompt and seed. Exactly one of ``variant`` and ``against``.
    ``mapping``: module correspondence, ``model``'s names to the other side's (a dict, or a YAML file of one).

    Raises ``ConfigError`` (bad input, before anything loads) for an unknown model or variant, both or neither
    of ``variant``/``against``, a tolerance that is not positive, a mapping that is not one of names to names,
    or two models whose requests differ."""
    from accel.sweep.spec import build_requests

    loaded = profile if isinstance(profile, Profile) else load_profile(profile)
    if (variant is None) == (against is None):
        raise ConfigError(
            "diverge: give exactly one of --variant VARIANT (features against the model's baseline) "
            "and --against OTHER (another model of the profile)"
        )
    if tolerance is not None and not tolerance > 0:
        raise ConfigError(f"--tolerance: {tolerance} is not a positive relative-L2 limit (e.g. 1e-4)")
    names = load_mapping(mapping)
    spec_a = _model(loaded, model, "--model")
    configs: dict[str, Any] | None = None
    if variant is not None:
        spec_b, configs, label_b = spec_a, _variant_configs(loaded, model, variant), f"{model}/{variant}"
    else:
        assert against is not None
        spec_b, label_b = _model(loaded, against, "--against"), against
        if spec_b.name == spec_a.name:
            raise ConfigError(f"--against: '{against}' is --model itself; name another model of the profile")
        check_same_requests(loaded, spec_a, spec_b)
    request = build_requests(loaded.workload_for(spec_a))[0]
    side_b: Side | RankedSide
    if world_size_of(configs) > 1:
        assert configs is not None
        from accel.targets.adapter import resolve_device

        check_ranks(spec_b, configs, loaded.workload_for(spec_b), resolve_device(spec_b.device))
        side_b = RankedSide(label_b, spec_b, configs, dtype=spec_b.dtype)
        side_a = _load(spec_a, f"{model}/baseline", None, request.steps)
    else:
        side_a = _load(spec_a, model if against else f"{model}/baseline", None, request.steps)
        side_b = _load(spec_b, label_b, configs, request.steps)
    try:
        return compare_sides(side_a, side_b, request, tolerance, names)
    finally:
        side_b.close()
