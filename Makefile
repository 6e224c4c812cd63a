# The two commands a newcomer needs: `make demo` and `make test`. Each creates .venv and installs fpemu.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo lint test test-slow bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/fpemu demo

# ruff (lint and format check) and mypy, configured in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The test runs are mostly XLA compilation, and the same programs come back in many tests: XLA's
# persistent compilation cache, in a directory made for this run and deleted after it, compiles each
# program once per test process (about 15% of the run; each process has its own part of the
# directory, tests/conftest.py). Results never depend on it (a cached executable is the one
# compiled), and nothing carries over from one run to the next.
CACHED = cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && JAX_COMPILATION_CACHE_DIR="$$cache" \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0

# Lint, then unit tests, doctests in the package, and the examples in README.md and docs/. Hypothesis
# runs its derandomized `ci` profile (fixed examples, no database): the same run every time. The tests
# run in one process per core (pytest-xdist; a worker that runs out of tests takes over half of the
# other's queue): no test depends on another or on the order they run in.
test: lint
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest tests fpemu kernels README.md docs --doctest-modules --doctest-glob='*.md' -p no:cacheprovider -n auto --dist worksteal

# Long sweeps (every float32 input, the full kernel sweep, thorough hypothesis profile): not run in CI.
test-slow: $(STAMP)
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest tests -m 'slow or fpemu_exhaustive' --fpemu-exhaustive -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m pytest bench --benchmark-only --benchmark-min-rounds=5 -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .benchmarks
