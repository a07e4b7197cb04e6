"""Checks of a diffusers checkpoint directory before the first cell: a broken download is bad input.

Without them a corrupt ``model_index.json``, a missing component folder or a truncated weight file is
found by every cell in turn, each recorded as failed with a loader's message. Here each is one line that
names the model, the component and the file, and the sweep stops before measuring anything (exit 2).
Only files are read: configs are parsed as JSON and safetensors headers are compared with the file size;
no weights are loaded.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel.errors import ConfigError, did_you_mean

SAFETENSORS_MAX_HEADER = 100_000_000  # bytes; safetensors refuses a larger header
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack")
# Component classes that carry no weights and no config.json of their own.
WEIGHTLESS_SUFFIXES = ("Tokenizer", "TokenizerFast", "Scheduler", "Processor", "FeatureExtractor")
# Backend variants transformers appends to a weightless class's name (CLIPImageProcessorPil, ...ProcessorFast).
WEIGHTLESS_VARIANTS = ("Fast", "Pil")


def is_weightless(class_name: str) -> bool:
    """Whether a component class holds no weights (a tokenizer, scheduler, image processor or feature
    extractor, also in a backend variant such as ``CLIPImageProcessorPil``): no config.json or weight file."""
    for variant in WEIGHTLESS_VARIANTS:
        class_name = class_name.removesuffix(variant)
    return class_name.endswith(WEIGHTLESS_SUFFIXES)


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object, no key written twice in one object (diffusers would silently take
    the last ``_class_name``); a ConfigError saying what is wrong with it otherwise."""

    def no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in pairs:
            if key in data:
                raise ConfigError(f"{path}: {what} gives the key '{key}' twice: keep one")
            data[key] = value
        return data

    try:
        data = json.loads(path.read_bytes().decode("utf-8"), object_pairs_hook=no_repeated_keys)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {what}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: {what} is not UTF-8 text") from error
    except (json.JSONDecodeError, RecursionError) as error:
        detail = f"{error.msg} at line {error.lineno}" if isinstance(error, json.JSONDecodeError) else "nested too deep"
        raise ConfigError(f"{path}: {what} is not valid JSON ({detail})") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {what} should be a JSON object, got {type(data).__name__}")
    return data


