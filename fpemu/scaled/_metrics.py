"""Quantization error metrics: QSNR in dB and relative errors.

`qsnr` is the one QSNR of fpemu; `qsnr_from_relative_error` is the same quantity from a relative
error already computed on the host (the matmul accuracy benchmark sums in float64 by blocks of rows).

`qsnr` and `relative_error` bind ``lax`` directly, as the quantizers do (`fpemu._jax.elementwise`): the
same equations as ``jnp.sum``, ``jnp.where`` and ``jnp.log10`` bind, without a jitted ``jnp`` function
traced per call (tracing a metric: 4-6 ms -> 1-2 ms on the 2-core machines).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from fpemu._args import axes_arg
from fpemu._jax.elementwise import select

F32 = np.float32
_ORDS = (1, 2, np.inf)


def _pair(x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    for name, a in (("x", x), ("y", y)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be a float array, got dtype {a.dtype}")
    return x.astype(F32), y.astype(F32)


def _sum(v: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    return lax.reduce(v, F32(0), lax.add, axes)  # jnp.sum's reduce_sum


def _ratio(num: jax.Array, den: jax.Array, where_den_zero: float) -> jax.Array:
    """``num / den``, ``where_den_zero`` in place of a zero ``den`` (jnp.where's select)."""
    return lax.div(num, select(lax.eq(den, F32(0)), F32(where_den_zero), den))


def qsnr(x: ArrayLike, y: ArrayLike, *, axis: int | tuple[int, ...] | list[int] | None = None) -> jax.Array:
    """Quantization signal-to-noise ratio in dB: ``10 * log10(sum(x**2) / sum((x - y)**2))``.

    Special values first: a perfect ``y`` gives +inf (also for an all-zero ``x``), an all-zero ``x``
    with an imperfect ``y`` gives -inf, and a NaN anywhere in the reduction gives NaN.

    ``x`` is the reference, ``y`` its quantized version (float arrays of the same shape). Sums run
    over ``axis`` (an axis, a tuple or list of distinct axes, negative ones counted from the end; all
    axes by default) in float32. Higher is better: each bit of precision adds about 6 dB. It equals
    ``qsnr_from_relative_error(relative_error(x, y))`` up to float32 rounding.

    Raises:
      ValueError: ``x`` and ``y`` of different shapes; an axis out of range or named twice.
      TypeError: a non-float ``x`` or ``y``; an axis that is not an int.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> round(float(scaled.qsnr(jnp.array([1.0, 2.0]), jnp.array([1.0, 2.1]))), 2)
      26.99
    """
    x, y = _pair(x, y)
    axes = axes_arg(axis, x.ndim, of=f"x of rank {x.ndim}")
    signal = _sum(lax.mul(x, x), axes)
    noise = _sum(lax.mul(lax.sub(x, y), lax.sub(x, y)), axes)
    ratio = select(lax.eq(noise, F32(0)), F32(np.inf), _ratio(signal, noise, 1))
    return lax.mul(F32(10), lax.mul(lax.log(ratio), F32(1 / np.log(10))))  # jnp.log10


def relative_error(
    x: ArrayLike, y: ArrayLike, *, ord: float = 2, axis: int | tuple[int, ...] | list[int] | None = None
) -> jax.Array:
    """``norm(x - y) / norm(x)`` for ``ord`` 2 (root-sum-square, the default), 1, or ``inf``
    (largest absolute error over the largest magnitude), over ``axis`` (as `qsnr` takes it; all axes by
    default).

    Special values first: 0 when ``y`` equals ``x`` (also over no element); +inf when ``x`` is all
    zeros and ``y`` is not; NaN where the reduction holds a NaN.

    Raises:
      ValueError: ``ord`` other than 1, 2 or inf (a bool included); as `qsnr` for the arrays and ``axis``.
      TypeError: as `qsnr`.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> float(scaled.relative_error(jnp.array([3.0, 4.0]), jnp.array([3.0, 4.5])))
      0.10000000149011612
      >>> float(scaled.relative_error(jnp.array([3.0, 4.0]), jnp.array([3.0, 4.5]), ord=float("inf")))
      0.125
    """
    if (
        isinstance(ord, (bool, np.bool_))
        or not isinstance(ord, (int, float, np.integer, np.floating))
        or ord not in _ORDS
    ):
        raise ValueError(f"ord must be 1, 2 or inf, got {ord!r}")
    x, y = _pair(x, y)
    axes = axes_arg(axis, x.ndim, of=f"x of rank {x.ndim}")
    d = lax.abs(lax.sub(x, y))
    ax = lax.abs(x)
    if ord == 2:
        num, den = lax.sqrt(_sum(lax.mul(d, d), axes)), lax.sqrt(_sum(lax.mul(ax, ax), axes))
    elif ord == 1:
        num, den = _sum(d, axes), _sum(ax, axes)
    else:  # jnp.max(..., initial=0): the maximum, then its maximum with 0
        num, den = (lax.max(F32(0), lax.reduce(v, F32(-np.inf), lax.max, axes)) for v in (d, ax))
    return select(lax.eq(num, F32(0)), F32(0), _ratio(num, den, 0))


def qsnr_from_relative_error(relative_error: float) -> float:
    """The QSNR in dB of a relative error ``||x - y|| / ||x||`` (2-norms): ``-20 * log10(relative_error)``.

    Special values first: 0 gives +inf, +inf (a result with inf or NaN, as the matmul accuracy
    benchmark reports it) gives -inf, NaN gives NaN. For errors measured on the host, in float64
    (`qsnr` measures JAX arrays in float32).

    Raises:
      ValueError: for a negative relative error.

    Example:
      >>> from fpemu import scaled
      >>> scaled.qsnr_from_relative_error(0.01), scaled.qsnr_from_relative_error(0.0)
      (40.0, inf)
    """
    relative_error = float(relative_error)
    if relative_error < 0:
        raise ValueError(f"relative_error must be >= 0 (a ratio of norms), got {relative_error!r}")
    if relative_error == 0.0:
        return math.inf
    if math.isinf(relative_error):
        return -math.inf
    return -20.0 * math.log10(relative_error)
