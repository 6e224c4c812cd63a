"""Counter-based random bits for stochastic rounding: a keyed integer hash of the element index.

``bits[i] = mix(mix(i + k0) ^ k1)`` where ``i`` is the row-major element index, ``(k0, k1)`` are two
32-bit seeds folded from the JAX PRNG key, and ``mix`` is a 32-bit avalanche bijection (xorshift-
multiply, Wellons' "lowbias32" constants). A pure function of (key, index): the same key gives the
same bits whatever the backend, block size or sharding, at a fraction of the cost of
``jax.random.bits`` (no Threefry rounds). It is a statistical generator, not a cryptographic one.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_MAX_ELEMENTS = 1 << 32


# NumPy scalars, not ``jnp.uint32(...)``: the same literals in the program, without creating a JAX array
# for each constant at every trace (a key folded at each of a program's rounding sites and GEMMs)
_SHIFT_16, _SHIFT_15 = np.uint32(16), np.uint32(15)
_MULTIPLIER_1, _MULTIPLIER_2 = np.uint32(0x21F0AAAD), np.uint32(0x735A2D97)


_Words = TypeVar("_Words", jax.Array, np.ndarray)
#: `mix`'s xor, logical right shift and wrapping multiplication of uint32 words, for JAX and for NumPy arrays.
_JAX_OPS = (lax.bitwise_xor, lax.shift_right_logical, lax.mul)
_NUMPY_OPS = (np.bitwise_xor, np.right_shift, np.multiply)


def mix(h: _Words) -> _Words:
    """The 32-bit avalanche bijection (xorshift-multiply, lowbias32) of uint32 ``h``, elementwise.

    ``h`` may be a JAX array or a NumPy uint32 array (then computed on the host, wrapping modulo 2**32
    as JAX does)."""
    # a JAX array through `lax` (jnp's operators trace a jit each: `fpemu._jax.elementwise`), NumPy through its own
    xor, shift, mul = _JAX_OPS if isinstance(h, jax.Array) else _NUMPY_OPS
    h = xor(h, shift(h, _SHIFT_16))
    h = mul(h, _MULTIPLIER_1)
    h = xor(h, shift(h, _SHIFT_15))
    h = mul(h, _MULTIPLIER_2)
    return xor(h, shift(h, _SHIFT_15))


def mix_int(n: int) -> np.uint32:
    """`mix` of the integer ``n`` taken modulo 2**32 (as ``jnp.asarray(n).astype(jnp.uint32)`` takes it),
    on the host: a constant, where a traced ``mix`` of it would add its operations to the program's trace."""
    words: np.ndarray = np.array([int(n) & 0xFFFFFFFF], np.uint32)  # an array: NumPy wraps without warning
    return mix(words)[0]


def seeds_from_key(key) -> jnp.ndarray:
    """Fold a JAX PRNG key (typed, or a legacy uint32 key array) into two uint32 seeds.

    Raises:
      TypeError: if ``key`` is not a PRNG key.
      ValueError: if ``key`` holds more than one key (use ``jax.vmap`` over keys instead).
    """
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key, got a key array of shape {key.shape}; vmap over keys")
        words = jax.random.key_data(key)
    else:
        words = jnp.asarray(key) if isinstance(key, (jax.Array, np.ndarray)) else None  # type: ignore[assignment]  # None only on the error path, which raises below
        if words is None or words.dtype != jnp.uint32 or words.ndim != 1:
            raise TypeError(
                f"key must be a JAX PRNG key (jax.random.key(...) or jax.random.PRNGKey(...)), got {type(key).__name__}"
            )
    words = words.reshape(-1).astype(jnp.uint32)
    h0: Any = np.uint32(0x6A09E667)
    h1: Any = np.uint32(0xBB67AE85)
    for i in range(words.shape[0]):
        h0 = mix(lax.bitwise_xor(h0, words[i]))
        h1 = mix(lax.add(lax.add(h1, words[i]), h0))
    return jnp.stack([h0, h1])


def split(key: Any, n: int) -> Any:
    """``jax.random.split(key, n)``, except that a raw key of two uint32 words splits as a Threefry key whatever
    ``jax_default_prng_impl`` says.

    fpemu derives such keys itself (`fpemu._emulate.rounding.fold_key`: the keys of a GEMM or a rounding
    site), and JAX reads a raw key with the default implementation, which rejects two words under
    ``"rbg"``. Typed keys split with their own implementation, other raw keys as JAX reads them: the same
    keys as ``jax.random.split`` under JAX's default implementation (Threefry).

    Example:
      >>> import jax, numpy as np
      >>> raw = np.array([0, 42], np.uint32)
      >>> with jax.default_prng_impl("rbg"):
      ...     rbg = split(raw, 3)
      >>> bool(np.array_equal(rbg, jax.random.split(raw, 3)))
      True
    """
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and np.shape(key)[-1:] == (2,):
        return jax.random.key_data(jax.random.split(jax.random.wrap_key_data(key, impl="threefry2x32"), n))
    return jax.random.split(key, n)


def random_uint32(seeds: jnp.ndarray, shape: tuple[int, ...], offset=0) -> jnp.ndarray:
    """Uniform uint32 bits for every element of an array of ``shape``, from the element index.

    ``offset`` (an int or a traced integer scalar) is added to the row-major index, for a block of a
    larger array (a Pallas kernel's grid step, a shard).

    Raises:
      ValueError: for arrays of 2**32 elements or more (the index is 32 bits wide).
    """
    size = int(np.prod(shape, dtype=np.int64))
    if size > _MAX_ELEMENTS:
        raise ValueError(f"stochastic rounding supports arrays of at most 2**32 elements, got shape {shape}")
    index = lax.add(lax.iota(jnp.uint32, max(size, 1))[:size].reshape(shape), jnp.asarray(offset).astype(jnp.uint32))
    return hash_index(seeds, index)


def hash_index(seeds: jax.Array | tuple[jax.Array, jax.Array], index: jax.Array) -> jax.Array:
    """The random bits of the elements with these (uint32, row-major, global) indices."""
    return mix(lax.bitwise_xor(mix(lax.add(index, seeds[0])), seeds[1]))
