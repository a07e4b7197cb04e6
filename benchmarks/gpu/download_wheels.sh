#!/usr/bin/env bash
# Download, on the CPU side, exactly the wheels the GPU check installs on the H200 (see wheels.txt):
# for CPython 3.12 on manylinux x86_64, without dependencies (the list is complete), into .gpu-wheels/.
# Usage: benchmarks/gpu/download_wheels.sh [DIR]    (make gpu-wheels)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-$here/../../.gpu-wheels}"
pip="${PIP:-python3 -m pip}"
limit_mib=48   # the working tree travels too: 64 MiB in all
mkdir -p "$dest"
grep -v '^\s*#' "$here/wheels.txt" | grep -v '^\s*$' > "$dest/requirements.txt"
$pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dest" -r "$dest/requirements.txt"
size_kib=$(du -sk "$dest" | cut -f1)
echo "$dest: $(ls "$dest"/*.whl | wc -l) wheels, $((size_kib / 1024)) MiB"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
    echo "error: $dest holds ${size_kib} KiB, over the ${limit_mib} MiB budget for carried wheels" >&2
    exit 2
fi