def check_safetensors(path: Path) -> None:
    """A safetensors file whose header parses and whose size covers every tensor the header lists."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ConfigError(f"{path}: truncated weight file ({size} bytes; no safetensors header)")
        (header_length,) = struct.unpack("<Q", prefix)
        first = handle.read(1)
        # A safetensors header is JSON ("{") of at most 100 MB (the format's own limit): random bytes or another
        # format read as a 20-digit length said "truncated", and told the user to download it again.
        if first != b"{" or header_length > SAFETENSORS_MAX_HEADER:
            raise ConfigError(
                f"{path}: not a safetensors file ({size} bytes; it does not start with a safetensors header): "
                "replace it with the checkpoint's own file"
            )
        handle.seek(8)
        if header_length > size - 8:
            raise ConfigError(
                f"{path}: truncated weight file ({size} bytes; its header alone should take {header_length})"
            )
        try:
            header = json.loads(handle.read(header_length).decode("utf-8"))
            end = max(
                (int(entry["data_offsets"][1]) for key, entry in header.items() if key != "__metadata__"), default=0
            )
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError) as error:
            raise ConfigError(f"{path}: not a safetensors file (unreadable header)") from error
    expected = 8 + header_length + end
    if size < expected:
        raise ConfigError(
            f"{path}: truncated weight file: {size} bytes, its header describes {expected}; download it again"
        )


def check_checkpoint(directory: str | Path, where: str) -> dict[str, Any]:
    """Check a checkpoint directory file by file and return its ``model_index.json``.

    ``where`` prefixes each error (the profile and the model). Checked: ``model_index.json`` is a JSON object
    with a ``_class_name``; every component it names has a folder whose config files parse; model
    components have a ``config.json`` and weight files, and every safetensors file (and every shard an
    index lists) is complete.
    """
    directory = Path(directory)
    try:
        index = read_json_object(directory / "model_index.json", "model_index.json")
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from error
    if not isinstance(index.get("_class_name"), str):
        raise ConfigError(f"{where}: {directory / 'model_index.json'}: no '_class_name' naming the pipeline class")
    for name, entry in index.items():
        if name.startswith("_"):
            continue  # metadata (_class_name, _diffusers_version, _name_or_path)
        try:
            pair = check_entry(name, entry, directory / "model_index.json")
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from error
        if pair is not None:  # None: an optional component left out ([null, null])
            _check_component(directory / name, f"{where}: component '{name}' ({pair[1]})", pair[1])
    return index


def _check_component(folder: Path, where: str, class_name: str) -> None:
    if not folder.is_dir():
        raise ConfigError(f"{where}: folder {folder} is missing")
    for config in sorted(folder.glob("*config*.json")):
        try:
            read_json_object(config, "the config")
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from error
    if is_weightless(class_name):
        return
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{where}: {folder / 'config.json'} is missing")
    weights = [p for p in folder.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)]
    indexes = sorted(folder.glob("*.index.json"))
    if not weights and not indexes:
        raise ConfigError(f"{where}: {folder} holds no weight file ({', '.join(WEIGHT_SUFFIXES)})")
    for index_file in indexes:
        try:
            shards = set(read_json_object(index_file, "the weight index").get("weight_map", {}).values())
        except (ConfigError, AttributeError) as error:
            raise ConfigError(f"{where}: {index_file}: not a weight index ({error})") from error
        for shard in sorted(str(s) for s in shards):
            if not (folder / shard).is_file():
                raise ConfigError(f"{where}: {folder / shard} is missing (listed in {index_file.name})")
    for weight in sorted(p for p in weights if p.name.endswith(".safetensors")):
        try:
            check_safetensors(weight)
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from error
        except OSError as error:
            raise ConfigError(f"{where}: {weight}: cannot read: {error.strerror or error}") from error


def is_video_pipeline(index: dict[str, Any]) -> bool | None:
    """Whether the checkpoint's pipeline class takes ``num_frames``; None when diffusers does not know it."""
    import inspect

    import diffusers

    cls = getattr(diffusers, str(index.get("_class_name")), None)
    if not isinstance(cls, type):
        return None
    try:
        return "num_frames" in inspect.signature(cls.__call__).parameters
    except (TypeError, ValueError):
        return None


def check_entry(name: str, entry: Any, index_path: Path, component: bool = False) -> tuple[str, str] | None:
    """A ``model_index.json`` component entry: ``[library, class]`` (texts), or ``[null, null]`` for an
    optional component left out (None). A list that is not such a pair is refused (diffusers would fail on
    it in every cell); so is any other value when ``component`` says the pipeline class takes ``name`` as a
    component. Other values are the pipeline's plain settings (``boundary_ratio: null``): None."""
    if not isinstance(entry, list) and not component:
        return None
    if isinstance(entry, list) and len(entry) == 2 and entry[0] is None and entry[1] is None:
        return None
    if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) and part for part in entry)):
        raise ConfigError(
            f"{index_path}: '{name}': {entry!r} is not a component entry: expected [library, class] "
            '(e.g. ["diffusers", "AutoencoderKL"]) or [null, null] for a component left out'
        )
    return entry[0], entry[1]


def _library_class(library: str, class_name: str) -> Any:
    """The class ``class_name`` of ``library`` (diffusers, transformers, ...), or None when it has none."""
    import importlib

    try:
        module = importlib.import_module(library)
    except (ImportError, ValueError):  # ValueError: an empty or relative module name
        return None
    return getattr(module, class_name, None)


