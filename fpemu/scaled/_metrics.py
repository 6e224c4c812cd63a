"""Quantization error metrics: QSNR in dB and relative errors."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

F32 = jnp.float32


def _pair(x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    for name, a in (("x", x), ("y", y)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be a float array, got dtype {a.dtype}")
    return x.astype(F32), y.astype(F32)


def qsnr(x: Any, y: Any, *, axis: int | tuple[int, ...] | None = None) -> jax.Array:
    """Quantization signal-to-noise ratio in dB: ``10 * log10(sum(x**2) / sum((x - y)**2))``.

    ``x`` is the reference, ``y`` its quantized version. Sums run over ``axis`` (all axes by
    default) in float32. A perfect ``y`` gives +inf (also for an all-zero ``x``); a NaN anywhere in
    the reduction gives NaN. Higher is better: each bit of precision adds about 6 dB.

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


def relative_error(x: Any, y: Any, *, ord: float = 2, axis: int | tuple[int, ...] | None = None) -> jax.Array:
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
