"""The fast stochastic rounding (`fpemu._engine.stochastic`) against the general engine, bit for bit.

`round_stochastic` replaces `round_narrow`'s stochastic rounding wherever `applies` says it may
(`fpemu.quantize` and NVFP4's gradients in `fpemu.scaled` run it). Every format of the registry it
applies to is checked on every value of the format and its float32 neighbours, the points between
values, a sweep of float32 (subnormals included), the special values, both signs, and draws at the
exact threshold of each input (found from the values, not from either engine) as well as others.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._core.registry import formats, get_format
from fpemu._engine import convert, stochastic

FP32 = get_format("fp32")
FAST = [
    f for f in formats() if stochastic.applies(FP32, f, saturate=False, subnormals=True, stochastic_variant="floor")
]


def test_which_formats_it_applies_to():
    applies = functools.partial(stochastic.applies, FP32, saturate=False, subnormals=True, stochastic_variant="floor")
    for name in ("e2m1fn", "e2m3fn", "e3m2fn", "e4m3fn", "e5m2", "e4m3fnuz", "fp16", "p3109_k8p3se"):
        assert applies(get_format(name)), name
    # quanta below 2**-94 (bf16, tf32, fp32), unsigned (E8M0, P3109 u), two's complement (INT8)
    for name in ("bf16", "tf32", "fp32", "fp64", "e8m0fnu", "p3109_k8p3ue", "int8_ocp"):
        assert not applies(get_format(name)), name
    e2m1 = get_format("e2m1fn")
    assert not stochastic.applies(FP32, e2m1, saturate="sat_finite", subnormals=True, stochastic_variant="floor")
    assert not stochastic.applies(FP32, e2m1, saturate=False, subnormals=False, stochastic_variant="floor")
    assert not stochastic.applies(FP32, e2m1, saturate=False, subnormals=True, stochastic_variant="nearest_even")
    assert not stochastic.applies(get_format("fp16"), e2m1, saturate=False, subnormals=True, stochastic_variant="floor")


def _values(fmt) -> np.ndarray:
    """The format's finite non-negative values, increasing."""
    values = np.array([fmt.magnitude_value(c) for c in range(fmt.max_code + 1)], np.float64)
    return np.unique(values[np.isfinite(values)])


def _magnitudes(fmt) -> np.ndarray:
    """float32 bit patterns of non-negative inputs: the format's values and their neighbours, the points
    a quarter, a half and three quarters between values, a sweep of float32, subnormals, specials."""
    values = _values(fmt)
    bits = values.astype(np.float32).view(np.uint32).astype(np.int64)
    neighbours = np.concatenate([bits + d for d in (-2, -1, 1, 2)])
    between = np.concatenate([values[:-1] + f * np.diff(values) for f in (0.25, 0.5, 0.75)])
    sweep = np.arange(0, 0x7F800000, 0x7F800000 // 4099, dtype=np.int64)
    subnormals = np.arange(1, 1 << 23, (1 << 23) // 97, dtype=np.int64)
    specials = np.array([0, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001], np.int64)
    out = np.concatenate([bits, neighbours, between.astype(np.float32).view(np.uint32), sweep, subnormals, specials])
    return np.unique(out[(out >= 0) & (out < 1 << 31)]).astype(np.uint32)


def _thresholds(fmt, magnitudes: np.ndarray, k: int) -> np.ndarray:
    """Per input, the smallest k-bit draw that rounds it up: ``2**k - floor(2**k * r)``, with ``r`` the
    fraction of the step between the values around it (2**k where nothing rounds up)."""
    values = _values(fmt)
    finite = magnitudes < np.uint32(0x7F800000)
    x = np.where(finite, magnitudes, np.uint32(0)).view(np.float32).astype(np.float64)
    inside = finite & (x < values[-1])
    i = np.clip(np.searchsorted(values, x, side="right") - 1, 0, len(values) - 2)
    r = np.where(inside, (x - values[i]) / (values[i + 1] - values[i]), 0.0)  # exact: a power-of-two step
    return (2**k - np.floor(r * 2.0**k)).astype(np.uint64)


def _inputs(fmt, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 bit patterns and the k-bit draws (in the top bits of 32-bit words) to round them with:
    each input with its threshold draw, the draw below it, 0, the largest draw and a spread of others;
    both signs."""
    magnitudes = _magnitudes(fmt)
    t = _thresholds(fmt, magnitudes, k)
    top = np.uint64((1 << k) - 1)
    draws = [np.minimum(t, top), np.minimum(t - 1, top), np.zeros_like(t), np.full_like(t, top)]
    index = np.arange(len(magnitudes), dtype=np.uint64)
    draws.append((index * np.uint64(0x9E3779B9)) % np.uint64(1 << k))  # spread over the range
    draws = np.concatenate(draws).astype(np.uint32)
    x = np.tile(magnitudes, len(draws) // len(magnitudes))
    x = np.concatenate([x, x | np.uint32(0x80000000)])
    words = np.concatenate([draws, draws[::-1]])
    return x, words << np.uint32(32 - k) if k < 32 else words


CASES = [(saturate, k) for saturate in (False, True) for k in (3, 32)]


@pytest.mark.long
@pytest.mark.parametrize("fmt", FAST, ids=[f.name for f in FAST])
def test_round_stochastic_equals_round_narrow(fmt):
    """Every case of `CASES` (saturation on and off; 3 and 32 random bits) in one compiled program."""
    inputs = [_inputs(fmt, k) for _, k in CASES]

    def both(args):
        out = []
        for (saturate, k), (b, w) in zip(CASES, args, strict=True):
            options = dict(rounding="stochastic", saturate=saturate, subnormals=True, output="src_bits")
            general = convert.round_narrow(b, src=FP32, dst=fmt, random=w, random_bits=k, **options)
            fast = stochastic.round_stochastic(b, dst=fmt, saturate=saturate, random=w, k=k)
            out.append((general, fast))
        return out

    results = jax.jit(both)([(jnp.asarray(x), jnp.asarray(w)) for x, w in inputs])
    for (saturate, k), (x, words), (expected, got) in zip(CASES, inputs, results, strict=True):
        expected, got = np.asarray(expected), np.asarray(got)
        bad = np.flatnonzero(got != expected)
        assert bad.size == 0, (
            saturate,
            k,
            [(hex(x[i]), hex(words[i]), hex(expected[i]), hex(got[i])) for i in bad[:5]],
        )


def test_the_threshold_draw_rounds_up_and_the_one_below_does_not():
    """The definition itself, on hand-picked E2M1 inputs: 1.25 lies a half step above 1 (steps of 0.5),
    0.3 is 0.6 of the way from 0 to the smallest value 0.5; with 2 random bits the thresholds are
    4 - floor(4 * 0.5) = 2 and 4 - floor(4 * 0.6) = 2."""
    e2m1 = get_format("e2m1fn")
    x = np.array([1.25, 1.25, 0.3, 0.3, -1.25, 5.0, 5.0, 7.0], np.float32).view(np.uint32)
    draws = np.array([2, 1, 2, 1, 2, 2, 1, 0], np.uint32) << np.uint32(30)
    out = stochastic.round_stochastic(jnp.asarray(x), e2m1, saturate=False, random=jnp.asarray(draws), k=2)
    assert np.asarray(out).view(np.float32).tolist() == [1.5, 1.0, 0.5, 0.0, -1.5, 6.0, 4.0, 6.0]
