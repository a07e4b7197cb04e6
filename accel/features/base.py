"""The contract every acceleration feature implements, and the record of its evidence.

A feature declares, in its own module and nowhere else: a config (options with defaults), its class
(lossless or lossy) and, when lossy, its default parity limits (``lossy_limits``; ``thresholds.yaml`` may
override them), ``probe``/``check`` (supported here, or why not), its stage in the application order, the
features it conflicts with (``conflicts``, besides ``rules.yaml``), whether its steps may beat the FLOPs
floor (``roofline_exempt``: it skips or changes work), the process-global state it changes
(``global_state``, reset after an in-process cell), ``apply`` returning a handle that can ``remove()`` it,
and ``verify``: evidence gathered during the timed runs that it engaged. A feature that was requested,
reported supported and left no evidence fails its cell; it never passes silently.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator


class FeatureClass(str, Enum):
    """Whether a feature should keep the output equal to the baseline up to numerical noise."""

    LOSSLESS = "lossless"
    LOSSY = "lossy"


class Stage(IntEnum):
    """Application order, lowest first. Weights are final before hooks wrap them; compile sees the hooks."""

    QUANTIZE = 10
    ATTENTION = 20
    # After the attention backend (enable_parallelism checks it supports context parallelism), before caches,
    # offload (diffusers issue #12533: offload only after parallelism) and compile.
    PARALLEL = 25
    CACHE = 30
    OFFLOAD = 40
    COMPILE = 50
    VAE = 60


class FeatureConfig(BaseModel):
    """Base of feature option models: frozen, unknown keys rejected, values taken as typed.

    Strict: ``"yes"`` is not a bool, ``"3"`` not an int, ``true`` not a number, and no option takes an
    infinity or NaN. YAML has no tuples, so a list is accepted where the option is a tuple.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields = cls.model_fields
            tuples = {key for key, field in fields.items() if _takes_tuple(field.annotation)}
            return {k: tuple(v) if isinstance(v, list) and k in tuples else v for k, v in data.items()}
        return data


def _takes_tuple(annotation: Any) -> bool:
    """A tuple option, optional or not (``tuple[str, ...] | None``)."""
    if typing.get_origin(annotation) is tuple:
        return True
    return any(typing.get_origin(arg) is tuple for arg in typing.get_args(annotation))


@dataclass(frozen=True)
class ParityLimits:
    """The least parity a lossy feature keeps against the unaccelerated baseline (the gate's default for its
    family; ``feature_matrix/thresholds.yaml`` ``lossy.<family>`` overrides it)."""

    ssim: float
    psnr: float
    # The most prompt adherence (share of attributes, models with a ground truth) it may lose; None: no bound.
    adherence_loss: float | None = None


# Cache-DiT's lossy-cache gate (SSIM 0.90, PSNR 25 dB), the default of every built-in lossy family; adherence:
# at most 5% of the prompts' attributes lost (one attribute in 20).
LOSSY_LIMITS = ParityLimits(ssim=0.90, psnr=25.0, adherence_loss=0.05)


@dataclass(frozen=True)
class Conflict:
    """A feature (``feature``) or family (``family``) this feature cannot be combined with, and why.

    ``options``: options the other feature must have for the conflict; ``own_options``: options this one
    must have. Checked with ``feature_matrix/rules.yaml``'s rules, before anything is applied.
    """

    reason: str
    feature: str | None = None
    family: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    own_options: tuple[tuple[str, Any], ...] = ()
    source: str = ""


class Owner(str, Enum):
    """Who refuses a feature, so that a reader never takes a harness gap for a model's limit.

    ``library``: the library that implements it refuses (diffusers, torchao, Cache-DiT; its message quoted);
    ``model``: the model lacks a structure the feature needs (named); ``device``: this device or installation
    cannot (a GPU, a package, a kernel; named); ``harness``: omni-accel does not support it, or cannot observe
    it, yet (a gap of this project, not of the model).
    """

    LIBRARY = "library"
    MODEL = "model"
    DEVICE = "device"
    HARNESS = "harness"


# The owner of a refusal that names none (a plugin's, or a record from before ``refused_by``): what its scope
# meant then (``environment``: this device or installation; ``model``: this pipeline).
OWNER_OF_SCOPE = {"environment": Owner.DEVICE, "model": Owner.MODEL}


@dataclass(frozen=True)
class Support:
    """Result of ``Feature.check``: supported, or a reason a user can act on and who refuses (``owner``).

    ``owner`` None (a plugin that names none): the device's for a ``probe``, the model's for a ``check``.
    """

    supported: bool
    reason: str = ""
    owner: Owner | None = None

    @classmethod
    def yes(cls) -> Support:
        return cls(True)

    @classmethod
    def no(cls, reason: str, owner: Owner | None = None) -> Support:
        """A refusal: ``reason`` says what to do; ``owner`` who refuses (``Owner``: library, model, device,
        harness). Every built-in feature names it."""
        return cls(False, reason, owner)


@dataclass(frozen=True)
class RunContext:
    """What a feature may need to know about the runs it is applied for."""

    device: str
    steps: int


