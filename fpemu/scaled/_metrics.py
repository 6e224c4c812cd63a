"""Quantization error metrics: QSNR in dB and relative errors.

`qsnr` is the one QSNR of fpemu; `qsnr_from_relative_error` is the same quantity from a relative
error already computed on the host (the matmul accuracy benchmark sums in float64 by blocks of rows).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

F32 = jnp.float32


def _pair(x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    for name, a in (("x", x), ("y", y)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be a float array, got dtype {a.dtype}")
    return x.astype(F32), y.astype(F32)


def qsnr(x: ArrayLike, y: ArrayLike, *, axis: int | tuple[int, ...] | None = None) -> jax.Array:
    """Quantization signal-to-noise ratio in dB: ``10 * log10(sum(x**2) / sum((x - y)**2))``.

    Special values first: a perfect ``y`` gives +inf (also for an all-zero ``x``), an all-zero ``x``
    with an imperfect ``y`` gives -inf, and a NaN anywhere in the reduction gives NaN.

    ``x`` is the reference, ``y`` its quantized version (float arrays of the same shape). Sums run
    over ``axis`` (all axes by default) in float32. Higher is better: each bit of precision adds
    about 6 dB. It equals ``qsnr_from_relative_error(relative_error(x, y))`` up to float32 rounding.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> round(float(scaled.qsnr(jnp.array([1.0, 2.0]), jnp.array([1.0, 2.1]))), 2)
      26.99
    """
    x, y = _pair(x, y)
    signal = jnp.sum(x * x, axis=axis)
    noise = jnp.sum((x - y) * (x - y), axis=axis)
    ratio = jnp.where(noise == 0, F32(jnp.inf), signal / jnp.where(noise == 0, F32(1), noise))
    return F32(10) * jnp.log10(ratio)


def relative_error(
    x: ArrayLike, y: ArrayLike, *, ord: float = 2, axis: int | tuple[int, ...] | None = None
) -> jax.Array:
    """``norm(x - y) / norm(x)`` for ``ord`` 2 (root-sum-square, the default), 1, or ``inf``
    (largest absolute error over the largest magnitude), over ``axis`` (all axes by default).

    0 when ``y`` equals ``x``; +inf when ``x`` is all zeros and ``y`` is not.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> float(scaled.relative_error(jnp.array([3.0, 4.0]), jnp.array([3.0, 4.5])))
      0.10000000149011612
      >>> float(scaled.relative_error(jnp.array([3.0, 4.0]), jnp.array([3.0, 4.5]), ord=float("inf")))
      0.125
    """
    x, y = _pair(x, y)
    d = jnp.abs(x - y)
    ax = jnp.abs(x)
    if ord == 2:
        num, den = jnp.sqrt(jnp.sum(d * d, axis=axis)), jnp.sqrt(jnp.sum(ax * ax, axis=axis))
    elif ord == 1:
        num, den = jnp.sum(d, axis=axis), jnp.sum(ax, axis=axis)
    elif ord == np.inf:
        num, den = jnp.max(d, axis=axis, initial=F32(0)), jnp.max(ax, axis=axis, initial=F32(0))
    else:
        raise ValueError(f"ord must be 1, 2 or inf, got {ord!r}")
    return jnp.where(num == 0, F32(0), num / jnp.where(den == 0, F32(0), den))


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
