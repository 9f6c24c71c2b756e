# The first Python >= 3.11 on PATH (override: make PYTHON=/path/to/python3.x). A candidate
# is run, not just found: a pyenv shim exists for versions that are not installed.
PYTHON_CANDIDATES := python3.13 python3.12 python3.11 python3
PYTHON ?= $(shell for p in $(PYTHON_CANDIDATES); do \
	if $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
	command -v $$p; break; fi; done)
VENV := .venv
PY := $(VENV)/bin/python
# Exact versions for the test environment; pyproject.toml states the supported ranges.
CONSTRAINTS := constraints.txt

.PHONY: demo test lint clean check-python

check-python:
	@if [ -z "$(PYTHON)" ]; then \
	  echo "error: tilenest needs Python >= 3.11; none of $(PYTHON_CANDIDATES) on PATH is." \
	       "Install one or run: make PYTHON=/path/to/python3.11" >&2; exit 1; fi
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: PYTHON=$(PYTHON) is older than 3.11 (or does not run)" >&2; exit 1; }

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	@$(MAKE) --no-print-directory check-python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m tilenest demo

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -n auto -m "not serial" --durations=25 tests
	$(PY) -m pytest -m serial tests

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info
