"""Range statistics for `fpemu.emulate(..., with_stats=True)`: what one rounding did, counted.

For every rounding site, ``x`` is the exact result of the primitive (in its dtype) and ``y`` the
rounded result. The counts are computed with jnp ops inside the traced computation (they work under
``jit``, ``vmap``, ``scan``...) and on bit patterns wherever zero or subnormals are involved:
XLA:CPU flushes subnormals in float comparisons, so ``x != 0`` would be false for a subnormal ``x``.

Sites of the *max* kind carry a float32 amax (its bits in element 0 of the same int32 vector, so
that every combinator moves them like counts) and merge by maximum: ``site + AMAX`` is the amax of
a training recipe's operand (``"amax"`` beside its counts in the public pytree), ``STATE + name``
the amax a delayed-scaling history records this step (taken out by `fpemu.emulate`). Non-negative
float32 bit patterns order as their values, and NaN's above infinity's, so the maximum of the bits
is the maximum amax with NaN winning.
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


AMAX = "\x00amax"  # suffix: the max-kind site of an operand's amax
STATE = "\x00state:"  # prefix: the max-kind site of a delayed-scaling history's new amax


def zeros() -> jax.Array:
    """The empty count vector (also the empty amax: 0)."""
    return jnp.zeros((len(FIELDS),), jnp.int32)


def is_max_site(site: str) -> bool:
    """Whether ``site`` holds an amax (merged by maximum) rather than counts (merged by sum)."""
    return site.endswith(AMAX) or site.startswith(STATE)


def amax_vector(amax: jax.Array) -> jax.Array:
    """A float32 scalar amax (non-negative or NaN) as a max-kind vector."""
    bits = lax.bitcast_convert_type(jnp.asarray(amax, jnp.float32), jnp.int32)
    # the bits, then zeros: a pad, which XLA fuses into what reads it (``zeros().at[0].set`` was a scatter kernel)
    return lax.pad(lax.reshape(bits, (1,)), np.int32(0), ((0, len(FIELDS) - 1, 0),))


def amax_value(vector: jax.Array) -> jax.Array:
    """The float32 amax of a max-kind vector (or of a stack of them: ``vector[..., 0]``)."""
    return lax.bitcast_convert_type(vector[..., 0], jnp.float32)


def _magnitude_bits(x: jax.Array, container: Format) -> jax.Array:
    bits = lax.bitcast_convert_type(x, jnp.dtype(container.code_dtype))
    return lax.bitwise_and(bits, np.asarray(container.sign_mask ^ ((1 << container.bits) - 1), bits.dtype))


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
    # bound as `lax` calls, as the quantizers are (`fpemu._jax.elementwise`): a statistics site per rounding site
    zero = np.zeros((), mx.dtype)
    if container.has_inf:  # IEEE dtypes: every class is a comparison of magnitude bits
        inf = np.asarray(container.inf_code, mx.dtype)
        finite_x, finite_y, nan_x = lax.lt(mx, inf), lax.lt(my, inf), lax.gt(mx, inf)
        inf_y, nan_y = lax.eq(my, inf), lax.gt(my, inf)
    else:  # float8 containers without infinity: none is infinite
        finite_x, finite_y, nan_x = lax.is_finite(x), lax.is_finite(y), lax.ne(x, x)
        inf_y, nan_y = jnp.zeros(y.shape, jnp.bool_), lax.ne(y, y)
    masks = [
        lax.bitwise_and(finite_x, lax.bitwise_not(finite_y)),
        None,
        lax.bitwise_and(lax.ne(mx, zero), lax.eq(my, zero)),
        None,
        inf_y,
        nan_y,
    ]
    if fmt.max < container.max:  # fmt's max is a value of the container
        max_bits = np.asarray(value_bits(fmt.max, container), mx.dtype)
        masks[1] = lax.bitwise_and(lax.bitwise_and(lax.bitwise_not(nan_x), lax.gt(mx, max_bits)), lax.eq(my, max_bits))
    if fmt.has_subnormals and fmt.min_normal > container.min_subnormal:  # a power of two the container holds
        below_normal = np.asarray(value_bits(fmt.min_normal, container) - 1, my.dtype)
        masks[3] = lax.lt(lax.sub(my, np.ones((), my.dtype)), below_normal)  # 0 < my < normal (0 - 1 wraps around)
    # One reduction for all the counters (XLA compiles one fused loop, not six).
    never = jnp.zeros(mx.shape, jnp.bool_)
    rows = jnp.stack([(never if m is None else m).reshape(-1) for m in masks])
    sums = lax.reduce_sum(rows.astype(jnp.int32), (1,))
    return jnp.concatenate([jnp.full((1,), x.size, jnp.int32), sums])


def as_pytree(totals: dict[str, jax.Array]) -> dict[str, dict[str, jax.Array]]:
    """``{site: int32[len(FIELDS)]}`` -> ``{site: {field: int32 scalar}}`` (the public layout). An
    operand's amax (``site + AMAX``) becomes the float32 field ``"amax"`` of its site; history
    channels (``STATE``) are left out."""
    out = {
        site: {field: vector[..., i] for i, field in enumerate(FIELDS)}
        for site, vector in totals.items()
        if not is_max_site(site)
    }
    for site, vector in totals.items():
        if site.endswith(AMAX):
            out.setdefault(site[: -len(AMAX)], {})["amax"] = amax_value(vector)
    return out


def merge(into: dict[str, jax.Array], other: dict[str, jax.Array]) -> None:
    """Add ``other``'s count vectors to ``into`` (in place), site by site; amax sites take the maximum."""
    for site, vector in other.items():
        if site not in into:
            into[site] = vector
        elif is_max_site(site):
            into[site] = lax.max(into[site], vector)
        else:
            into[site] = lax.add(into[site], vector)


def reduce_stacked(site: str, vector: jax.Array) -> jax.Array:
    """A site's vectors stacked over loop iterations (axis 0), reduced as the site's kind says:
    counts summed, amax values by maximum (for ``scan``'s stacked statistics)."""
    return jnp.max(vector, axis=0) if is_max_site(site) else jnp.sum(vector, axis=0, dtype=jnp.int32)


def all_reduce(site: str, vector: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """A site's vector reduced over mesh axes as its kind says (``psum`` of counts, ``pmax`` of amax)."""
    return lax.pmax(vector, axes) if is_max_site(site) else lax.psum(vector, axes)


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
        values = [int(np.asarray(fields[f]).sum()) for f in FIELDS if f in fields]
        if len(values) != len(FIELDS):
            continue
        if nonzero_only and not any(values[1:]):
            continue
        rows.append([site, *map(str, values)])
    return text_table(rows, ["site", *FIELDS], align="l" + "r" * len(FIELDS), rule=False)
