"""The sweep's input checks, made before anything runs: a failure is a ``ConfigError`` naming the profile's field.

The run directory is writable; every model's source resolves (a relative local path made absolute, so a worker
elsewhere reads the same one); each local checkpoint is complete, its classes, configs and weights agree; the
workload's resolution fits each model; and every component a variant's features name has weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, did_you_mean
from accel.profile import ModelSpec, Profile


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run directory and prove it is writable before anything is measured."""
    probe = run_dir / ".write-probe"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{run_dir}: output directory is not writable: {error.strerror or error}") from error


def local_sources_resolved(models: list[Any]) -> list[Any]:
    """``models`` with each checkpoint given as a relative local path made absolute (from the driver's working
    directory): a worker on another node, in another directory, then reads the same path."""
    from accel import zoo
    from accel.zoo import synthetic

    resolved = []
    for model in models:
        source = model.source
        local = not zoo.is_zoo_name(source) and not synthetic.is_synthetic(source)
        if local and not Path(source).expanduser().is_absolute() and Path(source).expanduser().exists():
            model = model.model_copy(update={"source": str(Path(source).expanduser().resolve())})
        resolved.append(model)
    return resolved


def check_inputs(profile: Profile, source: str, build: bool = True) -> None:
    """Everything that can be checked without running: sources exist, resolution fits each model, and each
    local checkpoint's files, classes, configs and weight shapes and the variants' components agree.

    ``build`` false (``omni-accel plan``): only what is already on this machine is checked; a zoo entry not
    built yet and a hub id are left to the sweep (building or looking up costs time or the network)."""
    from accel.errors import ModelUnavailable
    from accel.targets.adapter import resolution_factor
    from accel.zoo.pipelines import BuildFailed

    image_models: list[str] = []
    indexes: dict[str, dict[str, Any]] = {}
    for index, model in enumerate(profile.models):
        where = f"{source}: models[{index}]"
        try:
            location = _location(model, where, build)
        except ModelUnavailable:  # a zoo family this diffusers lacks: its cells say so, the others run
            continue
        except BuildFailed:  # a zoo builder these library versions break: its cells fail saying so, the others run
            continue
        if location is None:
            continue
        if Path(location).is_dir():
            makes_video, indexes[model.name] = check_model_files(profile, index, location, source)
            if makes_video is False:
                image_models.append(model.name)
        check_call_kwargs(profile, index, location, source)
        factor = resolution_factor(location) if Path(location).is_dir() or location.startswith("synthetic:") else None
        own = bool(model.workload.keys() & {"height", "width"})
        for key in ("height", "width"):
            value = getattr(profile.workload_for(model), key)
            if factor and value % factor:
                where_key = f"models[{index}].workload.{key}" if own else f"workload.{key}"
                raise ConfigError(
                    f"{source}: {where_key}: {value} is not a multiple of {factor}, the resolution factor "
                    f"of model '{model.name}' (VAE downsampling x 2x2 patches)"
                )
    if profile.workload.num_frames is not None and len(image_models) == len(profile.models):
        raise ConfigError(
            f"{source}: workload.num_frames: no model of this profile makes videos ({', '.join(image_models)}: "
            "images); num_frames applies to video models only: remove it, or add a video model"
        )
    check_components(profile, indexes, source)


