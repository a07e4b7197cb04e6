"""Install the carried wheels (``.gpu-wheels/``) into this machine's Python without touching its torch.

Run on the GPU machine (no network) by ``gpu_check.sh``. diffusers, cache-dit and torchao are always
installed at the carried versions; the others (pydantic and friends, platformdirs) only where missing or
older than the project needs. Everything goes through ``pip install --no-index --no-deps`` with a
constraint pinning the torch that is installed, and the torch version is checked again afterwards.
Where this Python has no pip, or pip fails, the chosen wheels are unpacked into ``--fallback-dir`` (a wheel is a zip
of what site-packages would hold) and ``gpu_check.sh`` puts that folder on ``PYTHONPATH``.
Exit codes: 0 installed, 3 something is wrong (message on stderr).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ALWAYS = ("diffusers", "cache-dit", "torchao")
# The project's lower bounds (pyproject.toml) for packages installed only where missing or too old.
MINIMUM = {
    "pydantic": "2.10",
    "pydantic-core": "2.27",
    "annotated-types": "0.6",
    "typing-inspection": "0.4",
    "typing-extensions": "4.12",
    "platformdirs": "4",
}
# Installed together or not at all: pydantic pins its core exactly.
GROUPS = {"pydantic": ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")}


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalised name, version) of a wheel file."""
    name, version = path.name.split("-")[:2]
    return _key(name), version


def installed_version(name: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def plan_install(wheels: list[Path], installed: dict[str, str | None]) -> tuple[list[Path], list[str]]:
    """Which wheels to install, and one line per decision (installed or kept, and why)."""
    chosen: set[str] = set()
    notes = []
    by_name = {wheel_name(w)[0]: w for w in wheels}
    for name, wheel in sorted(by_name.items()):
        have = installed.get(name)
        carried = wheel_name(wheel)[1]
        if name in ALWAYS:
            chosen.add(name)
            notes.append(f"{name} {carried}: install (carried version; found {have or 'none'})")
        elif have is None:
            chosen.add(name)
            notes.append(f"{name} {carried}: install (missing)")
        elif _version_tuple(have) < _version_tuple(MINIMUM.get(name, "0")):
            chosen.add(name)
            notes.append(f"{name} {carried}: install (found {have}, need >= {MINIMUM[name]})")
        else:
            notes.append(f"{name}: keep {have}")
    for members in GROUPS.values():
        if chosen & set(members):
            chosen |= {m for m in members if m in by_name}
    return [by_name[name] for name in sorted(chosen)], notes


def unpack(wheels: list[Path], target: Path) -> None:
    """Extract wheels into ``target`` (importable once it is on ``PYTHONPATH``)."""
    target.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheels", type=Path, help="The folder of carried wheels (.gpu-wheels).")
    parser.add_argument("--dry-run", action="store_true", help="Print the plan, install nothing.")
    parser.add_argument("--fallback-dir", type=Path, default=Path(".gpu-site"), help="Unpack here without pip.")
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob("*.whl"))
    if not wheels:
        print(f"error: {args.wheels}: no wheels; run 'make gpu-wheels' on the CPU side first", file=sys.stderr)
        return 3
    torch_before = installed_version("torch")
    if torch_before is None:
        print("error: torch is not installed in this Python; the GPU check uses the machine's torch", file=sys.stderr)
        return 3
    names = {wheel_name(w)[0] for w in wheels}
    chosen, notes = plan_install(wheels, {name: installed_version(name) for name in names})
    print("\n".join(notes))
    if args.dry_run or not chosen:
        return 0
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False)
    if has_pip.returncode:
        unpack(chosen, args.fallback_dir)
        print(f"no pip in {sys.executable}: unpacked {len(chosen)} wheel(s) into {args.fallback_dir}")
        return 0
    constraints = args.wheels / "constraints.txt"
    constraints.write_text(f"torch=={torch_before}\n")
    command = [
        sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
        "-c", str(constraints), *map(str, chosen),
    ]  # fmt: skip
    done = subprocess.run(command, check=False)
    if done.returncode:  # a read-only environment, say: the wheels still work from PYTHONPATH
        unpack(chosen, args.fallback_dir)
        print(f"pip install failed ({done.returncode}): unpacked {len(chosen)} wheel(s) into {args.fallback_dir}")
        return 0
    torch_after = installed_version("torch")
    if torch_after != torch_before:
        print(f"error: torch changed from {torch_before} to {torch_after}", file=sys.stderr)
        return 3
    print(f"installed {len(chosen)} wheel(s); torch {torch_after} untouched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