def check_classes(directory: str | Path, index: dict[str, Any], where: str, pipeline_class: bool = True) -> None:
    """Before the first cell, what every cell would trip on while loading: each component entry a
    ``[library, class]`` pair naming a class that library has, the pipeline's ``_class_name`` a diffusers
    class (``pipeline_class``: false for a custom pipeline, which diffusers does not name), and each diffusers
    model's ``config.json`` of the types its class takes and matching the shapes of its weights."""
    import diffusers

    directory = Path(directory)
    index_path = directory / "model_index.json"
    class_name = str(index["_class_name"])
    pipeline = getattr(diffusers, class_name, None)
    if pipeline_class and not isinstance(pipeline, type):
        pipelines = [name for name in dir(diffusers) if name.endswith("Pipeline")]
        hint = did_you_mean(class_name, pipelines)
        raise ConfigError(
            f"{where}: {index_path}: _class_name: unknown pipeline class '{class_name}' (diffusers "
            f"{diffusers.__version__} has no such class).{hint} Name a diffusers pipeline class, or pass "
            "load_kwargs.custom_pipeline"
        )
    components: set[str] = set()
    if isinstance(pipeline, type) and hasattr(pipeline, "_get_signature_keys"):
        required, _ = pipeline._get_signature_keys(pipeline)
        components = {*required, *getattr(pipeline, "_optional_components", [])}
    for name, entry in index.items():
        if name.startswith("_"):
            continue
        try:
            pair = check_entry(name, entry, index_path, component=name in components)
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from error
        if pair is None:
            continue
        library, component_class = pair
        cls = _library_class(library, component_class)
        if cls is None:
            import importlib

            try:
                names = dir(importlib.import_module(library))
            except (ImportError, ValueError):  # a library that is not installed, or no module name at all
                names = []
            hint = did_you_mean(component_class, names)
            raise ConfigError(
                f"{where}: {index_path}: '{name}': library '{library}' has no class '{component_class}' "
                f"(a typo, or a newer version of that library wrote the checkpoint).{hint}"
            )
        if library == "diffusers" and hasattr(cls, "from_config") and hasattr(cls, "state_dict"):
            _check_model_config(cls, directory / name, f"{where}: component '{name}' ({component_class})")
        elif library == "transformers" and (directory / name / "config.json").is_file():
            # A text encoder's sizes too (num_hidden_layers: 3000 timed 2998 random layers); its weights'
            # shapes are not compared here: transformers builds what the weights lack at random (see docs).
            config_path = directory / name / "config.json"
            config = read_json_object(config_path, "the config")
            _check_config_sizes(config, config_path, f"{where}: component '{name}' ({component_class})")


