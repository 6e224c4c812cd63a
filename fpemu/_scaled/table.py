"""Few-valued elements (FP4): nearest-even rounding by thresholds, dequantization by per-block tables.

An element format with a handful of values (E2M1: ±0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6) lets a
narrow-scale block format (NVFP4) quantize-dequantize without the general machinery per element:

- *Rounding to nearest even* of a scaled magnitude ``|y|`` is the number of midpoints between
  neighbouring values that it passes: above the midpoint, or on it where the upper value has the
  even code (the tie goes to even). Comparisons of float32 bit patterns, exact on every backend.
- *Dequantizing*: a block's element times its scale(s), ``fl(v * d * g)``, is one of a handful of
  values per block. They are computed once per block (7 exact products per block of 16 for E2M1,
  instead of one per element), and each element selects its own.

The other rounding modes keep `fpemu.quantize` and the per-element products: through a table they
measured slower (bench/RESULTS_scaled.md, with the speed of this path). `quantize_dequantize_split`
(the training recipes' NVFP4 operands) needs no table: its ``v * d`` is one exact multiplication per
element, and ``v`` comes from `fpemu._scaled.rne.round_clamped` on the saturated magnitude, the
same nearest-even value as `round_to_table`'s in fewer operations.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import Format
from fpemu._jax.elementwise import select
from fpemu._scaled.bits import U32

#: Formats with at most this many positive values use tables (E2M1 has 7; FP6 formats have 31).
MAX_VALUES = 8


@functools.lru_cache(maxsize=64)
def positive_values(fmt: Format) -> tuple[float, ...]:
    """The positive finite values of ``fmt``, increasing (their codes are 1, 2, ... in order)."""
    return tuple(fmt.magnitude_value(code) for code in range(1, fmt.max_code + 1))


def applies(fmt: Format) -> bool:
    """Whether ``fmt``'s elements can be rounded by thresholds: a sign-magnitude format with -0 and
    without infinity or NaN (every input, overflow included, rounds to one of its values, as
    `fpemu.quantize` rounds for such formats whatever the saturation), with few values, and with
    mantissa bits: without them (E2M0...) `fpemu.quantize` breaks a tie between two binades by its
    ``exponent_ties`` rule (away from zero by default, as ml_dtypes), not to the even code."""
    plain = fmt.signed and fmt.has_negative_zero and not (fmt.has_inf or fmt.has_nan or fmt.twos_complement)
    return plain and fmt.mantissa_bits >= 1 and len(positive_values(fmt)) <= MAX_VALUES


def round_to_table(magnitude: jnp.ndarray, table: list[jnp.ndarray], fmt: Format) -> jnp.ndarray:
    """The table entry of each magnitude's nearest value (ties to the even code), 0 below the first.

    ``magnitude``: uint32 bit patterns of non-negative float32 values; ``table[i]`` (broadcast to the
    elements) is the result for the ``i + 1``-th positive value. Beyond the largest value (±inf
    included), its entry: saturation. NaN patterns count as beyond it (callers mask NaN).
    """
    values = positive_values(fmt)
    below = (0.0, *values[:-1])
    midpoints = np.array([(lo + hi) / 2 for lo, hi in zip(below, values, strict=True)], np.float32)
    assert all(float(m) == (lo + hi) / 2 for m, lo, hi in zip(midpoints, below, values, strict=True))  # exact
    out = jnp.zeros(magnitude.shape, U32)
    for code, (bits, entry) in enumerate(zip(midpoints.view(np.uint32).tolist(), table, strict=True), start=1):
        passes = (lax.ge if code % 2 == 0 else lax.gt)(magnitude, U32(bits))
        out = select(passes, entry, out)
    return out
