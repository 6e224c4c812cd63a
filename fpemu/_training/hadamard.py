"""The random Hadamard transform (RHT) of NVFP4 training: sign flips, then a normalised Walsh-Hadamard.

``hadamard(x, axis, size, key)`` cuts ``axis`` into blocks of ``size`` and maps each block ``v`` to
``H @ (d * v) / sqrt(size)``, with ``H`` the Sylvester Hadamard matrix of order ``size``
(``H_1 = [1]``, ``H_2n = [[H_n, H_n], [H_n, -H_n]]``) and ``d`` a vector of ±1 drawn from ``key``.
The map ``Q = H diag(d) / sqrt(size)`` is orthogonal (``Q^T Q = I``), so applying it to both
operands of a GEMM along their contraction leaves the exact product unchanged, while it spreads an
outlier of one element over the whole block (NVIDIA, "Pretraining Large Language Models with
NVFP4", 2025).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._args import int_arg, key_arg
from fpemu._engine import rng
from fpemu._training.quantizer import operand_arg

__all__ = ["TE_WGRAD_SIGNS", "hadamard", "hadamard_signs", "hadamard_size_arg"]

#: Transformer Engine's fixed sign vector of its 16-point wgrad RHT (``get_wgrad_sign_vector``),
#: used when no key is given.
TE_WGRAD_SIGNS: tuple[int, ...] = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def hadamard_size_arg(size: Any, name: str = "size") -> int:
    """A Hadamard size: a power of two, at least 2."""
    n = int_arg(size, name, minimum=2)
    if n & (n - 1):
        raise ValueError(f"{name} must be a power of two (2, 4, 8, 16, ...), got {n}")
    return n


def hadamard_signs(key: jax.Array | None, size: int) -> jax.Array:
    """The float32 sign vector ``d`` (±1, shape ``(size,)``) of the transform with ``key``.

    ``d[i] = -1`` where the top bit of ``fpemu.stochastic_bits(key, (size,))[i]`` (the counter-based
    hash of the element index) is set; the same key gives the same signs on every backend. With
    ``key=None``: Transformer Engine's fixed vector `TE_WGRAD_SIGNS` (``size=16`` only).

    Example:
      >>> hadamard_signs(None, 16)[:4].tolist()
      [1.0, 1.0, 1.0, -1.0]
    """
    size = hadamard_size_arg(size)
    _check_key(key, size)
    return _signs(key, size)


def _check_key(key: jax.Array | None, size: int) -> None:
    if key is None:
        if size != len(TE_WGRAD_SIGNS):
            raise ValueError(
                f"a Hadamard transform of size {size} needs key=jax.random.key(...) for its random signs "
                f"(without a key, Transformer Engine's fixed signs exist for size {len(TE_WGRAD_SIGNS)} only)"
            )
        return
    key_arg(key, True, "key", what="a random Hadamard transform")


def _signs(key: jax.Array | None, size: int) -> jax.Array:
    if key is None:
        return jnp.asarray(np.array(TE_WGRAD_SIGNS, np.float32))
    bits = rng.random_uint32(rng.seeds_from_key(key), (size,))
    return jnp.where((bits >> jnp.uint32(31)) == jnp.uint32(1), jnp.float32(-1), jnp.float32(1))


def _walsh_hadamard(v: jax.Array) -> jax.Array:
    """``v @ H`` (= ``H @ v`` per row, H symmetric) over the last axis of length n, in float32 butterflies."""
    n = v.shape[-1]
    lead = v.shape[:-1]
    h = 1
    while h < n:
        pairs = v.reshape(lead + (n // (2 * h), 2, h))
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        v = jnp.stack([a + b, a - b], axis=-2).reshape(lead + (n,))
        h *= 2
    return v


def hadamard(x: Any, axis: int, size: int, key: jax.Array | None) -> jax.Array:
    """The random Hadamard transform of ``x`` in blocks of ``size`` along ``axis``, in ``x``'s dtype.

    Special values first: a NaN or ±inf element makes its whole block NaN (or ±inf where the
    infinities do not meet with opposite signs), as the sums say; zeros stay zero.

    Each full block ``v`` of ``size`` consecutive elements along ``axis`` becomes
    ``H @ (d * v) * fl(1 / sqrt(size))`` (see the module docstring; ``d`` from `hadamard_signs`),
    computed in float32 with ``log2(size)`` butterfly stages (each addition rounded to float32,
    exact while the partial sums fit) and one final multiplication by ``float32(1 / sqrt(size))``
    (exact for sizes that are powers of 4, such as 16), then rounded to ``x``'s dtype. A last block shorter than ``size`` is
    left as it is, which keeps the map orthogonal. The same key gives the same transform.

    Args:
      x: float16, bfloat16 or float32 array.
      axis: the axis to transform (negative from the end).
      size: the block size, a power of two (16 for NVFP4).
      key: a JAX PRNG key for the signs, or None for Transformer Engine's fixed signs (size 16).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jnp.zeros((2, 16)).at[0, 3].set(8.0)                 # an outlier...
      >>> y = hadamard(x, 1, 16, jax.random.key(0))
      >>> sorted(set(jnp.abs(y[0]).tolist()))                      # ...spread over its block
      [2.0]
      >>> float((y ** 2).sum())                                    # orthogonal: the norm is kept
      64.0
    """
    x = operand_arg(x, "x")
    size = hadamard_size_arg(size)
    axis = int_arg(axis, "axis")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x of shape {x.shape}")
    _check_key(key, size)
    return _hadamard(x, key, axis=axis % x.ndim, size=size)


@functools.partial(jax.jit, static_argnames=("axis", "size"))
def _hadamard(x: jax.Array, key: jax.Array | None, *, axis: int, size: int) -> jax.Array:
    d = _signs(key, size)
    moved = jnp.moveaxis(x, axis, -1).astype(jnp.float32)
    n = moved.shape[-1]
    full = n // size * size
    head = moved[..., :full].reshape(moved.shape[:-1] + (n // size, size))
    head = head * d.reshape((1,) * (head.ndim - 1) + (size,))
    norm = jnp.float32(1 / math.sqrt(size))
    out = (_walsh_hadamard(head) * norm).reshape(moved.shape[:-1] + (full,))
    if full != n:
        out = jnp.concatenate([out, moved[..., full:]], axis=-1)
    return jnp.moveaxis(out.astype(x.dtype), -1, axis)