def _check_model_config(cls: Any, folder: Path, where: str) -> None:
    """``config.json`` values of the types ``cls.__init__`` annotates, and the model it builds (on the meta
    device: nothing allocated) of the shapes the safetensors files hold."""
    import inspect
    import typing

    config_path = folder / "config.json"
    if not config_path.is_file():
        return
    config = read_json_object(config_path, "the config")
    parameters: Mapping[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    try:
        parameters = inspect.signature(cls.__init__).parameters
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not resolve: nothing to check types against
        parameters, hints = {}, {}
    for key, value in config.items():
        if key not in parameters or value is None:
            continue
        default = _json_kind(parameters[key].default)
        wanted = _annotation_kinds(hints[key]) if key in hints else default
        if wanted is not None and default is not None:
            # The class's own default is always allowed: diffusers annotates AutoencoderKLCogVideoX's
            # force_upcast as a float and defaults (and saves) it True.
            wanted = wanted | default
        if wanted is not None and _given_kind(value) not in wanted:
            raise ConfigError(
                f"{where}: {config_path}: {key}: {value!r} is not allowed: {cls.__name__} takes "
                f"{' or '.join(sorted(wanted))}"
            )
    _check_config_sizes(config, config_path, where)
    if "quantization_config" in config:  # pre-quantized weights are packed: their shapes differ by design
        return
    _check_weight_shapes(cls, config, config_path, folder, where)


# The most layers (or blocks, or entries of a per-block list) a model config may ask for: the largest diffusers
# transformers have ~60 (Wan 14B: 40, HunyuanVideo: 20 + 40), and building the model on the meta device to check
# its shapes costs time per layer (100000 layers hung ``plan``).
MAX_CONFIG_LAYERS = 1024
# The largest whole number any config value may be: no real size or count comes near it.
MAX_CONFIG_INT = 2**31
_COUNT_KEY = re.compile(r"(^num_.*(layers|blocks)$|_layers$|_blocks$|^layers_per_block$)")
_SIZE_KEY = re.compile(r"(^num_|_layers$|_blocks$|layers_per_block|_heads$|_dim$|_dims$|_channels$|_size$|^groups$)")


def _check_config_sizes(config: dict[str, Any], config_path: Path, where: str) -> None:
    """Refuse a size or count no model has before anything is built from the config: a negative size
    (``num_layers: -1`` builds a model with no layers that then loads nothing), a count of layers beyond
    ``MAX_CONFIG_LAYERS`` (building 100000 of them on the meta device hung ``plan``), a list that long, or a
    whole number beyond ``MAX_CONFIG_INT``."""

    def refuse(key: str, value: Any, allowed: str) -> ConfigError:
        return ConfigError(f"{where}: {config_path}: {key}: {value!r} is not allowed: {allowed}")

    for key, value in config.items():
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and len(value) > MAX_CONFIG_LAYERS:
            raise refuse(key, f"a list of {len(value)}", f"at most {MAX_CONFIG_LAYERS} entries (one per block)")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                continue
            if _SIZE_KEY.search(key) and item < 0:
                raise refuse(key, item, "a size or count, 0 or more")
            if _COUNT_KEY.search(key) and item > MAX_CONFIG_LAYERS:
                raise refuse(key, item, f"at most {MAX_CONFIG_LAYERS} layers or blocks")
            if abs(item) > MAX_CONFIG_INT:
                raise refuse(key, item, f"a number within ±{MAX_CONFIG_INT} (no model's size comes near it)")


def _annotation_kinds(annotation: Any) -> set[str] | None:
    """The JSON kinds a parameter annotated so may take (``Union[int, Tuple[int]]``: a whole number or a list),
    or None when the annotation leaves it open (``Any``, a class)."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            inner = _annotation_kinds(arg)
            if inner is None:
                return None
            kinds |= inner
        return kinds or None
    if origin in (list, tuple) or annotation in (list, tuple):
        return {"a list"}
    if origin is dict or annotation is dict:
        return {"a mapping"}
    if origin is typing.Literal:
        return {kind for arg in typing.get_args(annotation) for kind in (_json_kind(arg) or ())} or None
    return {
        bool: {"true or false"},
        int: {"a whole number"},
        float: {"a number", "a whole number"},
        str: {"a text"},
    }.get(annotation)


def _json_kind(value: Any) -> set[str] | None:
    """The JSON kinds a value of this default's type may have (an int default takes a whole number; a float
    default also a whole number), or None when the default says nothing (None, an object)."""
    if isinstance(value, bool):
        return {"true or false"}
    if isinstance(value, int):
        return {"a whole number"}
    if isinstance(value, float):
        return {"a number", "a whole number"}
    if isinstance(value, str):
        return {"a text"}
    if isinstance(value, (list, tuple)):
        return {"a list"}
    return None if not isinstance(value, dict) else {"a mapping"}


def _given_kind(value: Any) -> str:
    kinds = _json_kind(value)
    return min(kinds) if kinds else "null"


def _check_weight_shapes(cls: Any, config: dict[str, Any], config_path: Path, folder: Path, where: str) -> None:
    import torch

    stored: dict[str, tuple[tuple[int, ...], Path]] = {}
    for weight in sorted(folder.glob("*.safetensors")):
        stored.update({key: (shape, weight) for key, shape in _safetensors_shapes(weight).items()})
    if not stored:
        return
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    except Exception as error:  # a class refusing its own config: what every cell would hit first
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ConfigError(
            f"{where}: {config_path}: {cls.__name__} cannot be built from this config: {reason}"
        ) from error
    sizes = ", ".join(
        f"{key} {value}" for key, value in config.items() if isinstance(value, int) and ("head" in key or "dim" in key)
    )
    for key, tensor in model.state_dict().items():
        if key not in stored:
            continue
        shape, weight = stored[key]
        if tuple(tensor.shape) != shape:
            raise ConfigError(
                f"{where}: {weight}: '{key}' has shape {list(shape)} but {config_path.name} builds "
                f"{list(tensor.shape)}: the config does not describe these weights ({sizes or 'check its sizes'})"
            )


def _safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from a safetensors file's header (checked complete by ``check_safetensors``)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length).decode("utf-8"))
    return {
        key: tuple(int(n) for n in entry["shape"])
        for key, entry in header.items()
        if key != "__metadata__" and isinstance(entry, dict) and isinstance(entry.get("shape"), list)
    }
