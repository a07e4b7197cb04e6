"""Sweep profiles: the YAML schema, its validation and the errors it gives.

A profile has four sections: ``models`` (what to load), ``workload`` (prompts, seeds, shape), ``variants``
(named sets of features with options) and ``measure`` (warmup, repeats, timeout, executor). Every model
is strict: an unknown key is rejected with the allowed keys and a "did you mean", and every error names
the file and the key path, e.g. ``profiles/x.yaml: variants[2].features.vae_use_tiling: ...``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from accel.data import data_dir
from accel.errors import (
    ConfigError,
    did_you_mean,
    escape_controls,
    explain_error,
    format_location,
    has_controls,
    unknown_choice,
)
from accel.targets.registry import TARGETS, describe_targets
from accel.yaml_bounds import load_yaml_file

if TYPE_CHECKING:
    from accel.features.variants import VariantPlan

DEFAULT_PROFILE_NAME = "quickstart"
# Names become file and folder names (a run directory, outputs/<model>/<variant>.npz, images/<model>/<variant>/,
# figures/bars-<model>.png); most filesystems hold 255 bytes per name, and a 10,000-character model name
# passed plan and killed the sweep with "File name too long". 100 leaves room for every prefix and suffix.
MAX_NAME_LENGTH = 100
# Frames a video model generates when the workload does not say (Wan wants 4k+1).
DEFAULT_VIDEO_FRAMES = 5
# torch.Generator.manual_seed takes 0 .. 2**64 - 1 (a negative seed wraps to the same generator as seed + 2**64).
MAX_SEED = 2**64 - 1
# Samplers are trained on 1000 timesteps; 10000 steps are far past any published schedule (FLUX: 28-50).
MAX_STEPS = 10_000
# Interleaved timing: a pair is two pipeline calls; 10000 pairs are 20000 timed calls in one cell (defaults: 10 first,
# at most 60; the quickstart draws at most 40).
MAX_PAIRS = 10_000
# Warm-up calls and timed passes over every prompt and seed: 1000 is far past any run (quickstart: 1 and 2).
MAX_REPEATS = 1000
# torch threads per cell: more logical CPUs than one machine has (two 192-core sockets with SMT give 768).
MAX_THREADS = 1024
# A per-cell limit longer than a week is no limit (and past threading.TIMEOUT_MAX, ~292 years, join() overflows).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# A native pipeline's text length: QwenImagePipeline refuses more than 1024 tokens, FluxPipeline more than 512.
MAX_SEQUENCE_LENGTH = 1024
# Call arguments the workload sets on every call (adapter.call_kwargs): each has its own key, bounded and shown in
# the report; given under call_kwargs it would silently win over that key (num_inference_steps: 1000000 past
# workload.steps <= 10000, and a report saying 4 steps). The value says where to set it instead.
WORKLOAD_CALL_KWARGS: dict[str, tuple[str, ...]] = {
    "prompt": ("prompts",),
    "negative_prompt": ("negative_prompt",),
    "num_inference_steps": ("steps",),
    "guidance_scale": ("guidance_scale",),
    "height": ("height",),
    "width": ("width",),
    "max_area": ("height", "width"),
    "num_frames": ("num_frames",),
    "num_images_per_prompt": ("num_images_per_prompt",),
    "num_videos_per_prompt": ("num_images_per_prompt",),
    "generator": ("seeds",),
    "output_type": (),  # the harness's own: outputs are compared as float arrays
}
# What a native pipeline reads from call_kwargs (NativeTarget.native_request); it ignores anything else.
NATIVE_CALL_KWARGS = ("max_sequence_length", "true_cfg_scale")


class StrictModel(BaseModel):
    """A frozen pydantic model that rejects unknown keys, naming the closest allowed one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            for key in data:
                if key not in allowed:
                    raise ValueError(
                        f"unknown key {key!r}.{did_you_mean(key, allowed)} Allowed keys: {', '.join(sorted(allowed))}"
                    )
        return data


