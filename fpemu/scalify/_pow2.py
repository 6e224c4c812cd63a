"""Powers of two: split a value into ``scale * mantissa`` and round scales to powers of two.

Every function here works on NumPy values (and returns NumPy values: they stay static while a
function is traced, so scales computed from constants fold away) and on JAX arrays. The work is
done on the bits of float32 (float64 for float64 input), so float16 and bfloat16 subnormals
decompose exactly. float32 subnormals have no float32 power-of-two exponent field: their scale is 0
(as in jax-scalify).
"""

from __future__ import annotations

import enum
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import key_arg
from fpemu._engine.rng import random_uint32, seeds_from_key
from fpemu.scalify._arith import bitwise_and, is_numpy

__all__ = [
    "Pow2RoundMode",
    "get_mantissa",
    "pow2_decompose",
    "pow2_round",
    "pow2_round_down",
    "pow2_round_up",
]


class Pow2RoundMode(enum.IntEnum):
    """How a scale is rounded to a power of two.

    ``NONE``: not rounded. ``DOWN`` (the default): to the power of two at or below (the exponent of
    the value). ``UP``: to the power of two at or above (a power of two stays itself).
    ``STOCHASTIC``: down or up with probabilities that make the expected scale the value itself
    (``v = m * 2**e`` with ``m`` in [1, 2) goes up with probability ``m - 1``), from a key.
    """

    NONE = 0
    DOWN = 1
    UP = 2
    STOCHASTIC = 3


# (float dtype, same-width unsigned int dtype, exponent mask, mantissa mask, smallest normal)
_F32 = (np.dtype(np.float32), np.dtype(np.uint32), np.uint32(0x7F800000), np.uint32(0x007FFFFF))
_F64 = (
    np.dtype(np.float64),
    np.dtype(np.uint64),
    np.uint64(0x7FF0000000000000),
    np.uint64(0x000FFFFFFFFFFFFF),
)


def _api(*values: Any) -> Any:
    return np if all(is_numpy(v) for v in values) else jnp


