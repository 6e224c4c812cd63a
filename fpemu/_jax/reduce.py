"""Maxima of float32 magnitudes, as their uint32 bit patterns, in the shape XLA:CPU compiles best.

Quantizers take the largest magnitude of a block, a row or a whole tensor on the bit patterns
(``bits & 0x7FFFFFFF``: exact on every backend, subnormals included, NaN above infinity). How the
reduction is written decides the program XLA:CPU makes of it:

- a reduction of 32 consecutive elements runs as a scalar loop; the maximum of runs of 4, then of
  those, is vectorised (`run_max`);
- a long reduction (a row of 1024, a whole tensor) is split by XLA into a reduce-window and a
  reduce, and the reduce-window's input is computed apart: the magnitudes become a uint32 array of
  the operand's size (4 MiB for a 1024 x 1024 float32 operand), written and read once more. On a
  training step that array can push XLA's buffer of intermediate values over glibc's mmap threshold,
  which then costs a page fault per 4 KiB at every call (bench/RESULTS_training.md, 2026-11-29).
  `magnitude_max` takes the maxima of runs of `RUN` along the last axis first, in the loop that
  computes the magnitudes, then the maximum of those, as int32 (the same order below 2**31), so that
  XLA does not merge the two reductions back into one.

A maximum is exact in any order: every form gives the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["RUN", "SPLIT_MIN_SIZE", "magnitude_max", "run_max"]

#: The length of the runs `magnitude_max` reduces first.
RUN = 32
#: Arrays of fewer elements are reduced in one step: XLA keeps them in cache, and the two steps would
#: only add instructions to compile.
SPLIT_MIN_SIZE = 1 << 16
_QUAD = 4


def run_max(u: jax.Array, run: int) -> jax.Array:
    """The maxima of consecutive runs of ``run`` elements along ``u``'s last axis, whose length ``run``
    divides (uint32 values; the last axis becomes the runs): of runs of 4 first where ``run`` is a
    multiple of 4 above 4.

    Example:
      >>> import jax.numpy as jnp
      >>> run_max(jnp.arange(16, dtype=jnp.uint32).reshape(2, 8), 4).tolist()
      [[3, 7], [11, 15]]
    """
    *lead, n = u.shape
    assert n % run == 0, (u.shape, run)
    if run % _QUAD == 0 and run > _QUAD:
        quads = jnp.max(u.reshape((*lead, n // run, run // _QUAD, _QUAD)), axis=-1)
        return jnp.max(quads, axis=-1)
    return jnp.max(u.reshape((*lead, n // run, run)), axis=-1)


def magnitude_max(u: jax.Array, axes: Sequence[int]) -> jax.Array:
    """The maximum over ``axes`` (non-negative, keepdims; 0 for an empty reduction) of uint32 values
    below 2**31 (magnitude bit patterns, NaN's included): in runs first where the last axis is among
    ``axes``, longer than `RUN`, and the array has `SPLIT_MIN_SIZE` elements or more.

    Example:
      >>> import jax.numpy as jnp
      >>> u = jnp.arange(2 * SPLIT_MIN_SIZE, dtype=jnp.uint32).reshape(2, -1)
      >>> magnitude_max(u, (0, 1)).tolist(), magnitude_max(u, (1,)).ravel().tolist()
      ([[131071]], [65535, 131071])
    """
    axes = tuple(axes)
    last = u.ndim - 1
    if last not in axes or u.shape[-1] <= RUN or u.size < SPLIT_MIN_SIZE:
        return jnp.max(u, axis=axes, keepdims=True, initial=jnp.uint32(0))
    n = u.shape[-1]
    padded = -(-n // RUN) * RUN
    if padded != n:  # zeros do not change a maximum
        u = jnp.pad(u, [(0, 0)] * last + [(0, padded - n)])
    runs = lax.bitcast_convert_type(run_max(u, RUN), jnp.int32)
    return lax.bitcast_convert_type(jnp.max(runs, axis=axes, keepdims=True, initial=jnp.int32(0)), jnp.uint32)
