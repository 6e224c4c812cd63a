"""`fold_key`: a Python integer's hash taken on the host gives the key a traced integer gives; a literal's
rounding on the host is compiled once."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._emulate.rounding import _literal_program, fold_key, round_literal_on_host
from fpemu._engine.rng import seeds_from_key

ROOT = seeds_from_key(jax.random.key(7))


@pytest.mark.parametrize("data", [(0,), (5,), (-3,), (np.int64(12),), (True,), (0x47454D4D, 3, 2)])
def test_static_integers_fold_to_the_keys_of_traced_ones(data):
    static = fold_key(ROOT, *data)
    traced = jax.jit(lambda *d: fold_key(ROOT, *d))(*(jnp.asarray(int(d), jnp.int32) for d in data))
    assert static.dtype == jnp.uint32 and static.shape == (2,)
    np.testing.assert_array_equal(np.asarray(static), np.asarray(traced))


def test_each_integer_gives_its_own_key():
    keys = {tuple(np.asarray(fold_key(ROOT, d)).tolist()) for d in range(64)}
    assert len(keys) == 64


def test_without_a_key_there_is_no_key():
    assert fold_key(None, 1, 2) is None


#: JAX's monitoring event of one XLA compilation (jax 0.10 to 0.12)
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def test_literals_are_rounded_by_one_program_compiled_once_whatever_the_tracing_context():
    """Literals read at the top level, inside a nested jit and inside a scan body: one XLA compilation
    rounds them all (rounded eagerly, the rounding compiled again for each tracing context)."""
    compiles = []

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE:
            compiles.append(duration)

    def f(x):
        y = x * 0.1 + jax.jit(lambda v: v * 0.3)(x)
        return jax.lax.scan(lambda c, v: (c * 0.7 + v, None), y, x[None])[0]

    x = jnp.array([0.5, 3.3], jnp.float32)
    round_literal_on_host.cache_clear()
    _literal_program.cache_clear()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.jit(fpemu.emulate(f, "bf16")).trace(x)  # traced only: the program itself is not compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert len(compiles) == 1
    bf16 = lambda v: np.asarray(v, np.float32).astype(jnp.bfloat16).astype(np.float32)  # float32 in: exact
    xr = bf16(x)
    y = bf16(bf16(xr * bf16(0.1)) + bf16(xr * bf16(0.3)))
    expected = bf16(bf16(y * bf16(0.7)) + xr)
    assert np.asarray(fpemu.emulate(f, "bf16")(x)).tobytes() == expected.tobytes()
