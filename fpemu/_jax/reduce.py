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
  XLA does not merge the two reductions back into one;
- a reduction whose reduced axes are all at most `RUN` long is not split: it is one kernel, fused
  with the loop that computes its input. So arrays below `SPLIT_MIN_SIZE` elements, and the maxima
  of runs once they are that few, are reduced in steps over axes of at most `RUN` (`_short_axes_max`:
  a longer axis is cut into runs, whose maxima the next step reduces, each step in the other one of
  uint32 and int32 so that XLA does not merge them). The whole maximum is then one kernel where the
  split made three (the magnitudes, the reduce-window, the reduce), each compiled apart: on the digits
  MLP, the fp8_current step compiles 10 kernels fewer (bench/RESULTS_training.md, "seventh session").
  Large arrays keep XLA's split along their other axes: cut into runs there, a 1024 x 1024 column
  maximum ran 6x slower (0.54 -> 3.2 ms).

A maximum is exact in any order: every form gives the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from fpemu._jax.elementwise import pad_zeros

__all__ = ["RUN", "SPLIT_MIN_SIZE", "magnitude_max", "run_max"]

#: The length of the runs `magnitude_max` reduces first.
RUN = 32
#: From this many elements on, `magnitude_max` takes the maxima of runs along the last axis first
#: (`run_max`, vectorised) and leaves other axes to XLA's split; smaller arrays are reduced in steps
#: over axes of at most `RUN` elements (one kernel).
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
        quads = _last_axis_max(u.reshape((*lead, n // run, run // _QUAD, _QUAD)))
        return _last_axis_max(quads)
    return _last_axis_max(u.reshape((*lead, n // run, run)))


def magnitude_max(u: jax.Array, axes: Sequence[int], *, keepdims: bool = True) -> jax.Array:
    """The maximum over ``axes`` (non-negative; kept as axes of size 1 unless ``keepdims`` is false; 0 for
    an empty reduction) of uint32 (or int32) values below 2**31 (magnitude bit patterns, NaN's included),
    in ``u``'s dtype: in runs first where the last axis is among ``axes``, longer than `RUN`, and the
    array has `SPLIT_MIN_SIZE` elements or more; in steps over axes of at most `RUN` elements where the
    array (or its runs' maxima) has fewer.

    Example:
      >>> import jax.numpy as jnp
      >>> u = jnp.arange(2 * SPLIT_MIN_SIZE, dtype=jnp.uint32).reshape(2, -1)
      >>> magnitude_max(u, (0, 1)).tolist(), magnitude_max(u, (1,), keepdims=False).tolist()
      ([[131071]], [65535, 131071])
    """
    axes = tuple(sorted(set(axes)))
    last = u.ndim - 1
    if u.size >= SPLIT_MIN_SIZE and last in axes and u.shape[-1] > RUN:
        n = u.shape[-1]
        padded = -(-n // RUN) * RUN
        if padded != n:  # zeros do not change a maximum
            u = pad_zeros(u, [(0, 0)] * last + [(0, padded - n)])
        return _flip(magnitude_max(_flip(run_max(u, RUN)), axes, keepdims=keepdims), u.dtype)
    if u.size >= SPLIT_MIN_SIZE or u.size == 0 or all(u.shape[a] <= RUN for a in axes):
        out = _max_or_zero(u, axes)
    else:
        out = _short_axes_max(u, axes)
    if not keepdims:
        return out
    return out.reshape(tuple(1 if d in axes else size for d, size in enumerate(u.shape)))


def _flip(u: jax.Array, dtype: Any = None) -> jax.Array:
    """``u`` bitcast to ``dtype``, by default to the other one of uint32 and int32 (the same order
    below 2**31): a reduction of the result is not merged with the one that made ``u``."""
    if dtype is None:
        dtype = jnp.int32 if u.dtype == jnp.uint32 else jnp.uint32
    return u if u.dtype == dtype else lax.bitcast_convert_type(u, dtype)


def _short_axes_max(u: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """The maximum over ``axes`` (not kept) of a non-empty ``u`` by reductions over axes of at most
    `RUN` elements: each reduced axis longer than that is cut into runs of `RUN` (the last one padded
    with zeros), whose maxima the next step reduces, in the other integer type."""
    view: list[int] = []
    pads: list[tuple[int, int]] = []
    reduced: list[int] = []  # axes of the view that this step reduces
    runs_of: list[int] = []  # axes of the view that hold runs, reduced by the next step
    for d, size in enumerate(u.shape):
        if d in axes and size > RUN:
            count = -(-size // RUN)
            pads.append((0, count * RUN - size))
            runs_of.append(len(view))
            reduced.append(len(view) + 1)
            view += [count, RUN]
        else:
            pads.append((0, 0))
            if d in axes:
                reduced.append(len(view))
            view.append(size)
    if any(after for _, after in pads):
        u = pad_zeros(u, pads)
    maxima = _max_or_zero(u.reshape(view), tuple(reduced))
    if not runs_of:
        return maxima
    kept = [a for a in range(len(view)) if a not in reduced]
    return _flip(_short_axes_max(_flip(maxima), tuple(kept.index(a) for a in runs_of)), u.dtype)


def _last_axis_max(u: jax.Array) -> jax.Array:
    """The maximum along the last axis (not kept): ``jnp.max(u, axis=-1)``'s equation, bound directly
    (`fpemu._jax.elementwise` says why)."""
    return lax.reduce_max(u, (u.ndim - 1,))


def _max_or_zero(u: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """The maximum over ``axes`` (not kept), 0 for an empty reduction: ``jnp.max(u, axis=axes,
    initial=0)``'s result, bound directly (an unsigned maximum starts at 0: no `max` with 0 needed)."""
    maxima = lax.reduce_max(u, axes)
    return maxima if jnp.issubdtype(u.dtype, jnp.unsignedinteger) else lax.max(jnp.zeros((), u.dtype), maxima)
