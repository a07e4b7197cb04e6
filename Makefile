# Two entry points, each doing its own setup in .venv (created and installed on first use, and again
# whenever pyproject.toml changes):
#   make sweep   run omni-accel sweep on the embedded default profile (profiles/quickstart.yaml)
#   make test    ruff (lint + format check), mypy (strict, on accel/) and the test suite
#   make mutation  the curated mutations of the judging code, each expected to fail its named tests
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: sweep test setup clean report report-engines gpu-check gpu-wheels roofline mutation

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

sweep: $(STAMP)
	$(VENV)/bin/omni-accel sweep

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy accel
	$(VENV)/bin/python -m pytest -q

# The curated fault-injection check (tests/mutations/mutations.yaml): each mutation of the judging code applied
# to a scratch copy of the tree, its named tests run there; score and survivors in reports/mutation/curated.md.
mutation: $(STAMP)
	$(VENV)/bin/python benchmarks/mutation.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .mypy_cache

# Regenerate reports/quickstart (the default CPU profile's report, committed) and gate it.
report: $(STAMP)
	rm -rf reports/quickstart
	$(VENV)/bin/omni-accel sweep --out reports/quickstart
	# The ladders are meant to break at their aggressive end: the gate's verdicts are committed in gate.md.
	-$(VENV)/bin/omni-accel gate reports/quickstart

# Regenerate reports/engines-flux (library vs adapter vs native vs vLLM-Omni; builds vLLM-Omni's
# environment first when missing: a few minutes, ~4.4 GB).
report-engines: $(STAMP)
	$(VENV)/bin/omni-accel engines create vllm-omni
	rm -rf reports/engines-flux
	$(VENV)/bin/omni-accel sweep profiles/engines-flux.yaml --out reports/engines-flux

# The GPU check (benchmarks/gpu/): `make gpu-wheels` on a machine with PyPI downloads the wheels the GPU
# machine lacks into .gpu-wheels/ (ignored, ~12 MiB); `make gpu-check` on the GPU machine (no network,
# no .venv: its own Python and torch) installs them and writes report.md, results and figures into $OUT.
gpu-wheels:
	PIP="$(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python -m pip,$(PYTHON) -m pip)" bash benchmarks/gpu/download_wheels.sh

gpu-check:
	bash benchmarks/gpu/gpu_check.sh

# FLUX.1-dev's FLOPs and floors on an H200, counted on the meta device (no GPU needed).
roofline: $(STAMP)
	$(VENV)/bin/omni-accel roofline synthetic:flux.1-dev --height 1024 --width 1024 --steps 28 --device h200
