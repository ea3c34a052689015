# contrastive_jax developer commands. `make quickstart` and `make test` set up
# .venv on first use (PyPI only; no other downloads).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup quickstart test test-min test-all mutations notebooks lint typecheck docs bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

quickstart: $(STAMP)
	XLA_FLAGS= $(PY) -m contrastive_jax.quickstart --workdir runs/quickstart

# The test suite plus the docstring examples of the losses and metrics (doctests).
DOCTESTS := contrastive_jax/losses contrastive_jax/metrics.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" --doctest-modules tests $(DOCTESTS)

# Every notebook run top to bottom in a fresh kernel, as a user runs it: from the wheel of
# this checkout installed in a virtual environment, in a temporary directory, no environment
# variables (03 uses the built-in digits, 05 trains its short run). Timings: notebooks/README.md.
notebooks: $(STAMP)
	$(PY) -m pytest -q -n 0 -m slow tests/test_notebooks.py

# The declared floors: a fresh venv (.venv-min) with the core dependencies pinned to their
# `>=` bounds (constraints/min.txt) plus the test tools, running the loss tests.
MIN_VENV := .venv-min

test-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet -c constraints/min.txt . pytest pytest-xdist hypothesis optax
	$(MIN_VENV)/bin/python -m pytest -q -n 2 -p no:cacheprovider -m "not slow" tests/losses

# Adds the slow tests, among them tests/test_wheel.py: the wheel installed without extras
# into a fresh venv runs the README's loss example outside the checkout, then with [train]
# the quickstart; and `make test-min`.
test-all: $(STAMP) test-min
	$(PY) -m pytest -q -n 2 --doctest-modules tests $(DOCTESTS)

# Small bugs put into the losses and the training step, one at a time, each against the
# fast tests of its directory (docs/contributing.md); not part of `make test` (10-30 minutes).
mutations: $(STAMP)
	$(PY) -m experiments.mutation_check --tree .

lint: $(STAMP)
	$(VENV)/bin/ruff check contrastive_jax tests experiments notebooks docs/_griffe

# Static types (mypy, settings in pyproject.toml) over the packages that are kept clean;
# `make typecheck TYPECHECK_PATHS="..."` checks others.
TYPECHECK_PATHS ?= contrastive_jax/losses contrastive_jax/metrics.py contrastive_jax/train contrastive_jax/sizing \
	contrastive_jax/eval/evaluator.py contrastive_jax/eval/registry.py contrastive_jax/eval/probes.py \
	contrastive_jax/eval/knn_monitor.py contrastive_jax/eval/validation.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy $(TYPECHECK_PATHS)

# The API reference site in site/, warnings as errors.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	XLA_FLAGS= $(PY) experiments/bench/losses.py --sizes 2048,8192 --losses supcon,sincere,nt_xent --no-memory

clean:
	rm -rf runs/quickstart $(MIN_VENV) .pytest_cache .ruff_cache site
