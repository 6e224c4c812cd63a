"""Range statistics for `fpemu.emulate(..., with_stats=True)`: what one rounding did, counted.

For every rounding site, ``x`` is the exact result of the primitive (in its dtype) and ``y`` the
rounded result. The counts are computed with jnp ops inside the traced computation (they work under
``jit``, ``vmap``, ``scan``...) and on bit patterns wherever zero or subnormals are involved:
XLA:CPU flushes subnormals in float comparisons, so ``x != 0`` would be false for a subnormal ``x``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import bool_arg
from fpemu._core.format import Format
from fpemu._core.registry import get_format
from fpemu._engine.convert import value_bits
from fpemu._text import text_table

# The counters, in the order of the int32 vector kept per site. Each is a number of elements; docs/emulate.md
# (Statistics) says what each counts.
FIELDS: tuple[str, ...] = ("elements", "overflow", "saturated", "underflow", "subnormal", "inf", "nan")


def zeros() -> jax.Array:
    """The empty count vector."""
    return jnp.zeros((len(FIELDS),), jnp.int32)


def _magnitude_bits(x: jax.Array, container: Format) -> jax.Array:
    bits = lax.bitcast_convert_type(x, jnp.dtype(container.code_dtype))
    return bits & jnp.asarray(container.sign_mask ^ ((1 << container.bits) - 1), bits.dtype)


def counts(x: jax.Array, y: jax.Array, fmt: Format) -> jax.Array:
    """The int32 vector of `FIELDS` for the rounding ``x -> y`` into ``fmt`` (same shape and dtype).

    Either ``fmt``'s values fit ``x``'s dtype (a real rounding) or the dtype's values fit ``fmt``
    (the result is ``x`` unchanged); `fpemu.emulate` raises before any other pairing reaches here.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> from fpemu._emulate.stats import FIELDS, counts
      >>> x = jnp.array([1.0, 500.0, 1e-4, 2.0**-8, jnp.nan, -jnp.inf], jnp.float32)
      >>> y = fpemu.quantize(x, "e4m3fn")
      >>> dict(zip(FIELDS, counts(x, y, fpemu.get_format("e4m3fn")).tolist()))
      {'elements': 6, 'overflow': 1, 'saturated': 0, 'underflow': 1, 'subnormal': 1, 'inf': 0, 'nan': 3}
    """
    container = get_format(x.dtype)
    mx = _magnitude_bits(x, container)
    my = _magnitude_bits(y, container)
    if container.has_inf:  # IEEE dtypes: every class is a comparison of magnitude bits
        inf = jnp.asarray(container.inf_code, mx.dtype)
        finite_x, finite_y, nan_x = mx < inf, my < inf, mx > inf
        inf_y, nan_y = my == inf, my > inf
    else:  # float8 containers without infinity
        finite_x, finite_y, nan_x = jnp.isfinite(x), jnp.isfinite(y), jnp.isnan(x)
        inf_y, nan_y = jnp.isinf(y), jnp.isnan(y)
    masks = [finite_x & ~finite_y, None, (mx != 0) & (my == 0), None, inf_y, nan_y]
    if fmt.max < container.max:  # fmt's max is a value of the container
        max_bits = jnp.asarray(value_bits(fmt.max, container), mx.dtype)
        masks[1] = ~nan_x & (mx > max_bits) & (my == max_bits)
    if fmt.has_subnormals and fmt.min_normal > container.min_subnormal:  # a power of two the container holds
        normal_bits = jnp.asarray(value_bits(fmt.min_normal, container), my.dtype)
        masks[3] = (my - jnp.ones((), my.dtype)) < (normal_bits - jnp.ones((), my.dtype))  # 0 < my < normal
    # One reduction for all the counters (XLA compiles one fused loop, not six).
    never = jnp.zeros(mx.shape, jnp.bool_)
    rows = jnp.stack([(never if m is None else m).reshape(-1) for m in masks])
    sums = jnp.sum(rows.astype(jnp.int32), axis=1, dtype=jnp.int32)
    return jnp.concatenate([jnp.full((1,), x.size, jnp.int32), sums])


def as_pytree(totals: dict[str, jax.Array]) -> dict[str, dict[str, jax.Array]]:
    """``{site: int32[len(FIELDS)]}`` -> ``{site: {field: int32 scalar}}`` (the public layout)."""
    return {site: {field: vector[..., i] for i, field in enumerate(FIELDS)} for site, vector in totals.items()}


def merge(into: dict[str, jax.Array], other: dict[str, jax.Array]) -> None:
    """Add ``other``'s count vectors to ``into`` (in place), site by site."""
    for site, vector in other.items():
        into[site] = into[site] + vector if site in into else vector


def summary(stats: dict[str, dict[str, jax.Array]], *, nonzero_only: bool = True) -> str:
    """A plain-text table of a stats pytree, one row per site (rows with only ``elements`` dropped
    when ``nonzero_only``). Public as `fpemu.stats_summary`.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> f = fpemu.emulate(lambda x: x * 300.0, "e4m3fn", with_stats=True)
      >>> _, stats = f(jnp.array([1.0, 2.0]))
      >>> print(fpemu.stats_summary(stats))
      site  elements  overflow  saturated  underflow  subnormal  inf  nan
      mul          2         1          0          0          0    0    1
    """
    nonzero_only = bool_arg(nonzero_only, "nonzero_only")
    rows = []
    for site, fields in stats.items():
        values = [int(np.asarray(fields[f]).sum()) for f in FIELDS]
        if nonzero_only and not any(values[1:]):
            continue
        rows.append([site, *map(str, values)])
    return text_table(rows, ["site", *FIELDS], align="l" + "r" * len(FIELDS), rule=False)