def check_call_kwargs(profile: Profile, position: int, location: str, source: str) -> None:
    """Every ``call_kwargs`` key of an adapter model is a parameter of its pipeline's ``__call__`` (read from the
    class ``model_index.json`` or the ``synthetic:`` source names, nothing loaded). A misspelt key used to fail
    every cell of the model with a TypeError; a custom pipeline or a ``__call__`` taking ``**kwargs`` is not
    checked. Keys the workload sets are refused earlier, by the profile (``WORKLOAD_CALL_KWARGS``)."""
    import inspect

    import diffusers

    from accel.profile import WORKLOAD_CALL_KWARGS
    from accel.zoo import synthetic

    model = profile.models[position]
    if model.target != "adapter" or not model.call_kwargs or "custom_pipeline" in model.load_kwargs:
        return
    if synthetic.is_synthetic(location):
        class_name = synthetic.parse(location).architecture.pipeline_class
    else:
        index_path = Path(location) / "model_index.json"
        class_name = str(json.loads(index_path.read_text()).get("_class_name")) if index_path.is_file() else ""
    pipeline = getattr(diffusers, class_name, None)
    if not isinstance(pipeline, type):
        return
    parameters = inspect.signature(pipeline.__call__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    names = [name for name in parameters if name != "self"]
    allowed = sorted(name for name in names if name not in WORKLOAD_CALL_KWARGS)
    for key in model.call_kwargs:
        if key not in parameters:
            raise ConfigError(
                f"{source}: models[{position}].call_kwargs: unknown key {key!r}: {class_name}'s call has no such "
                f"parameter.{did_you_mean(key, names)} Allowed keys: {', '.join(allowed)}"
            )


def _location(model: ModelSpec, where: str, build: bool) -> str | None:
    from accel import zoo
    from accel.targets.adapter import _looks_like_path, resolve_source
    from accel.zoo import synthetic

    if not build and zoo.is_zoo_name(model.source) and not zoo.is_built(model.source):
        return None
    if not build and not synthetic.is_synthetic(model.source) and not _looks_like_path(model.source):
        return None  # a hub id (org/name): the sweep looks it up
    return resolve_source(model, where)


def check_components(profile: Profile, indexes: dict[str, dict[str, Any]], source: str) -> None:
    """Every ``components`` a variant's feature names (quantization's) is a component with weights of each
    local model the variant runs on. A misspelt one used to become an unsupported, skipped cell and a green
    gate."""
    from accel.sweep.checkpoint import is_weightless

    for variant in profile.variant_plan().variants:
        for feature, config in variant.configs.items():
            # Only components the profile names: the default (quantization's: every denoiser the pipeline has)
            # is resolved on the loaded pipeline, and one with no denoiser is the feature's refusal of that cell.
            wanted = getattr(config, "components", None) if "components" in config.model_fields_set else None
            if not wanted:
                continue
            for model_name, index in indexes.items():
                if variant.models is not None and model_name not in variant.models:
                    continue
                present = sorted(
                    name
                    for name, entry in index.items()
                    if not name.startswith("_")
                    and isinstance(entry, list)
                    and len(entry) == 2
                    and isinstance(entry[1], str)
                    and not is_weightless(entry[1])
                )
                for component in wanted:
                    if component not in present:
                        raise ConfigError(
                            f"{source}: variant '{variant.name}': {feature}.components: model '{model_name}' has "
                            f"no component '{component}'.{did_you_mean(component, present)} Components with "
                            f"weights: {', '.join(present)}"
                        )


def check_model_files(
    profile: Profile, position: int, location: str, source: str
) -> tuple[bool | None, dict[str, Any]]:
    """Model ``position``'s checkpoint is complete, its classes, configs and weights agree, and ``target:
    native`` has a pipeline for it; errors name the model, the component and the file. Returns whether it
    makes videos (None: cannot tell) and its ``model_index.json``."""
    from accel.sweep.checkpoint import check_checkpoint, check_classes, is_video_pipeline

    model = profile.models[position]
    where = f"{source}: models[{position}]"
    index = check_checkpoint(location, f"{where} ('{model.name}')")
    if model.target == "native":
        from accel.native import native_for

        try:
            native_for(location, model.native_pipeline)
        except ConfigError as error:
            raise ConfigError(f"{where}.target: model '{model.name}': {error}") from error
    custom = model.target != "adapter" or "custom_pipeline" in model.load_kwargs
    check_classes(location, index, f"{where} ('{model.name}')", pipeline_class=not custom)
    return (False if model.target != "adapter" else is_video_pipeline(index)), index
