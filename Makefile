# Two entry points, each doing its own setup in .venv (created and installed on first use, and again
# whenever pyproject.toml changes):
#   make sweep   run omni-accel sweep on the embedded default profile (profiles/quickstart.yaml)
#   make test    ruff (lint + format check), mypy (strict, on accel/), the generated manual pages' staleness
#                check, the manual's strict build and the test suite
#   make mutation  the curated mutations of the judging code, each expected to fail its named tests
#   make mutmut    mutmut's generated mutants of the gate, the speedup statistics and two features' verdicts
PYTHON ?= python3
VENV ?= .venv
HASH := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Two stamps: `make sweep` needs the package alone (its runtime dependencies: a fresh machine's quickstart
# does not wait for Ray, mypy or the manual's tools); everything else installs the dev extras too.
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
STAMP := $(VENV)/.installed-dev-$(HASH)

.PHONY: sweep test setup clean docs docs-reference report report-video report-engines report-parallel gpu-check gpu-wheels roofline coverage mutation mutmut

setup: $(STAMP)

# pip would byte-compile every installed file, one after another (90 of 140 s on 2 cores): the run stamp
# installs without it and byte-compiles what a sweep imports, two interpreters at once (accel/bytecode.py);
# the dev stamp compiles the rest, in parallel, for the tests (compileall's errors are third-party files that
# pip would also have skipped).
$(RUN_STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --no-compile -e .
	$(VENV)/bin/python -m accel.bytecode
	rm -f $(VENV)/.installed-run-*
	touch $@

$(STAMP): $(RUN_STAMP)
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	$(VENV)/bin/python -m compileall -qq -j 0 $(VENV)/lib || true
	rm -f $(VENV)/.installed-dev-*
	touch $@

sweep: $(RUN_STAMP)
	$(VENV)/bin/omni-accel sweep

# The suite on two workers (pytest-xdist), CI's two cores: serial, it kept one busy and left the other idle. -n 2,
# not -n auto: auto counts physical cores through psutil, blind to an affinity mask or a runner's CPU quota (a
# 2-vCPU VM with hyperthreads reads as 1), and more workers than cores only contend. --dist loadfile sends each test
# file whole to one worker: its module-scoped fixtures (zoo pipelines, cut-down sweeps, a Ray cluster, the vLLM-Omni
# environment) are built once as in a serial run, never on both workers at once, and its tests keep their order.
# One file or test: $(VENV)/bin/python -m pytest tests/test_x.py::name (serial, no workers to start).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy accel
	$(VENV)/bin/python -m accel.docs_gen --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile

# The manual (mkdocs.yml, pages under docs/) into site/ (ignored); offline, strict: a dead link, a missing
# anchor or a page left out of the nav fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Regenerate docs/reference/ (profile keys, features, results record, CLI, Python API, module map) from the code.
docs-reference: $(STAMP)
	$(VENV)/bin/python -m accel.docs_gen

# The curated fault-injection check (tests/mutations/mutations.yaml): each mutation of the judging code applied
# to a scratch copy of the tree, its named tests run there; score and survivors in reports/mutation/curated.md.
mutation: $(STAMP)
	$(VENV)/bin/python benchmarks/mutation.py
	@echo "generated mutants (mutmut) of the same judging code: make mutmut (reports/mutation/mutmut.md)"

# mutmut's generated mutants ([tool.mutmut] in pyproject.toml: the gate's modules, accel/measure/speedup.py, the
# cache and compile features' verdicts) against the fast unit-level tests: mutants/ (ignored) holds the copy and
# the results, so a second run only checks what is new; score per module and every survivor with its review
# (tests/mutations/mutmut_reviews.yaml) in reports/mutation/mutmut.md. Exit 1 while a survivor is unreviewed.
mutmut: $(STAMP)
	nice -n 19 $(VENV)/bin/python benchmarks/mutmut_report.py --run

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache .mypy_cache

# Regenerate reports/quickstart (the default CPU profile's report, committed) and gate it.
report: $(STAMP)
	rm -rf reports/quickstart
	$(VENV)/bin/omni-accel sweep --out reports/quickstart
	# The ladders are meant to break at their aggressive end: the gate's verdicts are committed in gate.md.
	-$(VENV)/bin/omni-accel gate reports/quickstart

# Regenerate reports/video (profiles/video.yaml: mini-wan, two experts, every feature on both): mini-wan's
# calibration first (TeaCache's polynomials and MagCache's ratios follow the committed weights), then the sweep and
# its gate; the folder's README (command, machine, load, wall time) is kept and must be updated by hand.
report-video: $(STAMP)
	$(VENV)/bin/omni-accel calibrate calibration/profile.yaml --model mini-wan --out calibration/mini-wan.yaml
	rm -rf reports/video.new
	$(VENV)/bin/omni-accel sweep profiles/video.yaml --out reports/video.new
	-$(VENV)/bin/omni-accel gate reports/video.new
	test ! -f reports/video/README.md || cp reports/video/README.md reports/video.new/
	rm -rf reports/video && mv reports/video.new reports/video

# Regenerate reports/coverage: every zoo pipeline family x every feature family (profiles/coverage.yaml),
# support and parity only (sequential timing, one repeat, no noise floor); the gate's verdicts go to gate.md.
coverage: $(STAMP)
	rm -rf reports/coverage
	$(VENV)/bin/omni-accel sweep profiles/coverage.yaml --out reports/coverage
	-$(VENV)/bin/omni-accel gate reports/coverage
	$(VENV)/bin/omni-accel table reports/coverage > reports/coverage/tables.md

# Regenerate reports/engines-flux (library vs adapter vs native vs vLLM-Omni; builds vLLM-Omni's
# environment first when missing: a few minutes, ~4.4 GB).
report-engines: $(STAMP)
	$(VENV)/bin/omni-accel engines create vllm-omni
	rm -rf reports/engines-flux
	$(VENV)/bin/omni-accel sweep profiles/engines-flux.yaml --out reports/engines-flux

# Regenerate reports/parallel-cpu: two-rank cells (Ulysses, CFG parallel, each alone and with a cache, int8,
# offload or compile) against one rank; ring and TP refused on the CPU. Its compatibility matrix is tables.md.
report-parallel: $(STAMP)
	rm -rf reports/parallel-cpu
	$(VENV)/bin/omni-accel sweep profiles/parallel-cpu.yaml --out reports/parallel-cpu
	$(VENV)/bin/omni-accel gate reports/parallel-cpu
	$(VENV)/bin/omni-accel table reports/parallel-cpu > reports/parallel-cpu/tables.md

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
