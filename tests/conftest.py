"""Test configuration: JAX in strict mode; hypothesis profiles from fpemu's pytest plugin.

The plugin (fpemu.testing.plugin) registers the ``ci``/``dev``/``thorough`` profiles;
``--hypothesis-profile NAME`` or ``FPEMU_HYPOTHESIS_PROFILE=NAME`` (set to ``thorough`` by
``make test-slow``) selects one. Without either, fpemu's own tests run the ``ci`` profile.
"""

import os

import jax
import pytest
from hypothesis import settings

from fpemu.testing import plugin  # noqa: F401  (registers the profiles, also under `-p no:fpemu`)

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# `make test` gives the run a persistent compilation cache (the Makefile's JAX_COMPILATION_CACHE_DIR).
# Each test process (pytest-xdist worker) keeps its own part of it, and so do the subprocesses it
# starts: JAX writes an entry without a lock, so a process could read one that another was still
# writing, and then warn (an error here) and compile the program itself. Shared, the processes had
# 5% of their programs in common; separate, the run takes as long.
_CACHE, _WORKER = os.environ.get("JAX_COMPILATION_CACHE_DIR"), os.environ.get("PYTEST_XDIST_WORKER")
if _CACHE and _WORKER:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_CACHE, _WORKER)
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])

# This file is imported before pytest_configure, where the plugin and hypothesis load a chosen
# profile; if it is imported later, a profile has already been chosen and is kept.
if settings.get_current_profile_name() == "default":
    settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The examples of the Markdown files (several seconds each) are ``long`` tests, like the tests marked
    so: ``make test`` leaves them out, ``make test-long`` and CI run them (tryfirst: before ``-m`` selects).

    Long tests run first, in their order; the rest keep theirs. pytest-xdist hands each process a
    contiguous share of the list and lets a process that runs dry take half of another's queue: with the
    long tests at the end, one process could still be in one of them while the other had finished."""
    for item in items:
        if item.path.suffix == ".md":
            item.add_marker(pytest.mark.long)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def x64():
    """Run a test with jax_enable_x64 on (thread-local; restored afterwards)."""
    with jax.enable_x64(True):
        yield
