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
from jax import lax

from fpemu._args import axis_arg, int_arg, key_arg
from fpemu._engine import rng
from fpemu._jax.elementwise import select
from fpemu._ops.fusion import computed_once, materialize
from fpemu._training.layout import Contraction
from fpemu._training.operands import operand_arg

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
    return select(lax.eq(lax.shift_right_logical(bits, np.uint32(31)), np.uint32(1)), np.float32(-1), np.float32(1))


def _walsh_hadamard(v: jax.Array, n: int, lanes: int) -> jax.Array:
    """``H @ block`` for each row of ``v`` (shape ``(rows, n * lanes)``: a block of ``n`` elements, each
    ``lanes`` wide, row-major), in float32 butterflies: stage ``h`` maps each pair ``(a, b)`` of elements
    ``h`` apart (within runs of ``2h``) to ``(a + b, a - b)``, lane by lane.

    Stages ``h`` and ``2h`` run in one pass where both remain (each of the four outputs repeats the
    additions of stage ``h`` it needs: the same operations, half the passes over memory). Every
    element sees the same additions in the same order whatever ``lanes`` is; the lanes (the
    dimensions after the transformed axis) are what XLA vectorises."""
    rows = v.shape[0]
    h = 1
    while h < n:
        if 4 * h <= n:  # stages h and 2h: runs of 4h as quarters q0..q3
            q = v.reshape(rows * (n // (4 * h)), 4, h * lanes)
            # lax.add, lax.sub: jnp's operators trace a jit each (`fpemu._jax.elementwise`)
            p0, p1 = lax.add(q[:, 0], q[:, 1]), lax.sub(q[:, 0], q[:, 1])  # stage h
            p2, p3 = lax.add(q[:, 2], q[:, 3]), lax.sub(q[:, 2], q[:, 3])
            v = jnp.stack([lax.add(p0, p2), lax.add(p1, p3), lax.sub(p0, p2), lax.sub(p1, p3)], axis=1)  # stage 2h
            h *= 4
        else:
            pairs = v.reshape(rows * (n // (2 * h)), 2, h * lanes)
            a, b = pairs[:, 0], pairs[:, 1]
            v = jnp.stack([lax.add(a, b), lax.sub(a, b)], axis=1)
            h *= 2
        v = v.reshape(rows, n * lanes)
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
    axis = axis_arg(axis, x.ndim, of=f"x of shape {x.shape}")
    _check_key(key, size)
    return _hadamard(x, key, None, axis=axis, size=size)


def hadamard_along(
    x: jax.Array, dims: tuple[int, ...], size: int, key: jax.Array | None, *, probe: jax.Array | None = None
) -> jax.Array:
    """`hadamard` along an operand's contracting dimensions ``dims``, merged into one axis (as
    `fpemu._training.layout.Contraction` merges them): how a recipe's GEMM transforms each operand;
    ``probe``: the array its materializations read for their predicate (None: each its own)."""
    c = Contraction(tuple(x.shape), dims)
    y, axis = c.group(x)
    return c.ungroup(_hadamard(y, key, probe, axis=axis, size=size))


#: Below this many elements after the transformed axis, the butterflies run on a transposed copy
#: (the block's elements leading, everything else as lanes): XLA:CPU vectorises long lanes only.
_LANES = 16


@functools.partial(jax.jit, static_argnames=("axis", "size"))
def _hadamard(x: jax.Array, key: jax.Array | None, probe: jax.Array | None, *, axis: int, size: int) -> jax.Array:
    # the signs computed once: XLA:CPU would fuse the hash of the key into every loop that reads them,
    # hashing each element's sign again (more work, and more code to compile)
    d = _signs(key, size) if key is None else materialize((_signs(key, size),), probe)[0]
    shape = x.shape
    n = shape[axis]
    pre, post = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    full, blocks = n // size * size, pre * (n // size)
    # the input computed once: each butterfly output reads several inputs, and XLA would recompute the
    # input's producers (a backward pass's elementwise chain) inside the butterfly loop for each of them
    v = computed_once(x.astype(jnp.float32).reshape(pre, n, post), probe=probe)
    head = lax.mul((v[:, :full] if full != n else v).reshape(blocks, size, post), d.reshape(1, size, 1))
    norm = np.float32(1 / math.sqrt(size))
    if post >= _LANES:  # in place: each block's elements are rows of `post` lanes
        out = lax.mul(_walsh_hadamard(head.reshape(blocks, size * post), size, post), norm)
    else:  # transposed: the blocks' elements leading, all blocks side by side as lanes
        lanes = head.transpose(1, 0, 2).reshape(1, size * blocks * post)
        out = lax.mul(_walsh_hadamard(lanes, size, blocks * post), norm)
        out = out.reshape(size, blocks, post).transpose(1, 0, 2)
    out = out.reshape(pre, full, post)
    if full != n:
        out = jnp.concatenate([out, v[:, full:]], axis=1)
    return out.reshape(shape).astype(x.dtype)