class ModelSpec(StrictModel):
    """One pipeline to qualify."""

    name: str = Field(description="Label used in results, file names and reports.")
    source: str = Field(description="A zoo name (tiny-flux, ...), a local checkpoint directory or a hub id.")
    target: str = Field(default="adapter", description=f"The target kind ({describe_targets()}).")
    native_pipeline: str | None = Field(
        default=None, description="native only: an out-of-tree pipeline as package.module:ClassName."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto: cuda when present.")
    load_kwargs: dict[str, Any] = Field(default_factory=dict, description="Passed to from_pretrained.")
    call_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Passed to every pipeline call; each key a parameter of the pipeline's call (checked at plan). Keys the "
            "workload sets (num_inference_steps, height, width, guidance_scale, num_images_per_prompt, ...) are "
            "refused: set them under workload or this model's workload. target native reads only "
            "max_sequence_length (1 to 1024) and true_cfg_scale."
        ),
    )
    workload: dict[str, Any] = Field(
        default_factory=dict,
        description="Workload keys this model runs with instead of the profile's (e.g. num_images_per_prompt: 1 "
        "for a pipeline that gives one output per prompt); its baseline and variants all use them.",
    )
    world: Literal["shapes", "moving-shapes"] | None = Field(
        default=None,
        description="The procedural world the model was trained on (scores prompt adherence); default: the zoo's.",
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return _safe_label(value)

    @field_validator("target")
    @classmethod
    def _registered_target(cls, value: str) -> str:
        if value not in TARGETS:  # the registry, read at validation: a kind registered later is accepted
            raise ValueError(unknown_choice("target", value, TARGETS))
        return value

    @field_validator("call_kwargs")
    @classmethod
    def _call_kwargs_not_the_workloads(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for key in value:
            if key in WORKLOAD_CALL_KWARGS:
                raise ValueError(_workload_call_kwarg(key))
        if info.data.get("target") == "native":
            _check_native_call_kwargs(value)
        return value


class Workload(StrictModel):
    """What every configuration generates: the same prompts and seeds for the baseline and each variant."""

    prompts: list[str] = Field(min_length=1, description="At least one prompt.")
    negative_prompt: str | None = None
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default=[0], min_length=1, description=f"Generator seeds, 0 to {MAX_SEED} (what torch.manual_seed takes)."
    )
    steps: int = Field(default=4, gt=0, le=MAX_STEPS, description="Denoising steps; more steps, more time.")
    height: int = Field(default=64, gt=0, le=16384, description="Pixels; a multiple of the model's factor.")
    width: int = Field(default=64, gt=0, le=16384, description="Pixels; a multiple of the model's factor.")
    num_frames: int | None = Field(
        default=None,
        gt=0,
        description=f"Video models only (an error when none makes videos); default {DEFAULT_VIDEO_FRAMES}; Wan: 4k+1.",
    )
    guidance_scale: float = 3.5
    num_images_per_prompt: int = Field(default=1, gt=0, le=64, description="Batch per call; VAE slicing needs > 1.")
    prompt_set: str | None = Field(
        default=None,
        description=(
            "Prompts with expected attributes for adherence: 'shapes-held-out' or a YAML file of "
            "{prompt, expect: {background, colour, shape, position}}; fills prompts when they are omitted."
        ),
    )

    prompt_expectations: list[dict[str, Any]] | None = Field(
        default=None,
        description=(
            "Filled from prompt_set when the profile is loaded: each prompt's expected attributes. The resolved "
            "profile keeps them, so its fingerprint covers the ground truth and a resume refuses an edited set."
        ),
    )

    @model_serializer(mode="wrap")
    def _without_unset_expectations(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Absent unless a prompt set filled them, so a profile without one keeps the fingerprint it always had.
        data: dict[str, Any] = handler(self)
        if data.get("prompt_expectations") is None:
            data.pop("prompt_expectations", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _prompts_from_set(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt_set"):
            from accel.zoo.prompt_sets import load_prompt_set

            entries = load_prompt_set(str(data["prompt_set"]))  # checked at load, also beside explicit prompts
            if "prompts" not in data:
                data = {**data, "prompts": [entry["prompt"] for entry in entries]}
            if data.get("prompt_expectations") is None:  # a resolved profile brings the ones its run used
                data = {**data, "prompt_expectations": entries}
        if isinstance(data, dict) and data.get("prompt_expectations") is not None:
            from accel.zoo.prompt_sets import check_prompt_entries

            if not data.get("prompt_set"):
                raise ValueError("prompt_expectations is filled from prompt_set: give prompt_set instead")
            given = data["prompt_expectations"]
            if not isinstance(given, list) or not given:
                raise ValueError("prompt_expectations: expected the non-empty list of {prompt, expect} a run wrote")
            check_prompt_entries(given, "workload", list_key="prompt_expectations")  # a hand-edited resolved profile
        return data

    @field_validator("prompts")
    @classmethod
    def _non_empty_prompts(cls, value: list[str]) -> list[str]:
        if any(not p.strip() for p in value):
            raise ValueError("prompts must not be empty strings")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        repeated = sorted({seed for seed in value if value.count(seed) > 1})
        if repeated:
            raise ValueError(
                f"seed {repeated[0]} is given more than once: it would generate the same images again and count "
                "them twice; give distinct seeds"
            )
        return value


class Variant(StrictModel):
    """A named set of features, each with its options (``{}`` or ``true`` for the defaults)."""

    name: str
    features: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    models: list[str] | None = Field(
        default=None, description="Model names this variant runs on; default: every model of the profile."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if value in ("baseline", "noise-floor"):
            raise ValueError(f"'{value}' is reserved: every sweep runs the baseline and its noise-floor re-run")
        return _safe_label(value)


class Measure(StrictModel):
    """How each configuration is timed."""

    warmup: int = Field(default=1, ge=0, le=MAX_REPEATS, description="Untimed calls after the cold one (excluded).")
    repeats: int = Field(default=3, gt=0, le=MAX_REPEATS, description="Timed passes over all prompts and seeds.")
    timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Per-cell limit in seconds (process and ray executors), from the cell's own start; at most a week.",
    )
    max_cv: float = Field(
        default=0.1, gt=0, description="A cell whose warm-latency coefficient of variation exceeds this is noisy."
    )
    noise_floor: bool = Field(
        default=True,
        description=(
            "Re-run each baseline in a fresh cell: its parity with the baseline and its interleaved speedup "
            "against a second copy of itself are the noise floor. Without it every speedup is unverified."
        ),
    )
    timing: Literal["interleaved", "sequential"] = Field(
        default="interleaved",
        description=(
            "interleaved: each variant's speedup comes from calls alternated (ABBA) with a freshly loaded "
            "unaccelerated reference in the same process, so drift and background load hit both alike (costs a "
            "second pipeline in memory after the variant's own memory was measured); sequential: the ratio of "
            "two cells timed one after the other, always shown unverified."
        ),
    )
    pairs: int = Field(
        default=10,
        ge=1,
        le=MAX_PAIRS,
        description=(
            "interleaved timing: reference/variant call pairs drawn before the comparison first looks at its "
            "interval; it then draws more (about 1.5x each look) until decided, up to measure.max_pairs."
        ),
    )
    max_pairs: int = Field(
        default=60,
        ge=1,
        le=MAX_PAIRS,
        description=(
            "interleaved timing: the most pairs a comparison draws while undecided (faster, slower or "
            "equivalent within the noise threshold ends it sooner); at least measure.pairs."
        ),
    )
    pair_budget_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description=(
            "interleaved timing: an optional wall-clock cap, in seconds, on drawing pairs while a comparison is "
            "undecided (the sampling stops at the first look after it is spent, and the verdict says so). Unset "
            "(the default), measure.max_pairs alone bounds a cell, so a slower host draws as many pairs as a fast "
            "one instead of deciding less."
        ),
    )
    confidence: float = Field(
        default=0.95,
        gt=0.5,
        lt=1,
        description=(
            "Coverage of every speedup's interval (order-statistic, median), over all the looks a sequential "
            "comparison may take (each look gets 1 - (1 - confidence) / looks)."
        ),
    )
    min_effect: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description=(
            "The noise threshold: ratios within 1/(1+min_effect)..1+min_effect are 'equivalent', and only an "
            "interval wholly outside it is a speedup claim. The noise-floor control must land inside it; if it "
            "does not (the machine was too noisy for it), it is never widened: the model's equivalences are "
            "unverified, and so are its speedups, except those whose interval clears it even divided by every "
            "bias the noise floor's interval allows (when that interval includes 1.0)."
        ),
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=MAX_THREADS,
        description=(
            "torch threads each cell runs with, split among a parallel cell's ranks; on Ray the cell reserves at "
            "least that many CPUs and runs with this count instead of cpus_per_cell's; the CPU peak behind MFU is "
            "measured with as many. Unset: torch's default (one per core); at most 1024; more than the machine's "
            "cores is refused by the sweep (process and inline executors). A CPU call bound by dispatch rather than "
            "GEMMs (mini-flux at 64x64) is as fast on one thread, and identical adjacent calls spread 2.2-3.3x less "
            "(benchmarks/cpu_threads.py)."
        ),
    )
    sweep_warmup: bool = Field(
        default=True,
        description=(
            "process: run the first cell once, unrecorded, before the sweep (not on Ray: a warm-up there warms "
            "one worker that is then thrown away). Without it the first cell "
            "measured ~1.5x slower than its own re-run on 2-core machines (cold worker pool and caches)."
        ),
    )
    reference_model: str | None = Field(
        default=None, description="A model whose baseline every other model's baseline is compared with."
    )
    executor: Literal["process", "inline", "ray"] = Field(
        default="process",
        description="process: each cell in a fresh worker (isolated); inline: fast tests; ray: Ray tasks.",
    )
    cpus_per_cell: float = Field(
        default=1,
        gt=0,
        description="Ray: CPUs reserved per cell, rounded up; the cell runs with that many torch threads.",
    )
    gpus_per_cell: Annotated[float, Field(ge=0)] | Literal["auto"] = Field(
        default="auto",
        description=(
            "Ray: GPUs reserved per cell. auto: 1 for a model on cuda, or on device auto when the cluster has "
            "GPUs; 0 otherwise (a cell reserving no GPU sees none)."
        ),
    )
    exclusive: bool = Field(
        default=False,
        description=(
            "Serialise cells' timing phases per node (a lock in the node's temp directory); loading may still "
            "overlap. Without it, a cell timed while another cell ran on its node gets an unverified speedup."
        ),
    )

    @model_validator(mode="after")
    def _pairs_within_max(self) -> Measure:
        if self.max_pairs < self.pairs:
            raise ValueError(
                f"measure.max_pairs ({self.max_pairs}) is below measure.pairs ({self.pairs}): the most pairs a "
                "comparison draws must be at least the pairs it draws before its first look"
            )
        return self


class Combinations(StrictModel):
    """Generated variants: ``pairwise`` covers every option value and every compatible feature pair."""

    mode: Literal["pairwise"] = "pairwise"
    features: dict[str, list[Any]] = Field(description="Feature name -> option values to combine.")
    prefix: str = Field(default="pairwise", description="Generated variants are named <prefix>-01, -02, ...")

    @field_validator("prefix")
    @classmethod
    def _safe_prefix(cls, value: str) -> str:
        # the generated names (<prefix>-01, up to -999) are names too: bounded as every variant's
        if len(value) > MAX_NAME_LENGTH - 4:
            raise ValueError(
                name_length_problem(value).replace(f"at most {MAX_NAME_LENGTH}", f"at most {MAX_NAME_LENGTH - 4}")
            )
        return _safe_label(value)


class Profile(StrictModel):
    """A whole sweep: models x (baseline + variants) on one workload."""

    name: str = DEFAULT_PROFILE_NAME
    description: str = ""
    models: list[ModelSpec] = Field(min_length=1)
    workload: Workload
    variants: list[Variant] = Field(default_factory=list)
    combinations: Combinations | None = None
    measure: Measure = Field(default_factory=Measure)
    tune: dict[str, Any] | None = Field(
        default=None,
        exclude=True,
        description="What `omni-accel tune` searches under (docs/tune.md); a sweep ignores it (not in the resolved "
        "profile or its fingerprint).",
    )
    _variant_plan: VariantPlan | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return _safe_label(value)  # the default run directory is runs/<name>-<date>-<time>

    def model_copy(self, *, update: Any = None, deep: bool = False) -> Profile:
        """A copy whose variants are planned again (the plan is of this profile's variants, not the copy's)."""
        copy = super().model_copy(update=update, deep=deep)
        copy._variant_plan = None
        return copy

    def variant_plan(self, source: str = "<profile>") -> VariantPlan:
        """Every variant with its options parsed (``accel.features.variants.VariantPlan``), computed once:
        the explicit variants, then those the ``combinations`` section plans. ``source`` names the file in
        errors; ``parse_profile`` computes it at load, so later calls only return it."""
        if self._variant_plan is None:
            from accel.features.variants import plan_variants

            self._variant_plan = plan_variants(self.variants, self.combinations, source)
        return self._variant_plan

    @model_validator(mode="after")
    def _variant_models_exist(self) -> Profile:
        names = [m.name for m in self.models]
        for index, variant in enumerate(self.variants):
            for name in variant.models or []:
                if name not in names:
                    raise ValueError(
                        f"variants[{index}].models: '{name}' is not a model name.{did_you_mean(name, names)} "
                        f"Models: {', '.join(names)}"
                    )
        return self

    def workload_for(self, model: ModelSpec) -> Workload:
        """The workload ``model``'s cells run: the profile's, with the model's own ``workload`` keys over it.

        A model's own ``prompts`` or ``prompt_set`` replaces the profile's prompts together with their set and
        expectations: a model-level ``prompt_set`` under profile-level ``prompts`` used to keep those prompts
        (a set fills prompts only where none are given) and score them against the set's expectations."""
        if not model.workload:
            return self.workload
        base = self.workload.model_dump(exclude_unset=True)
        if model.workload.keys() & {"prompts", "prompt_set"}:
            base = {k: v for k, v in base.items() if k not in ("prompts", "prompt_set", "prompt_expectations")}
        return Workload.model_validate({**base, **model.workload})

    @model_validator(mode="after")
    def _model_workloads_valid(self) -> Profile:
        for index, model in enumerate(self.models):
            if not model.workload:
                continue
            try:
                workload = self.workload_for(model)
            except ValidationError as error:
                first = error.errors()[0]
                location, suffix = explain_error(Workload, first)
                key = f"models[{index}].workload" + (f".{format_location(location)}" if location else "")
                raise ValueError(f"{key}: {first['msg'].removeprefix('Value error, ')}{suffix}") from None
            reference = self.measure.reference_model
            if reference is not None and workload.model_dump() != self.workload.model_dump():
                raise ValueError(
                    f"models[{index}].workload: measure.reference_model ('{reference}') compares every model's "
                    "baseline on the same prompts, seeds and outputs: remove one of them"
                )
        return self

    @model_validator(mode="after")
    def _reference_exists(self) -> Profile:
        reference = self.measure.reference_model
        names = [m.name for m in self.models]
        if reference is not None and reference not in names:
            raise ValueError(f"measure.reference_model: '{reference}' is not a model name ({', '.join(names)})")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Profile:
        for section, items in (("models", self.models), ("variants", self.variants)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{section}: duplicate name '{item.name}'; names must be unique")
                seen.add(item.name)
        return self

    def fingerprint(self) -> str:
        """A hash of the resolved profile: results record it, resume compares it."""
        return fingerprint_of(self.model_dump(mode="json"))


def fingerprint_of(resolved: Any) -> str:
    """The fingerprint of a resolved profile's data (``Profile.model_dump(mode="json")``, or the
    ``profile.resolved.yaml`` a run wrote from it) without validating it again."""
    payload = json.dumps(resolved, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _workload_call_kwarg(key: str) -> str:
    owners = WORKLOAD_CALL_KWARGS[key]
    if not owners:
        return f"'{key}' is set by omni-accel on every call (outputs are compared as arrays, 'np'): remove it"
    keys = " and ".join(f"workload.{owner}" for owner in owners)
    own = " and ".join(owners)
    return (
        f"'{key}' comes from {keys} on every call, bounded and shown in the report; a call_kwargs value would silently "
        f"override it: set {keys} instead (or {own} under this model's workload)"
    )


def _check_native_call_kwargs(value: dict[str, Any]) -> None:
    for key in value:
        if key not in NATIVE_CALL_KWARGS:
            raise ValueError(
                f"unknown key {key!r} for target native: a native pipeline reads only these call_kwargs and would "
                f"silently ignore it.{did_you_mean(key, NATIVE_CALL_KWARGS)} "
                f"Allowed keys: {', '.join(NATIVE_CALL_KWARGS)}"
            )
    length = value.get("max_sequence_length")
    if "max_sequence_length" in value and (
        not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= MAX_SEQUENCE_LENGTH
    ):
        raise ValueError(
            f"max_sequence_length: {length!r} is not allowed: expected a whole number > 0 and <= {MAX_SEQUENCE_LENGTH}"
        )
    scale = value.get("true_cfg_scale")
    if "true_cfg_scale" in value and (
        not isinstance(scale, int | float) or isinstance(scale, bool) or not math.isfinite(scale) or scale < 0
    ):
        raise ValueError(f"true_cfg_scale: {scale!r} is not allowed: expected a finite number >= 0 (> 1: true CFG)")


def _safe_label(value: str) -> str:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+")
    if not value or not set(value) <= allowed:
        # escaped: a NUL or a terminal escape in a name, echoed raw, cut or restyled the one-line error
        control = " holds a control character and" if has_controls(value) else ""
        shown = escape_controls(value if len(value) <= MAX_NAME_LENGTH else value[:40] + "...")
        raise ValueError(f"'{shown}'{control} must be non-empty and use only letters, digits, '-', '_', '.' and '+'")
    if len(value) > MAX_NAME_LENGTH or value in (".", ".."):
        raise ValueError(name_length_problem(value))
    return value


def name_length_problem(value: str) -> str:
    """Why ``value`` cannot be a name: too long for the file names it becomes, or a directory's own name."""
    if value in (".", ".."):
        return f"'{value}' names a directory itself, not a file: choose a name with a letter or digit"
    return (
        f"'{value[:40]}...' is {len(value)} characters long: names become file and folder names "
        f"(outputs/<model>/<variant>.npz, runs/<profile>-<date>-<time>/), at most {MAX_NAME_LENGTH} characters"
    )


def format_validation_error(source: str, error: ValidationError, model: Any = None) -> str:
    """The first error of ``error`` as ``source: key.path: message``, with the value given and the values
    allowed when ``model`` (the validated class) declares the field."""
    first = error.errors()[0]
    location, suffix = explain_error(model, first) if model else (tuple(first["loc"]), "")
    message = first["msg"].removeprefix("Value error, ") + suffix
    if not location and re.match(r"[\w.\[\]]+: ", message):  # a profile-wide check that names its own key
        return f"{source}: {message}"
    return f"{source}: {format_location(location)}: {message}"


def parse_profile(data: Any, source: str = "<profile>", base_dir: Path | None = None) -> Profile:
    """Validate a loaded YAML document; raises ConfigError naming ``source`` and the key.

    With ``base_dir`` (``load_profile`` passes the profile file's folder), relative paths in the document are
    made absolute against it first (``resolve_relative_paths``); without it they are read from the working
    directory.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with keys models, workload, variants, measure")
    if base_dir is not None:
        data = resolve_relative_paths(data, base_dir)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(source, error, Profile)) from error
    profile.variant_plan(source)  # every variant's options parsed and checked once, named by file and key
    return profile


def load_profile(path: str | Path) -> Profile:
    """Read and validate a YAML profile file; every problem is a ConfigError naming the file and key.

    The file is read by the project's one YAML loader (``accel.yaml_bounds.load_yaml_file``): UTF-8, at most
    ``MAX_FILE_BYTES``, no key written twice, YAML aliases expanded within a budget (checked while composing,
    before anything is built from the document), and values plain JSON types (no dates, bytes or sets).
    """
    path = Path(path)
    data = load_yaml_file(path, "profile", advice="save the profile as UTF-8", mapping=False)
    return parse_profile(data, str(path), base_dir=path.parent)


def _absolute_under(base_dir: Path, value: str) -> str:
    return str((base_dir / value).resolve())


def resolve_relative_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of the profile document ``data`` with its relative file paths made absolute against ``base_dir``
    (the profile file's folder), so that a profile means the same from every working directory and its
    ``profile.resolved.yaml`` resumes from any directory.

    ``workload.prompt_set``: every relative path (a built-in set's name is kept). ``models[].source``: a
    relative path that exists under ``base_dir`` or is written as one (``./ckpt``, ``../ckpt``); a zoo
    name, a ``synthetic:`` source or a hub id (``org/name`` that is no directory there) is kept as written.
    Absolute and ``~`` paths are kept. Values of the wrong type are left for validation to reject.
    """
    data = dict(data)
    workload = data.get("workload")
    if isinstance(workload, dict):
        prompt_set = workload.get("prompt_set")
        if isinstance(prompt_set, str) and prompt_set.strip() and _is_relative(prompt_set):
            from accel.zoo.prompt_sets import BUILTIN_PROMPT_SETS

            if prompt_set not in BUILTIN_PROMPT_SETS:
                data["workload"] = {**workload, "prompt_set": _absolute_under(base_dir, prompt_set)}
    models = data.get("models")
    if isinstance(models, list):
        data["models"] = [_with_local_source(model, base_dir) for model in models]
    return data


def _is_relative(value: str) -> bool:
    return not Path(value).expanduser().is_absolute()


def _with_local_source(model: Any, base_dir: Path) -> Any:
    source = model.get("source") if isinstance(model, dict) else None
    if not isinstance(source, str) or not source.strip() or not _is_relative(source):
        return model
    if source.startswith(("./", "../")) or source in (".", ".."):  # a path, never a zoo name or a hub id
        return {**model, "source": _absolute_under(base_dir, source)}
    if not (base_dir / source).exists():  # a zoo name, a synthetic: source or a hub id
        return model
    from accel import zoo  # imports torch: only for a name that is also a path beside the profile
    from accel.zoo import synthetic

    if zoo.is_zoo_name(source) or synthetic.is_synthetic(source):
        return model
    return {**model, "source": _absolute_under(base_dir, source)}


def default_profile_path() -> Path:
    """The embedded default profile, ``profiles/quickstart.yaml``."""
    return data_dir("profiles") / f"{DEFAULT_PROFILE_NAME}.yaml"