def _float_arg(value: Any, name: str) -> Any:
    if type(value) is float:
        value = np.float32(value)
    if not (is_numpy(value) or isinstance(value, jax.Array)):
        value = np.asarray(value)
    if not jnp.issubdtype(value.dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating-point array or scalar, got dtype {value.dtype}")
    return value


def _work(dtype: Any) -> tuple:
    return _F64 if np.dtype(dtype) == np.float64 else _F32


def _bits(value: Any, work: tuple) -> tuple[Any, Any]:
    """``value`` in the work dtype, and its bits (same shape, unsigned)."""
    xp = _api(value)
    wide = value.astype(work[0])
    if xp is np:
        return wide, np.asarray(wide).view(work[1])
    return wide, jax.lax.bitcast_convert_type(wide, work[1])


def _from_bits(bits: Any, work: tuple) -> Any:
    if is_numpy(bits):
        return np.asarray(bits).view(work[0])
    return jax.lax.bitcast_convert_type(bits, work[0])


def _down(value: Any) -> Any:
    """``|value|`` rounded down to a power of two, in the work dtype (0 -> 0, inf and NaN -> inf)."""
    work = _work(value.dtype)
    _, bits = _bits(value, work)
    return _from_bits(bitwise_and(bits, work[2]), work)


def _stochastic_up(value: Any, key: Any) -> Any:
    """Whether each ``|value|`` rounds up under stochastic pow2 rounding (its mantissa bits beat random bits)."""
    work = _work(value.dtype)
    _, bits = _bits(jnp.asarray(value), work)
    fraction = lax.bitwise_and(bits, work[3])
    random = random_uint32(seeds_from_key(key), jnp.shape(value))
    if work is _F64:  # compare the 32 leading fraction bits (of 52)
        return lax.lt(random, lax.shift_right_logical(fraction, np.uint64(20)).astype(jnp.uint32))
    return lax.lt(lax.shift_right_logical(random, np.uint32(9)), fraction)


# Bits of the reciprocal of a power of two: (2 * bias) << mantissa bits, minus the power's bits.
_RECIPROCAL_BASE: dict[np.dtype, Any] = {
    np.dtype(np.float32): np.uint32(254 << 23),
    np.dtype(np.float64): np.uint64(2046 << 52),
}


def pow2_divide(num: Any, den: Any) -> Any:
    """``num / den`` in ``den``'s dtype, bit for bit as the division, without dividing: for ``den``
    a JAX scalar that is 0, +inf or a positive power of two (a scale rounded by `pow2_round` in a
    power-of-two mode; other values give wrong results).

    ``den = 0`` gives 0 (any ``num``: a zero scale never makes a NaN, as `safe_div`); ``den = inf``
    gives ``num * 0`` (±0, or NaN for an infinite or NaN ``num``, as the division); NaN ``num``
    gives NaN; a quotient beyond the dtype's range overflows to ±inf or underflows (to a subnormal,
    or to 0 where the backend flushes subnormals) exactly as the division does.

    The quotient is ``num`` times the reciprocal ``2**-e``, built from the bits of ``den`` (in
    float32, float64 for float64): an exact product rounded once to ``den``'s dtype. For the largest
    power (``2**127`` in float32), whose reciprocal is subnormal, ``num`` is halved first (exact
    unless the quotient is 0 anyway).

    Why: a division is an "expensive" op to XLA, which gives every scalar division with several
    users a kernel of its own; multiplies and bit operations are fused into the fusions that use
    them.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu.scalify._pow2 import pow2_divide
      >>> [float(pow2_divide(jnp.float32(3), jnp.float32(d))) for d in (4, 0, jnp.inf)]
      [0.75, 0.0, 0.0]
      >>> float(pow2_divide(jnp.float32(3), jnp.float32(2.0**127))) == 3 * 2.0**-127
      True
    """
    den = jnp.asarray(den)
    work = _work(den.dtype)
    wide, bits = _bits(den, work)
    top = lax.eq(bits, _RECIPROCAL_BASE[work[0]])  # 2**127: its reciprocal is not a normal number
    smallest = work[1].type(1 << (23 if work is _F32 else 52))  # bits of the smallest normal power
    inverse = _from_bits(lax.select(top, smallest, lax.sub(_RECIPROCAL_BASE[work[0]], bits)), work)
    zero = lax.full_like(wide, 0)
    inverse = lax.select(lax.eq(bits, work[2]), zero, inverse)  # den = inf: num * 0
    half = lax.select(top, lax.full_like(wide, 0.5), lax.full_like(wide, 1))
    quotient = lax.mul(lax.mul(jnp.asarray(num).astype(den.dtype).astype(work[0]), half), inverse)
    return lax.select(lax.eq(bits, lax.full_like(bits, 0)), zero, quotient).astype(den.dtype)


def pow2_round_down(val: Any) -> Any:
    """``|val|`` rounded down to a power of two, in ``val``'s dtype.

    0 gives 0, ±inf and NaN give inf; 2.1 -> 2, 0.3 -> 0.25, 65500 -> 32768, and float16 subnormals
    stay themselves (2**-24 -> 2**-24). NumPy in, NumPy out.
    """
    val = _float_arg(val, "val")
    return _down(val).astype(val.dtype)


def pow2_round_up(val: Any) -> Any:
    """``|val|`` rounded up to a power of two, in ``val``'s dtype: powers of two stay themselves
    (jax-scalify doubles them), 2.1 -> 4, 17000 -> 32768; may overflow to inf; 0 -> 0, inf and NaN -> inf."""
    val = _float_arg(val, "val")
    down = _down(val)
    if is_numpy(down):
        return np.where(down == np.abs(val.astype(down.dtype)), down, down * down.dtype.type(2)).astype(val.dtype)
    exact = lax.eq(down, lax.abs(val.astype(down.dtype)))
    return lax.select(exact, down, lax.add(down, down)).astype(val.dtype)


def pow2_round(val: Any, mode: Pow2RoundMode = Pow2RoundMode.DOWN, *, key: Any = None) -> Any:
    """``val`` rounded to a power of two as ``mode`` says (`Pow2RoundMode`), in ``val``'s dtype.

    ``NONE`` returns ``val`` unchanged (with its sign); the other modes round ``|val|``.
    ``STOCHASTIC`` needs ``key`` (a JAX PRNG key) and returns a JAX array; the same key gives
    the same result.

    Example:
      >>> import numpy as np
      >>> from fpemu.scalify.core import pow2_round, Pow2RoundMode
      >>> [float(pow2_round(np.float32(v), m)) for v, m in [(3.0, Pow2RoundMode.DOWN), (3.0, Pow2RoundMode.UP), (4.0, Pow2RoundMode.UP)]]
      [2.0, 4.0, 4.0]
    """
    mode = pow2_mode_arg(mode)
    stochastic = mode == Pow2RoundMode.STOCHASTIC
    key_arg(key, stochastic, what=f"mode=Pow2RoundMode.{mode.name}")
    if mode == Pow2RoundMode.NONE:
        return val
    if mode == Pow2RoundMode.DOWN:
        return pow2_round_down(val)
    if mode == Pow2RoundMode.UP:
        return pow2_round_up(val)
    val = jnp.asarray(_float_arg(val, "val"))
    down = _down(val)
    return lax.select(_stochastic_up(val, key), lax.mul(down, down.dtype.type(2)), down).astype(val.dtype)


def pow2_mode_arg(mode: Any, name: str = "mode") -> Pow2RoundMode:
    """A `Pow2RoundMode` (or its name or value); the error lists the valid ones."""
    if isinstance(mode, str) and mode.upper() in Pow2RoundMode.__members__:
        return Pow2RoundMode[mode.upper()]
    try:
        return Pow2RoundMode(mode)
    except ValueError:
        names = ", ".join(Pow2RoundMode.__members__)
        raise ValueError(f"{name} must be a Pow2RoundMode ({names}), got {mode!r}") from None


def pow2_decompose(
    vin: Any, scale_dtype: Any = None, mode: Pow2RoundMode = Pow2RoundMode.DOWN, *, key: Any = None
) -> tuple[Any, Any]:
    """``(scale, mantissa)`` with ``vin == scale * mantissa``, ``scale`` a power of two (``|vin|``
    rounded by ``mode``) in ``scale_dtype`` (default ``vin``'s), ``mantissa`` in ``vin``'s dtype.

    With ``DOWN`` the mantissa is in [1, 2) (with ``vin``'s sign). 0 gives (0, 0); ±inf gives
    (inf, ±inf); NaN gives (inf, NaN). Computed in float32 (float64 for float64), so float16
    subnormals decompose exactly with a float32 scale. ``NONE`` is not a power-of-two mode: it raises.
    """
    vin = _float_arg(vin, "vin")
    mode = pow2_mode_arg(mode)
    if mode == Pow2RoundMode.NONE:
        raise ValueError("pow2_decompose needs a power-of-two rounding mode (DOWN, UP or STOCHASTIC), got NONE")
    scale_dtype = np.dtype(vin.dtype if scale_dtype is None else scale_dtype)
    if not jnp.issubdtype(scale_dtype, jnp.floating):
        raise TypeError(f"scale_dtype must be a floating-point dtype, got {scale_dtype}")
    work = _work(vin.dtype)
    wide = vin.astype(work[0])
    scale = _down(vin) if mode == Pow2RoundMode.DOWN else pow2_round(wide, mode, key=key)
    minval = work[0].type(np.finfo(work[0]).smallest_normal)
    if is_numpy(scale) and is_numpy(wide):
        normal = np.logical_and(np.isfinite(scale), scale != 0)
        mantissa = wide / np.where(normal, scale, minval)
    else:
        scale, wide = jnp.asarray(scale), jnp.asarray(wide)
        normal = lax.bitwise_and(lax.is_finite(scale), lax.ne(scale, lax.full_like(scale, 0)))
        mantissa = lax.div(wide, lax.select(normal, scale, lax.full_like(scale, minval)))
    return scale.astype(scale_dtype), mantissa.astype(vin.dtype)


def get_mantissa(val: Any) -> Any:
    """The mantissa of `pow2_decompose` (``DOWN``): ``val / pow2_round_down(val)``, in [1, 2) with
    ``val``'s sign; ``get_mantissa(65504) == 1.9990234375``. NumPy in, NumPy out."""
    _, mantissa = pow2_decompose(val, mode=Pow2RoundMode.DOWN)
    return mantissa
