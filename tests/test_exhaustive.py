"""Exhaustive: every float16 and bfloat16 bit pattern (as float32) x every format of <= 16 bits x every
rounding mode x saturate x subnormals, fast path against the exact reference, compared as bits."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._engine import rng as _random
from fpemu._engine.convert import ROUNDING_MODES
from fpemu.testing import reference

SMALL_FORMATS = [f for f in fpemu.formats() if f.bits <= 16]
OPTIONS = list(itertools.product(ROUNDING_MODES, (False, True), (True, False)))


def _option_id(option):
    rounding, saturate, subnormals = option
    return f"{rounding}{'-sat' if saturate else ''}{'' if subnormals else '-ftz'}"


@pytest.fixture(scope="module")
def patterns() -> np.ndarray:
    h = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])


def _random_draws(shape, random_bits: int, key) -> np.ndarray:
    """The k-bit random integers the fast path uses for each element (reference input)."""
    bits = _random.random_uint32(_random.seeds_from_key(key), shape)
    return np.asarray(bits >> jnp.uint32(32 - random_bits))


def _check(fmt, x, rounding, saturate, subnormals, random_bits=None):
    kw = {"rounding": rounding, "saturate": saturate, "subnormals": subnormals}
    fast_kw, ref_kw = dict(kw), dict(kw)
    if rounding == "stochastic":
        key = jax.random.key(42)
        fast_kw.update(key=key, random_bits=random_bits)
        k = random_bits or 32
        ref_kw.update(random=_random_draws(x.shape, k, key), random_bits=k)
    y = np.asarray(fpemu.quantize(jnp.asarray(x), fmt, **fast_kw))
    expected = reference.round_array(x, fmt, **ref_kw)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(y), nan, err_msg=f"NaN mismatch for {fmt.name} {kw}")
    np.testing.assert_array_equal(
        y[~nan].view(np.uint32), expected[~nan].astype(np.float32).view(np.uint32), err_msg=f"{fmt.name} {kw}"
    )
    codes = np.asarray(fpemu.encode(jnp.asarray(x), fmt, **fast_kw))
    np.testing.assert_array_equal(codes, reference.encode_array(x, fmt, **ref_kw), err_msg=f"codes {fmt.name} {kw}")


@pytest.mark.parametrize("option", OPTIONS, ids=_option_id)
@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_every_16_bit_pattern(fmt, option, patterns):
    _check(fmt, patterns, *option)


@pytest.mark.parametrize("random_bits", [1, 3, 8])
@pytest.mark.parametrize("fmt", ["e4m3fn", "bf16", "e2m1fn", "e8m0fnu"])
def test_every_16_bit_pattern_with_few_random_bits(fmt, random_bits, patterns):
    _check(fpemu.get_format(fmt), patterns, "stochastic", False, True, random_bits=random_bits)


@pytest.mark.parametrize("fmt", [f for f in fpemu.formats() if f.exponent_bits == 8 and f.specials == "ieee"],
                         ids=lambda f: f.name)  # fmt: skip
def test_reduce_precision_fast_path_equals_the_integer_path(fmt, patterns):
    """quantize dispatches bf16/tf32/fp32 nearest-even on float32 to lax.reduce_precision: prove it exact."""
    from fpemu._ops.quantize import RoundingSpec, _round_array, reduce_precision_is_exact

    spec = RoundingSpec(fmt)
    assert reduce_precision_is_exact(fpemu.get_format("fp32"), spec)
    x = jnp.asarray(np.concatenate([patterns, np.random.default_rng(0).integers(0, 2**32, 1 << 18, np.uint32).view(np.float32)]))
    seeds = jnp.zeros((2,), jnp.uint32)
    fast, integer = np.asarray(_round_array(x, seeds, spec)), np.asarray(_round_array(x, seeds, spec, integer_only=True))
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(integer))
    np.testing.assert_array_equal(fast[~np.isnan(fast)].view(np.uint32), integer[~np.isnan(integer)].view(np.uint32))
    if fmt.bits <= 16:
        expected = reference.round_array(np.asarray(x), fmt)
        np.testing.assert_array_equal(fast[~np.isnan(fast)], expected[~np.isnan(expected)].astype(np.float32))
