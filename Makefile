# Two entry points, each doing its own setup in .venv (created and installed on first use, and again
# whenever pyproject.toml changes):
#   make sweep   run omni-accel sweep on the embedded default profile (profiles/quickstart.yaml)
#   make test    ruff (lint + format check) and the test suite
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: sweep test setup clean report report-engines

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
	$(VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache

# Regenerate reports/quickstart (the default CPU profile's report, committed) and gate it.
report: $(STAMP)
	rm -rf reports/quickstart
	$(VENV)/bin/omni-accel sweep --out reports/quickstart
	$(VENV)/bin/omni-accel gate reports/quickstart

# Regenerate reports/engines-flux (library vs adapter vs native vs vLLM-Omni; builds vLLM-Omni's
# environment first when missing: a few minutes, ~4.4 GB).
report-engines: $(STAMP)
	$(VENV)/bin/omni-accel engines create vllm-omni
	rm -rf reports/engines-flux
	$(VENV)/bin/omni-accel sweep profiles/engines-flux.yaml --out reports/engines-flux
