"""Exhaustive: every float16 and bfloat16 bit pattern (as float32) x every format of <= 16 bits x every
rounding mode x saturate x subnormals, fast path against the exact reference, compared as bits.

CI sweeps each of these formats through a pairwise share of the options (every rounding mode with
each saturate and each subnormals value); the slow run (``make test-slow``) through all of them.
The registry's IEEE P3109 binary8 formats and OCP INT8 are swept the same way: a representative of
each layout through the options above in CI, the others through nearest_even and stochastic
rounding, and all of them through every option under the ``slow`` marker. The new options
(P3109's saturation modes, the stochastic variants, ties to the even exponent) have sweeps of their
own below.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import ROUNDING_MODES
from fpemu._engine import rng as _random
from fpemu.testing import reference

SMALL_FORMATS = [f for f in fpemu.formats() if f.bits <= 16]
OPTIONS = list(itertools.product(ROUNDING_MODES, (False, True), (True, False)))
# CI's share of OPTIONS (the slow run sweeps them all): every rounding mode with each saturate value and
# each subnormals value, and every (saturate, subnormals) pair, in half the compilations (a pairwise design).
PAIRWISE_OPTIONS = [
    (rounding, saturate, subnormals)
    for i, rounding in enumerate(ROUNDING_MODES)
    for saturate, subnormals in (((False, False), (True, True)) if i % 2 else ((False, True), (True, False)))
]
assert {(s, sub) for _, s, sub in PAIRWISE_OPTIONS} == {(s, sub) for _, s, sub in OPTIONS}


def _is_new(fmt) -> bool:
    """The P3109 binary8 formats and OCP INT8 (e4m3fnuz and e5m2fnuz are P3109 formats too, by alias)."""
    return fmt.name.startswith("p3109_") or fmt.twos_complement


CLASSIC_FORMATS = [f for f in SMALL_FORMATS if not _is_new(f)]
NEW_FORMATS = [f for f in SMALL_FORMATS if _is_new(f)]
# The new layouts through every option: P3109 signed extended (P = 1: no mantissa; P = 4), unsigned
# extended with P = K (one exponent bit), and two's complement. (P3109's finite formats are the fnuz
# and unsigned fn layouts, swept through e4m3fnuz, e5m2fnuz and e8m0fnu; each one's own P runs below.)
REPRESENTATIVES = ["p3109_k8p1se", "p3109_k8p4se", "p3109_k8p8ue", "int8_ocp"]
assert set(REPRESENTATIVES) <= {f.name for f in NEW_FORMATS}
OTHER_NEW_FORMATS = [f for f in NEW_FORMATS if f.name not in REPRESENTATIVES]


def _option_id(option):
    rounding, saturate, subnormals = option
    sat = "" if saturate is False else "-sat" if saturate is True else f"-{saturate}"
    return f"{rounding}{sat}{'' if subnormals else '-ftz'}"


@pytest.fixture(scope="module")
def patterns() -> np.ndarray:
    h = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])


def _random_draws(shape, random_bits: int, key) -> np.ndarray:
    """The k-bit random integers the fast path uses for each element (reference input)."""
    bits = _random.random_uint32(_random.seeds_from_key(key), shape)
    return np.asarray(bits >> jnp.uint32(32 - random_bits))


def _check(fmt, x, rounding, saturate, subnormals, random_bits=None, **extra):
    kw = {"rounding": rounding, "saturate": saturate, "subnormals": subnormals, **extra}
    fast_kw, ref_kw = dict(kw), dict(kw)
    if rounding == "stochastic":
        key = jax.random.key(42)
        fast_kw.update(key=key, random_bits=random_bits)
        k = random_bits or 32
        ref_kw.update(random=_random_draws(x.shape, k, key), random_bits=k)
    # One compilation for both (the sweep's cost is compiling, once per format and options).
    both = jax.jit(lambda v: (fpemu.quantize(v, fmt, **fast_kw), fpemu.encode(v, fmt, **fast_kw)))
    y, codes = (np.asarray(a) for a in both(jnp.asarray(x)))
    expected_codes, expected = reference.round_and_encode_array(x, fmt, **ref_kw)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(y), nan, err_msg=f"NaN mismatch for {fmt.name} {kw}")
    np.testing.assert_array_equal(
        y[~nan].view(np.uint32), expected[~nan].astype(np.float32).view(np.uint32), err_msg=f"{fmt.name} {kw}"
    )
    np.testing.assert_array_equal(codes, expected_codes, err_msg=f"codes {fmt.name} {kw}")


SWEPT_FORMATS = CLASSIC_FORMATS + [fpemu.get_format(n) for n in REPRESENTATIVES]


@pytest.mark.parametrize("option", PAIRWISE_OPTIONS, ids=_option_id)
@pytest.mark.parametrize("fmt", SWEPT_FORMATS, ids=lambda f: f.name)
def test_every_16_bit_pattern(fmt, option, patterns):
    _check(fmt, patterns, *option)


@pytest.mark.slow
@pytest.mark.parametrize("option", [o for o in OPTIONS if o not in PAIRWISE_OPTIONS], ids=_option_id)
@pytest.mark.parametrize("fmt", SWEPT_FORMATS, ids=lambda f: f.name)
def test_every_16_bit_pattern_other_options(fmt, option, patterns):
    _check(fmt, patterns, *option)


_OTHER_NEW_CASES = [(f, "nearest_even") for f in OTHER_NEW_FORMATS] + [
    (fpemu.get_format(f), "stochastic") for f in ("p3109_k8p2se", "p3109_k8p7sf", "p3109_k8p1uf", "p3109_k8p5ue")
]


@pytest.mark.long
@pytest.mark.parametrize(("fmt", "rounding"), _OTHER_NEW_CASES, ids=lambda v: getattr(v, "name", v))
def test_every_16_bit_pattern_other_new_formats(fmt, rounding, patterns):
    _check(fmt, patterns, rounding, False, True)


@pytest.mark.slow
@pytest.mark.parametrize("option", OPTIONS, ids=_option_id)
@pytest.mark.parametrize("fmt", OTHER_NEW_FORMATS, ids=lambda f: f.name)
def test_every_16_bit_pattern_other_new_formats_every_option(fmt, option, patterns):
    _check(fmt, patterns, *option)


@pytest.mark.parametrize("random_bits", [1, 3, 8])
@pytest.mark.parametrize("fmt", ["e4m3fn", "bf16", "e2m1fn", "e8m0fnu"])
def test_every_16_bit_pattern_with_few_random_bits(fmt, random_bits, patterns):
    _check(fpemu.get_format(fmt), patterns, "stochastic", False, True, random_bits=random_bits)


# -- the new options --------------------------------------------------------------------------------

# P3109's saturation modes differ from fpemu's booleans only in to_odd's overflow (ovf_inf), in
# infinities (sat_propagate) and in negative inputs of unsigned formats with a zero (all three).
_P3109_OPTIONS = [
    *(("to_odd", "ovf_inf", sub) for sub in (True, False)),
    ("nearest_even", "sat_propagate", False),
    ("toward_negative", "sat_propagate", True),
]


@pytest.mark.parametrize("option", _P3109_OPTIONS, ids=_option_id)
@pytest.mark.parametrize(
    "fmt", ["e4m3fn", "e5m2", "e2m1fn", "bf16", "e8m0fnu", "p3109_k8p1se", "p3109_k8p4se", "int8_ocp"]
)
def test_p3109_saturation_modes(fmt, option, patterns):
    _check(fpemu.get_format(fmt), patterns, *option)


@pytest.mark.parametrize("option", list(itertools.product(ROUNDING_MODES, ("sat_finite", "ovf_inf"), (True,))),
                         ids=_option_id)  # fmt: skip
@pytest.mark.parametrize("fmt", ["p3109_k8p3ue"])
def test_p3109_saturation_modes_of_unsigned_formats(fmt, option, patterns):
    _check(fpemu.get_format(fmt), patterns, *option)


@pytest.mark.slow
@pytest.mark.parametrize("saturate", ["sat_finite", "sat_propagate", "ovf_inf"])
@pytest.mark.parametrize("rounding", ROUNDING_MODES)
@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_p3109_saturation_modes_every_format_and_mode(fmt, rounding, saturate, patterns):
    for subnormals in (True, False):
        _check(fmt, patterns, rounding, saturate, subnormals)


_VARIANTS = ["nearest_even", "nearest_odd", "nearest_away"]


@pytest.mark.parametrize("variant", _VARIANTS)
@pytest.mark.parametrize(("fmt", "random_bits"), [("e4m3fn", 3), ("e8m0fnu", 3), ("p3109_k8p1se", 3), ("int8_ocp", 3),
                                                  ("e2m1fn", None)])  # fmt: skip
def test_stochastic_variants(fmt, variant, random_bits, patterns):
    _check(fpemu.get_format(fmt), patterns, "stochastic", False, True, random_bits, stochastic_variant=variant)


@pytest.mark.slow
@pytest.mark.parametrize("random_bits", [None, 1, 3, 8])
@pytest.mark.parametrize("variant", _VARIANTS)
@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_stochastic_variants_every_format(fmt, variant, random_bits, patterns):
    _check(fmt, patterns, "stochastic", "ovf_inf", False, random_bits, stochastic_variant=variant)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", [f for f in SMALL_FORMATS if f.mantissa_bits == 0], ids=lambda f: f.name)
def test_ties_to_the_even_exponent(fmt, saturate, patterns):
    _check(fmt, patterns, "nearest_even", saturate, True, exponent_ties="even")


@pytest.mark.long
@pytest.mark.parametrize("fmt", [f for f in fpemu.formats() if f.exponent_bits == 8 and f.specials == "ieee"],
                         ids=lambda f: f.name)  # fmt: skip
def test_reduce_precision_fast_path_equals_the_integer_path(fmt, patterns):
    """quantize dispatches bf16/tf32/fp32 nearest-even on float32 to lax.reduce_precision: prove it exact."""
    from fpemu._ops.quantize import RoundingSpec, _round_array, reduce_precision_is_exact

    spec = RoundingSpec(fmt)
    assert reduce_precision_is_exact(fpemu.get_format("fp32"), spec)
    x = jnp.asarray(
        np.concatenate([patterns, np.random.default_rng(0).integers(0, 2**32, 1 << 18, np.uint32).view(np.float32)])
    )
    seeds = jnp.zeros((2,), jnp.uint32)
    fast, integer = (
        np.asarray(_round_array(x, seeds, spec)),
        np.asarray(_round_array(x, seeds, spec, integer_only=True)),
    )
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(integer))
    np.testing.assert_array_equal(fast[~np.isnan(fast)].view(np.uint32), integer[~np.isnan(integer)].view(np.uint32))
    if fmt.bits <= 16:
        expected = reference.round_array(np.asarray(x), fmt)
        np.testing.assert_array_equal(fast[~np.isnan(fast)], expected[~np.isnan(expected)].astype(np.float32))
