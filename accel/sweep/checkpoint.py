"""Checks of a diffusers checkpoint directory before the first cell: a broken download is bad input.

Without them a corrupt ``model_index.json``, a missing component folder or a truncated weight file is
found by every cell in turn, each recorded as failed with a loader's message. Here each is one line that
names the model, the component and the file, and the sweep stops before measuring anything (exit 2).
Only files are read: configs are parsed as JSON and safetensors headers are compared with the file size;
no weights are loaded.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from accel.errors import ConfigError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack")
# Component classes that carry no weights and no config.json of their own.
_WEIGHTLESS = ("Tokenizer", "TokenizerFast", "Scheduler", "Processor", "FeatureExtractor")


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object; a ConfigError saying what is wrong with it otherwise."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
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
        if name.startswith("_") or not (isinstance(entry, list) and len(entry) == 2 and all(entry)):
            continue  # metadata, a plain setting, or an optional component left out ([null, null])
        _check_component(directory / name, f"{where}: component '{name}' ({entry[1]})", str(entry[1]))
    return index


def _check_component(folder: Path, where: str, class_name: str) -> None:
    if not folder.is_dir():
        raise ConfigError(f"{where}: folder {folder} is missing")
    for config in sorted(folder.glob("*config*.json")):
        try:
            read_json_object(config, "the config")
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from error
    if class_name.endswith(_WEIGHTLESS):
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
