"""Test configuration: JAX in strict mode, hypothesis profiles."""

import os

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("FPEMU_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def x64():
    """Run a test with jax_enable_x64 on (thread-local; restored afterwards)."""
    with jax.enable_x64(True):
        yield