@dataclass
class Verdict:
    """Result of ``Feature.verify``: did the feature engage on every timed run, and the evidence."""

    engaged: bool
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)


class Tally:
    """A counter that code compiled by torch.compile can increment without recompiling.

    A Python number or dict mutated inside code that dynamo traces becomes a guard on its value, so every
    new value recompiles the graph (and the increment replays a constant). An in-place add on a tensor is
    an ordinary graph op guarded on shape, dtype and device only: it counts at run time, compiled or not.
    Read ``value`` outside traced code (between runs).
    """

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self.tensor = torch.zeros((), dtype=torch.int64, device=device)
        # A fixed address for CUDA graphs (compile mode reduce-overhead): no copy of the counter per replay.
        torch._dynamo.mark_static_address(self.tensor)

    def add(self, count: int = 1) -> None:
        self.tensor.add_(count)

    def at_least(self, count: int) -> None:
        """Raise the value to ``count`` if below it (a running maximum, traced as one op as ``add`` is)."""
        self.tensor.clamp_(min=count)

    @property
    def value(self) -> int:
        return int(self.tensor.item())


class Handle(ABC):
    """An applied feature. Collects per-run evidence and can be removed, restoring the pipeline."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        # Calls whose evidence was forgotten (``Applied.reset_evidence`` after warm-up): 0 while the evidence
        # still holds the first call since apply, the one that may legitimately do one-time work (compiling).
        self.calls_before_window = 0

    def begin_run(self) -> None:
        """Called before each timed call; starts a fresh evidence record."""
        self.runs.append({})

    def end_run(self) -> None:  # noqa: B027 - optional lifecycle step, a no-op by default
        """Called after each timed call; collects evidence that is read after the run (default: none)."""

    @contextmanager
    def global_state_paused(self) -> Iterator[None]:
        """A context in which the process-global state this feature set (if any) is as before ``apply``.

        Interleaved timing runs an unaccelerated reference pipeline in the same process as the variant; a
        feature that changes process-global state (diffusers' active attention backend) restores it here so
        the reference stays unaccelerated. Default: nothing global, nothing to do.
        """
        yield

    @property
    def current(self) -> dict[str, Any]:
        if not self.runs:
            self.begin_run()
        return self.runs[-1]

    @abstractmethod
    def remove(self) -> None:
        """Undo ``apply``: the pipeline behaves as before."""


# The components that denoise, in the order pipelines name them: some pipelines carry two (Wan 2.2's
# high-noise ``transformer`` and low-noise ``transformer_2``, switched by the scheduler's progress).
DENOISER_COMPONENTS = ("transformer", "transformer_2", "unet")


def denoisers(pipeline: Any) -> dict[str, Any]:
    """The pipeline's denoising models present (``transformer``, ``transformer_2``, ``unet``), by name."""
    found = {name: getattr(pipeline, name, None) for name in DENOISER_COMPONENTS}
    return {name: module for name, module in found.items() if module is not None and hasattr(module, "modules")}


class Reach(str, Enum):
    """What a feature acts on: the pipeline as a whole (VAE, model offload: every component alike), its first
    denoiser only (``transformer``, or ``unet``), or every denoiser it has (``Feature.denoisers_reached``)."""

    PIPELINE = "pipeline"
    FIRST_DENOISER = "first denoiser"
    EVERY_DENOISER = "every denoiser"


def untouched_denoisers_refusal(feature: Any, pipeline: Any, options: Any) -> str | None:
    """Why ``feature`` cannot run on a pipeline with a denoiser it would leave untouched (None: it reaches every
    one): a feature reported engaged while a second denoiser ran without it would be a false verdict."""
    present = denoisers(pipeline)
    reached = feature.denoisers_reached(pipeline, options)
    if reached is None or len(present) < 2:
        return None
    untouched = [name for name in present if name not in reached]
    if not untouched:
        return None
    return (
        f"{type(pipeline).__name__} denoises with {', '.join(present)}; {feature.name} reaches "
        f"{', '.join(sorted(reached)) or 'none of them'} only, so {', '.join(untouched)} would run untouched"
        + (f" ({feature.untouched_hint})" if feature.untouched_hint else "")
    )


def compute_dtype(pipeline: Any) -> str | None:
    """The dtype the pipeline's denoiser computes in (``bfloat16``, ``float32``, ...), or None if unknown."""
    module: Any = getattr(pipeline, "transformer", None) or getattr(pipeline, "unet", None)
    try:
        parameter = next(module.parameters())
    except (AttributeError, StopIteration, TypeError):
        return None
    return str(parameter.dtype).removeprefix("torch.")


ConfigT = TypeVar("ConfigT", bound=FeatureConfig)
HandleT = TypeVar("HandleT", bound=Handle)


class Feature(ABC, Generic[ConfigT, HandleT]):
    """One acceleration feature. Subclasses set the class attributes and implement the three methods.

    Generic in its options model and its handle: ``class CacheDit(Feature[CacheDitConfig, CacheDitHandle])``
    types ``check``/``apply``'s options and ``verify``'s handle (a plugin may subclass plain ``Feature``).
    """

    name: ClassVar[str]
    family: ClassVar[str]
    feature_class: ClassVar[FeatureClass]
    stage: ClassVar[Stage | int]  # application order; a plugin may use any int between the stages
    # The options model (a class attribute; not ClassVar only because a ClassVar cannot use a type variable).
    config_cls: type[ConfigT]
    description: ClassVar[str]
    # Option filled by a scalar shorthand in a profile (``attention_backend: _native_math``).
    primary_option: ClassVar[str | None] = None
    # Combinations refused besides rules.yaml's (a plugin's rules travel with it).
    conflicts: ClassVar[tuple[Conflict, ...]] = ()
    # Default parity limits when lossy (None: the family's, from another feature or thresholds.yaml; a lossy
    # family with none anywhere is an error of the gate, never a silent default).
    lossy_limits: ClassVar[ParityLimits | None] = None
    # Why this feature's steps may beat the full-step FLOPs floor (it skips or changes work): exempts its
    # cells from the roofline's "below the floor: the timer cannot be trusted" check. None: not exempt.
    roofline_exempt: ClassVar[str | None] = None
    # The process-global state it changes as a side effect (names in ``accel.features.state``): saved
    # before and restored after a cell that runs in the sweep's own process.
    global_state: ClassVar[tuple[str, ...]] = ()
    # Why the feature cannot have its intended effect on a CPU-only device (None: it can). It may engage
    # there (hooks run) while doing nothing useful: the gate and tables label it "engaged, no effect on cpu".
    no_effect_on_cpu: ClassVar[str | None] = None
    # Plans by denoising step (needs ``RunContext.steps`` to match the calls): ``apply`` refuses other steps.
    needs_steps: ClassVar[bool] = False
    # What it acts on (``Reach``): a first-denoiser feature is refused on a pipeline with a second denoiser,
    # which would run untouched (``untouched_denoisers_refusal``); ``untouched_hint`` says what to do instead.
    reach: ClassVar[Reach] = Reach.PIPELINE
    untouched_hint: ClassVar[str] = ""
    # Where its verdict's evidence shows each denoiser reached: (the evidence key holding, per timed run, a number
    # or a mapping of numbers per denoiser; what that number counts). ``accel.features.denoiser_evidence`` reads
    # it for the record's and the report's evidence per denoiser (Wan 2.2's two experts). None: no such key.
    denoiser_evidence: ClassVar[tuple[str, str] | None] = None

    def parse_options(self, raw: Any) -> ConfigT:
        """Options from a profile value: a mapping, ``true``/``{}``/null for defaults, or a scalar."""
        if raw is None or raw is True:
            return self.config_cls()
        if isinstance(raw, dict):
            return self.config_cls(**raw)
        if self.primary_option is not None and not isinstance(raw, (list, bool)):
            return self.config_cls(**{self.primary_option: raw})
        raise ValueError(f"expected a mapping of options or true, got {raw!r}")

    def feature_class_for(self, options: ConfigT) -> FeatureClass:
        """The class of this feature with these options (some options change it); default: the feature's."""
        return self.feature_class

    def load_kwargs(self, options: ConfigT) -> dict[str, Any]:
        """Extra ``from_pretrained`` kwargs when the feature acts at load time (default: none)."""
        return {}

    def probe(self, device: str, options: ConfigT, dtype: str | None = None) -> Support:
        """Whether the feature can run on this device, installation and compute dtype (``None``: not known
        yet), before any pipeline is loaded.

        ``check`` calls it again with the loaded pipeline's dtype (``compute_dtype``), so a kernel that
        needs bf16 is reported unsupported with the reason before anything runs, never mid-cell.
        ``omni-accel features`` lists it. Default: nothing device-specific.
        """
        return Support.yes()

    def denoisers_reached(self, pipeline: Any, options: ConfigT) -> set[str] | None:
        """The denoisers (``denoisers(pipeline)`` names) this feature acts on with these options; None for a
        feature of the whole pipeline. Default: from ``reach``."""
        present = list(denoisers(pipeline))
        if self.reach is Reach.PIPELINE:
            return None
        if self.reach is Reach.EVERY_DENOISER:
            return set(present)
        return set(present[:1])

    def option_values(self) -> list[Any]:
        """The values of the primary option worth listing (each Literal choice), or [] for none."""
        if self.primary_option is None:
            return []
        annotation = self.config_cls.model_fields[self.primary_option].annotation
        return list(typing.get_args(annotation)) if typing.get_origin(annotation) is typing.Literal else []

    @abstractmethod
    def check(self, pipeline: Any, device: str, options: ConfigT) -> Support:
        """Whether the feature can run on this pipeline and device, with the reason when not."""

    @abstractmethod
    def apply(self, pipeline: Any, options: ConfigT, context: RunContext) -> HandleT:
        """Enable the feature on a loaded pipeline; the handle records evidence and can remove it."""

    @abstractmethod
    def verify(self, handle: HandleT) -> Verdict:
        """Judge from the handle's evidence whether the feature engaged on every timed run."""


# A feature of any options and handle: what the registry, the planner and ``apply`` hold.
AnyFeature = Feature[Any, Any]
