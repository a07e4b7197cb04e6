#!/usr/bin/env bash
# The GPU check, one command (make gpu-check): on a machine with a CUDA GPU and no network, install the
# carried wheels (.gpu-wheels/, from `make gpu-wheels` on the CPU side) into this machine's Python
# without touching its torch, then run profiles/gpu-h200.yaml, gate it and write report.md, results and
# figures into $OUT (default runs/gpu-check-out). Budget: GPU_CHECK_BUDGET_S seconds for everything after
# installation (default 500; with installation the whole check fits 9 minutes).
# Python: $GPU_PYTHON, else /opt/torch/.venv/bin/python when present, else python3.
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
py="${GPU_PYTHON:-}"
if [ -z "$py" ]; then
    if [ -x /opt/torch/.venv/bin/python ]; then py=/opt/torch/.venv/bin/python; else py=python3; fi
fi
out="${OUT:-runs/gpu-check-out}"
mkdir -p "$out"
echo "python: $py; wheels: ${GPU_WHEELS:-.gpu-wheels}; out: $out"
# GPU_CHECK_INSTALL=dry prints the installation plan without installing (a CPU dry run of this script).
dry=""; [ "${GPU_CHECK_INSTALL:-yes}" = "dry" ] && dry="--dry-run"
if ! "$py" benchmarks/gpu/install_wheels.py "${GPU_WHEELS:-.gpu-wheels}" $dry 2>&1 | tee "$out/install.log"; then
    echo "installation failed: see $out/install.log" >&2
fi
# Without pip the wheels were unpacked into .gpu-site: importable from there.
if [ -d .gpu-site ]; then export PYTHONPATH="$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}"; fi
"$py" -c "import torch, diffusers, cache_dit, torchao, pydantic; print('torch', torch.__version__, 'diffusers', diffusers.__version__, 'cache-dit', getattr(cache_dit, '__version__', '?'), 'torchao', torchao.__version__)" 2>&1 | tee -a "$out/install.log"
elapsed=$(( $(date +%s) - start ))
budget=$(( ${GPU_CHECK_BUDGET_S:-500} ))
echo "installation took ${elapsed}s; sweep, gate and report within ${budget}s"
OUT="$out" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMNI_ACCEL_ZOO_DIR="${OMNI_ACCEL_ZOO_DIR:-$PWD/.zoo}" \
    HF_HUB_OFFLINE=1 "$py" benchmarks/gpu/gpu_check.py --out "$out" --budget-s "$budget" "$@"
code=$?
# install.log is folded into check.log's folder count: keep $OUT at 8 files or fewer.
if [ -f "$out/install.log" ]; then cat "$out/install.log" >> "$out/check.log"; rm -f "$out/install.log"; fi
echo "GPU check finished in $(( $(date +%s) - start ))s (exit $code); files in $out:"; ls -la "$out"
exit $code
