"""The counter hash's mixing function (`fpemu._engine.rng.mix`) on JAX and NumPy arrays, and `mix_int`;
`split`, JAX's split with fpemu's own two-word keys read as Threefry keys.

The reference is lowbias32 (Chris Wellons' published constants) written on Python integers here,
independently of the module's code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._engine.rng import mix, mix_int, split

MASK = 0xFFFFFFFF
SAMPLES = [0, 1, 2, 0x9E3779B9, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, MASK]


def lowbias32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x21F0AAAD) & MASK
    h ^= h >> 15
    h = (h * 0x735A2D97) & MASK
    return h ^ (h >> 15)


def test_lowbias32_reference_is_a_bijection_on_a_sample():
    outputs = {lowbias32(h) for h in range(1 << 16)}
    assert len(outputs) == 1 << 16
    assert lowbias32(0) == 0  # xorshift-multiply fixes zero


def test_mix_on_jax_and_numpy_arrays_equals_the_reference():
    words = np.array(SAMPLES, np.uint32)
    expected = np.array([lowbias32(h) for h in SAMPLES], np.uint32)
    np.testing.assert_array_equal(np.asarray(jax.jit(mix)(jnp.asarray(words))), expected)
    host = mix(words)
    assert host.dtype == np.uint32
    np.testing.assert_array_equal(host, expected)


@pytest.mark.parametrize("n", [*SAMPLES, -1, -(1 << 31), 1 << 32, (1 << 40) + 5])
def test_mix_int_takes_the_integer_modulo_2_to_the_32(n):
    out = mix_int(n)
    assert isinstance(out, np.uint32)
    assert int(out) == lowbias32(n & MASK)


def test_split_reads_a_raw_two_word_key_as_threefry_whatever_the_default_implementation():
    raw = jnp.asarray(np.array([7, 0xDEADBEEF], np.uint32))
    threefry = np.asarray(jax.random.split(raw, 3))  # JAX's default implementation: Threefry
    with jax.default_prng_impl("rbg"):
        with pytest.raises(TypeError):  # what JAX does with such a key under "rbg"
            jax.random.split(raw, 3)
        under_rbg = np.asarray(split(raw, 3))
        batched = np.asarray(jax.vmap(lambda k: split(k, 3))(jnp.stack([raw, raw ^ np.uint32(1)])))
    np.testing.assert_array_equal(under_rbg, threefry)
    np.testing.assert_array_equal(batched[0], threefry)
    np.testing.assert_array_equal(batched[1], np.asarray(jax.random.split(raw ^ np.uint32(1), 3)))


def test_split_leaves_typed_keys_and_other_raw_keys_to_jax():
    typed = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(
        np.asarray(jax.random.key_data(split(typed, 2))), np.asarray(jax.random.key_data(jax.random.split(typed, 2)))
    )
    with jax.default_prng_impl("rbg"):
        four = jax.random.PRNGKey(3)  # a raw key of the default implementation's four words
        assert four.shape == (4,)
        np.testing.assert_array_equal(np.asarray(split(four, 2)), np.asarray(jax.random.split(four, 2)))
