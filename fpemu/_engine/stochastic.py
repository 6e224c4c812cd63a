"""Stochastic rounding of float32 into small formats in fewer operations: `round_narrow`'s fast path.

`fpemu._engine.convert.round_narrow` rounds any format pair in every mode. For float32 input,
stochastic rounding with its ``"floor"`` variant, and a target whose quanta (the spacing of its
values in each binade) are all normal float32 numbers with normal reciprocals (FP8, FP6, FP4,
float16 and the like; not bfloat16 or E8M0), `round_stochastic` gives the same bits with fewer
operations per element (`fpemu.quantize` takes it there, and so do NVFP4's gradients in
`fpemu.scaled`, about 10-15% faster; bench/RESULTS_training.md):

- at and above the target's smallest value, the ``sh`` discarded bits of ``|x|`` are its fraction
  of a quantum: shifted to the top of a word, they are ``floor(r * 2**32)``;
- below it, ``floor(r * 2**32)`` with ``r = |x| / smallest`` is one exact float product (XLA:CPU
  flushes a subnormal ``|x|`` to zero there, and so does the definition: ``r * 2**32 < 1``, since
  the smallest value is at least ``2**-94``);
- with ``k`` random bits ``draw``, the magnitude rounds up iff ``floor(r * 2**k) + draw >= 2**k``:
  round_narrow's definition (its k random bits added at the k leading discarded bits, the carry
  rounding up), written as a comparison.

Overflow, infinities, NaN and the sign of zero follow round_narrow with a boolean ``saturate``.
tests/engine/test_engine_stochastic.py compares the two paths bit for bit on every format `applies` to.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import Format
from fpemu._core.registry import get_format
from fpemu._engine.convert import value_bits
from fpemu._jax.elementwise import clamp, select

__all__ = ["applies", "round_stochastic"]

_FP32 = get_format("fp32")
# a NumPy scalar type (typed Any), as `fpemu._scaled.bits.U32`: constants without a JAX array each at every trace
_U32: Any = np.uint32
_MANTISSA = _FP32.mantissa_bits  # 23
_SIGN = _FP32.sign_mask
_INF = _FP32.inf_code

#: The range of quanta (as powers of two) `round_stochastic` takes: a subnormal float32 lies below
#: 2**-32 of the smallest (so that floor(r * 2**32) is 0, as XLA:CPU's flushing makes it), and the
#: largest, one binade above the target's largest value, is a normal float32.
_WORD = 32  # the random bits' word
_MIN_QUANTUM_EXPONENT, _MAX_QUANTUM_EXPONENT = _FP32.emin + _WORD, -_FP32.emin  # -94, 126


def applies(src: Format, dst: Format, *, saturate: object, subnormals: bool, stochastic_variant: str) -> bool:
    """Whether `round_stochastic` gives round_narrow's bits for these options: float32 input, a signed
    sign-magnitude target with zero, exponent bits and subnormals kept, quanta in range, the
    ``"floor"`` variant and a boolean ``saturate`` (not one of P3109's modes)."""
    return (
        src == _FP32
        and dst.signed
        and not dst.twos_complement
        and dst.has_zero
        and dst.exponent_bits > 0
        and dst.emin + _FP32.bias - dst.mantissa_bits > 0  # the quantum below the normal range: a normal float32
        and subnormals
        and isinstance(saturate, (bool, np.bool_))
        and stochastic_variant == "floor"
        and dst.min_subnormal_exponent >= _MIN_QUANTUM_EXPONENT
        and dst.emax + 1 - dst.mantissa_bits <= _MAX_QUANTUM_EXPONENT
    )


def round_stochastic(bits: jnp.ndarray, dst: Format, *, saturate: bool, random: jnp.ndarray, k: int) -> jnp.ndarray:
    """uint32 bits of float32 values rounded stochastically to ``dst`` (where `applies`), as float32
    bits: round_narrow's ``output="src_bits"`` result. ``random``: uint32 words whose ``k`` top bits
    are the draw (the layout `fpemu.quantize` uses)."""
    a = lax.bitwise_and(bits, _U32(_SIGN - 1))
    sign = lax.bitwise_and(bits, _U32(_SIGN))
    m = dst.mantissa_bits
    e_min_field = dst.emin + _FP32.bias  # float32's exponent field of the target's smallest normal
    smallest = _U32(value_bits(dst.min_subnormal, _FP32))
    # discarded bits: 23 - m in the target's normal range, one more per binade below it
    field = clamp(lax.shift_right_logical(a, _U32(_MANTISSA)), _U32(e_min_field - m), _U32(e_min_field))
    sh = lax.sub(_U32(_MANTISSA - m + e_min_field), field)
    tiny = lax.lt(a, smallest)
    below = lax.mul(lax.bitcast_convert_type(a, jnp.float32), np.float32(2.0 ** (_WORD - dst.min_subnormal_exponent)))
    fraction = select(tiny, below.astype(_U32), lax.shift_left(a, lax.sub(_U32(_WORD), sh)))  # floor(r * 2**32)
    draw = random
    if k < _WORD:
        fraction, draw = (
            lax.shift_right_logical(fraction, _U32(_WORD - k)),
            lax.shift_right_logical(random, _U32(_WORD - k)),
        )
    up = lax.gt(fraction, lax.sub(_U32((1 << k) - 1), draw))  # fraction + draw >= 2**k, without overflow
    low = select(tiny, _U32(0), lax.bitwise_and(a, lax.bitwise_not(lax.sub(lax.shift_left(_U32(1), sh), _U32(1)))))
    step = select(tiny, smallest, lax.shift_left(_U32(1), sh))  # a carry out of the mantissa bumps the exponent
    res = select(up, lax.add(low, step), low)
    v_max = _U32(value_bits(dst.max, _FP32))
    if saturate or not (dst.has_inf or dst.has_nan):
        overflow = v_max  # the value standing for "infinity", as round_narrow has it
    else:
        overflow = _U32(_INF if dst.has_inf else _FP32.nan_code)
    res = select(lax.gt(res, v_max), overflow, res)  # infinite inputs land here too
    if dst.has_negative_zero:
        res = lax.bitwise_or(res, sign)
    else:
        res = lax.bitwise_or(res, select(lax.ne(res, _U32(0)), sign, _U32(0)))  # no -0: zero results are +0
    return select(lax.gt(a, _U32(_INF)), bits, res)  # NaN inputs come out unchanged
