# The two commands a newcomer needs: `make demo` and `make test`. Each creates .venv and installs fpemu.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PIP_INSTALL = -m pip install --quiet --disable-pip-version-check

# The support window (README, "Requirements"; pyproject.toml states it, tests/test_packaging.py holds the
# three together). `make test` runs on $(PYTHON)'s newest JAX; CI (.ci/run) adds the newest JAX, which
# needs Python >= 3.12, and the oldest supported JAX. .ci/find-python finds each Python (PATH, then
# pyenv); name one with PYTHON_NEWEST=..., PYTHON_OLDEST=..., PYTHON_313=...
OLDEST_JAX := 0.10.0
PYTHON_NEWEST ?= $(shell .ci/find-python 3.12 2>/dev/null)
PYTHON_313 ?= $(shell .ci/find-python 3.13 2>/dev/null)
PYTHON_OLDEST ?= $(shell .ci/find-python 3.11 2>/dev/null)

.PHONY: install demo lint test test-long test-newest smoke-oldest smoke-313 test-slow bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python $(PIP_INSTALL) -e '.[test]'
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
# `make test` leaves out the tests marked `long` (several seconds each: the examples of README.md and
# docs/, end-to-end training, sharding, pinned recipe bits, the CLI's runs, whole-range properties) so
# that it takes under 10 minutes on two cores; `make test-long` runs exactly those. CI (.ci/run) runs
# both, and the whole suite on the newest JAX.
SUITE = tests fpemu kernels README.md docs --doctest-modules --doctest-glob='*.md' -p no:cacheprovider -n auto --dist worksteal
test: lint
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest $(SUITE) -m 'not slow and not long'

test-long: $(STAMP)
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest $(SUITE) -m 'long and not slow'

# The whole suite (`make test` and `make test-long` together) on the newest JAX a user gets (Python 3.12),
# in .venv-newest.
.venv-newest/.installed-stamp: pyproject.toml
	@test -n "$(PYTHON_NEWEST)" || .ci/find-python 3.12 PYTHON_NEWEST
	$(PYTHON_NEWEST) -m venv .venv-newest
	.venv-newest/bin/python $(PIP_INSTALL) -e '.[test]'
	touch $@

test-newest: .venv-newest/.installed-stamp
	.venv-newest/bin/python -c 'import jax, sys; print("jax", jax.__version__, "on Python", sys.version.split()[0])'
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci .venv-newest/bin/python -m pytest $(SUITE)

# Smoke runs, on the oldest supported JAX (Python 3.11) and on the newest JAX under Python 3.13, with the
# core test dependencies only: the primitive catalogue against JAX, quantize, the kernels' lowering, and
# the model zoo under emulate (bf16 and a training recipe) for the models whose programs change most
# across releases (Flax, scan, checkpoint, shard_map, tanh and erf gelu, attention, cond) and AdamW.
ZOO = flax_linen or flax_nnx or scan_rnn or jit_checkpoint_scan or shard_map or act_gelu_tanh or act_gelu_erf or attention or cond or adamw
SMOKE = tests/jax/test_primitives.py tests/ops/test_quantize.py tests/kernels/test_triton_lowering.py tests/emulate/test_model_zoo.py \
	-k 'not test_model_zoo or $(ZOO)' -p no:cacheprovider -n auto --dist worksteal
.venv-oldest/.installed-stamp: pyproject.toml
	@test -n "$(PYTHON_OLDEST)" || .ci/find-python 3.11 PYTHON_OLDEST
	$(PYTHON_OLDEST) -m venv .venv-oldest
	.venv-oldest/bin/python $(PIP_INSTALL) -e '.[test-core]' 'jax==$(OLDEST_JAX)' 'jaxlib==$(OLDEST_JAX)'
	touch $@

smoke-oldest: .venv-oldest/.installed-stamp
	.venv-oldest/bin/python -c 'import jax, sys; print("jax", jax.__version__, "on Python", sys.version.split()[0])'
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci .venv-oldest/bin/python -m pytest $(SMOKE)

.venv-313/.installed-stamp: pyproject.toml
	@test -n "$(PYTHON_313)" || .ci/find-python 3.13 PYTHON_313
	$(PYTHON_313) -m venv .venv-313
	.venv-313/bin/python $(PIP_INSTALL) -e '.[test-core]'
	touch $@

smoke-313: .venv-313/.installed-stamp
	.venv-313/bin/python -c 'import jax, sys; print("jax", jax.__version__, "on Python", sys.version.split()[0])'
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=ci .venv-313/bin/python -m pytest $(SMOKE)

# Long sweeps (every float32 input, the full kernel sweep, thorough hypothesis profile): not run in CI.
test-slow: $(STAMP)
	$(CACHED) FPEMU_HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest tests -m 'slow or fpemu_exhaustive' --fpemu-exhaustive -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m pytest bench --benchmark-only --benchmark-min-rounds=5 -p no:cacheprovider

clean:
	rm -rf $(VENV) .venv-newest .venv-oldest .venv-313 build *.egg-info .pytest_cache .hypothesis .benchmarks
