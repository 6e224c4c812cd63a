"""quantize and encode: pinned corner cases, option validation, dtypes, jit/vmap/grad, stochastic rounding."""

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import ROUNDING_MODES
from fpemu.testing import reference
from tests.corner_cases import CASES, F64, case_id


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(actual, expected):
    """Bitwise equality, NaN compared as NaN (any payload), the sign of zero compared."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    both_nan = np.isnan(actual) & np.isnan(expected)
    bad = ~(both_nan | (_bits(actual) == _bits(expected)))
    assert not bad.any(), f"mismatch at {np.flatnonzero(bad)[:5]}: {actual[bad][:5]} != {expected[bad][:5]}"


def _expected_value(fmt, code: int) -> float:
    """The value of a code, from the format's own definition (not the conversion engine)."""
    fmt = fpemu.get_format(fmt)
    magnitude = code & ~fmt.sign_mask
    if fmt.twos_complement and code & fmt.sign_mask:
        return -fmt.magnitude_value(fmt.num_codes - code)
    if code == fmt.nan_code or code == (fmt.nan_code or 0) | fmt.sign_mask and fmt.specials in ("ieee", "fn"):
        return math.nan
    if fmt.inf_code is not None and magnitude == fmt.inf_code:
        return math.copysign(math.inf, -1.0 if code & fmt.sign_mask else 1.0)
    return math.copysign(fmt.magnitude_value(magnitude), -1.0 if code & fmt.sign_mask else 1.0)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_corner_case_encode(case):
    fmt, x, options, code = case
    assert int(fpemu.encode(x if isinstance(x, F64) else np.float32(x), fmt, **options)) == code


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_corner_case_quantize(case):
    fmt, x, options, code = case
    y = float(fpemu.quantize(float(x) if isinstance(x, F64) else np.float32(x), fmt, **options))
    expected = _expected_value(fmt, code)
    if fmt in ("e2m1fn", "int8_ocp") and math.isnan(x):
        expected = math.nan  # quantize keeps NaN visible where encode has no NaN code
    if math.isnan(expected):
        assert math.isnan(y)
    else:
        assert y == expected and math.copysign(1, y) == math.copysign(1, expected)


# -- option and input validation -------------------------------------------------------------------


def test_unknown_rounding_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="rounding must be one of .*nearest_even.*stochastic"):
        fpemu.quantize(jnp.ones(3), "e4m3fn", rounding="nearest")


def test_unknown_format_names_close_matches():
    with pytest.raises(fpemu.UnknownFormatError, match="did you mean 'e4m3fn'"):
        fpemu.quantize(jnp.ones(3), "e4m3fm")


def test_stochastic_needs_key():
    with pytest.raises(ValueError, match="needs key"):
        fpemu.quantize(jnp.ones(3), "bf16", rounding="stochastic")


def test_key_without_stochastic_is_an_error():
    with pytest.raises(ValueError, match="key is only used with stochastic rounding, not rounding='nearest_even'"):
        fpemu.quantize(jnp.ones(3), "bf16", key=jax.random.key(0))
    with pytest.raises(ValueError, match="random_bits is only used"):
        fpemu.quantize(jnp.ones(3), "bf16", random_bits=8)


@pytest.mark.parametrize("random_bits", [0, 33, 2.5, True])
def test_random_bits_range(random_bits):
    with pytest.raises(ValueError, match="random_bits must be None or an int in \\[1, 32\\]"):
        fpemu.quantize(jnp.ones(3), "bf16", rounding="stochastic", key=jax.random.key(0), random_bits=random_bits)


def test_bad_key_type():
    with pytest.raises(TypeError, match="key must be a single JAX PRNG key"):
        fpemu.quantize(jnp.ones(3), "bf16", rounding="stochastic", key=0)
    with pytest.raises(ValueError, match="single PRNG key"):
        fpemu.quantize(jnp.ones(3), "bf16", rounding="stochastic", key=jax.random.split(jax.random.key(0)))


@pytest.mark.parametrize("x", [jnp.arange(3), jnp.array([True]), jnp.ones(2, jnp.complex64), 3, True])
def test_non_float_input_is_a_type_error(x):
    with pytest.raises(TypeError, match="x must be a"):
        fpemu.quantize(x, "e4m3fn")


def test_float8_input_is_a_type_error_with_advice():
    with pytest.raises(TypeError, match="astype"):
        fpemu.quantize(jnp.ones(2, jnp.float8_e4m3fn), "e2m1fn")


@pytest.mark.parametrize(
    ("dtype", "fmt"), [(jnp.bfloat16, "fp16"), (jnp.float16, "bf16"), (jnp.float16, "e8m0fnu"), (jnp.bfloat16, "tf32")]
)
def test_format_that_does_not_fit_the_dtype(dtype, fmt):
    with pytest.raises(ValueError, match="cannot hold exactly.*wider dtype"):
        fpemu.quantize(jnp.ones(2, dtype), fmt)


def test_saturate_must_be_bool():
    with pytest.raises(TypeError, match="saturate must be a bool"):
        fpemu.quantize(jnp.ones(2), "e4m3fn", saturate="yes")


# -- dtypes and shapes ----------------------------------------------------------------------------

_DTYPE_FORMATS = [
    (jnp.float32, "e4m3fn"),
    (jnp.float32, "fp32"),
    (jnp.bfloat16, "e5m2"),
    (jnp.bfloat16, "e8m0fnu"),
    (jnp.float16, "e4m3fn"),
    (jnp.float16, "fp16"),
]


@pytest.mark.parametrize(("dtype", "fmt"), _DTYPE_FORMATS)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 3)])
def test_quantize_preserves_dtype_and_shape(dtype, fmt, shape):
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype)
    y = fpemu.quantize(x, fmt)
    assert y.dtype == x.dtype and y.shape == x.shape
    codes = fpemu.encode(x, fmt)
    assert codes.dtype == fpemu.get_format(fmt).code_dtype and codes.shape == x.shape


@pytest.mark.parametrize(("dtype", "fmt"), [(d, f) for d, f in _DTYPE_FORMATS if d != jnp.float32])
def test_narrow_dtypes_agree_with_float32(dtype, fmt):
    """A bfloat16/float16 input rounds exactly as its float32 value does."""
    patterns = np.arange(1 << 16, dtype=np.uint16).view(jnp.dtype(dtype))
    x = jnp.asarray(patterns)
    y = fpemu.quantize(x, fmt).astype(jnp.float32)
    assert_same_bits(y, fpemu.quantize(x.astype(jnp.float32), fmt))


def test_quantize_python_float_rounds_from_float64():
    # 1 + 2**-8 + 2**-40 is above the bf16 tie only in float64; float32 rounding first would tie to 1.0
    y = fpemu.quantize(1 + 2.0**-8 + 2.0**-40, "bf16")
    assert float(y) == 1 + 2.0**-7


@pytest.mark.long
def test_numpy_float64_with_x64_off_rounds_once():
    assert not jax.config.jax_enable_x64
    x = np.array([-431.99999999999994, 1 + 2.0**-4 + 2.0**-40, 2.0**-10 * (1 + 2.0**-30)], np.float64)
    y = fpemu.quantize(x, "e4m3fn")
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(y), np.array([-416.0, 1.125, 2.0**-9], np.float32))
    assert np.asarray(fpemu.encode(x, "e4m3fn")).tolist() == [0xFD, 0x39, 0x01]


def test_numpy_float64_with_x64_off_rejects_formats_wider_than_float32():
    with pytest.raises(ValueError, match="jax_enable_x64"):
        fpemu.quantize(np.ones(2), "fp64")


def test_float64_arrays_with_x64(x64):
    x = jnp.asarray([-431.99999999999994, 1 + 2.0**-8 + 2.0**-40, 2.0**-1074], jnp.float64)
    assert fpemu.quantize(x, "e4m3fn")[0] == -416.0
    y = fpemu.quantize(x, "bf16")
    assert y.dtype == jnp.float64 and float(y[1]) == 1 + 2.0**-7
    assert float(fpemu.quantize(x, "fp64")[2]) == 2.0**-1074  # float64 subnormals survive
    assert int(fpemu.encode(x, "fp32")[2]) == 0  # 2**-1074 is far below float32's smallest value


# -- jit, vmap, grad ------------------------------------------------------------------------------


def _sample(n=4096, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(n).astype(np.float32) * np.float32(2.0) ** rng.integers(-12, 12, n))


@pytest.mark.parametrize("rounding", ROUNDING_MODES)
def test_jit_eager_and_vmap_agree(rounding):
    x = _sample().reshape(64, 64)
    kw = {"key": jax.random.key(3)} if rounding == "stochastic" else {}
    eager = fpemu.quantize(x, "e5m2", rounding=rounding, **kw)
    jitted = jax.jit(lambda v, **k: fpemu.quantize(v, "e5m2", rounding=rounding, **k))(x, **kw)
    assert_same_bits(eager, jitted)
    if rounding != "stochastic":  # stochastic streams are indexed per vmapped slice (documented)
        mapped = jax.vmap(lambda row: fpemu.quantize(row, "e5m2", rounding=rounding))(x)
        assert_same_bits(eager, mapped)


@pytest.mark.long
def test_vmap_over_keys():
    x = _sample(256)
    keys = jax.random.split(jax.random.key(0), 4)
    out = jax.vmap(lambda k: fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=k))(keys)
    for i in range(4):
        assert_same_bits(out[i], fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=keys[i]))
    assert not np.array_equal(np.asarray(out[0]), np.asarray(out[1]))


@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic"])
def test_gradient_is_straight_through(rounding):
    x = _sample(64)
    kw = {"key": jax.random.key(0)} if rounding == "stochastic" else {}

    def loss(v):
        return jnp.sum(fpemu.quantize(v, "e4m3fn", rounding=rounding, **kw) * jnp.arange(64, dtype=jnp.float32))

    grad = jax.grad(loss)(x)
    np.testing.assert_array_equal(np.asarray(grad), np.arange(64, dtype=np.float32))
    grad_jit = jax.jit(jax.grad(loss))(x)
    np.testing.assert_array_equal(np.asarray(grad_jit), np.arange(64, dtype=np.float32))


def test_jvp_and_vjp_of_saturated_values_pass_through():
    x = jnp.array([1e6, -jnp.inf, jnp.nan, 0.3], jnp.float32)
    y, t = jax.jvp(lambda v: fpemu.quantize(v, "e2m1fn"), (x,), (jnp.ones_like(x),))
    np.testing.assert_array_equal(np.asarray(t), np.ones(4, np.float32))
    _, vjp = jax.vjp(lambda v: fpemu.quantize(v, "e2m1fn"), x)
    np.testing.assert_array_equal(np.asarray(vjp(jnp.full(4, 2.0, jnp.float32))[0]), np.full(4, 2.0, np.float32))


# -- stochastic rounding ----------------------------------------------------------------------------


def test_stochastic_is_deterministic_per_key_and_varies_between_keys():
    x = _sample(10_000)
    a = fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=jax.random.key(1))
    b = fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=jax.random.key(1))
    c = fpemu.quantize(x, "e4m3fn", rounding="stochastic", key=jax.random.key(2))
    assert_same_bits(a, b)
    assert (np.asarray(a) != np.asarray(c)).mean() > 0.3


def test_stochastic_legacy_uint32_key_is_accepted():
    x = _sample(100)
    a = fpemu.quantize(x, "bf16", rounding="stochastic", key=jax.random.PRNGKey(5))
    b = fpemu.quantize(x, "bf16", rounding="stochastic", key=jax.random.key(5))
    assert_same_bits(a, b)


@pytest.mark.parametrize("fmt", ["e4m3fn", "bf16", "e2m1fn", "e8m0fnu"])
def test_stochastic_results_are_neighbours_and_representable_inputs_stay(fmt):
    x = _sample(20_000)
    y = np.asarray(fpemu.quantize(x, fmt, rounding="stochastic", key=jax.random.key(7)))
    down = np.asarray(fpemu.quantize(x, fmt, rounding="toward_zero"))
    away = np.where(
        np.signbit(np.asarray(x)),
        np.asarray(fpemu.quantize(x, fmt, rounding="toward_negative")),
        np.asarray(fpemu.quantize(x, fmt, rounding="toward_positive")),
    )
    assert np.all((y == down) | (y == away) | np.isnan(away))
    assert np.mean(y == away) > 0.1 and np.mean(y == down) > 0.1
    exact = np.asarray(fpemu.quantize(down, fmt, rounding="stochastic", key=jax.random.key(7)))
    np.testing.assert_array_equal(exact, down)


def test_stochastic_is_unbiased():
    """E[q(x)] = x: the mean over many draws of one value converges at the binomial rate."""
    fmt = fpemu.get_format("e4m3fn")
    for value, lo, hi in [(1.0 + 0.3 * 0.125, 1.0, 1.125), (0.3 * 2.0**-9, 0.0, 2.0**-9), (-100.7, -96.0, -104.0)]:
        n = 200_000
        x = jnp.full((n,), value, jnp.float32)
        y = np.asarray(fpemu.quantize(x, fmt, rounding="stochastic", key=jax.random.key(11)), np.float64)
        assert set(np.unique(y)) <= {lo, hi}
        p = (np.float32(value) - lo) / (hi - lo)
        p_hat = np.mean(y == hi)
        assert abs(p_hat - p) < 5 * math.sqrt(p * (1 - p) / n), (value, p, p_hat)


def test_stochastic_bits_are_uniform():
    from fpemu._engine import rng as _random

    bits = np.asarray(_random.random_uint32(_random.seeds_from_key(jax.random.key(0)), (1 << 20,)))
    for shift in (0, 8, 16, 24, 28):
        counts = np.bincount((bits >> shift) & 0xF, minlength=16)
        expected = bits.size / 16
        chi2 = np.sum((counts - expected) ** 2 / expected)
        assert chi2 < 60, (shift, chi2)  # 15 degrees of freedom: p < 1e-6 above ~52


def test_stochastic_does_not_depend_on_jit_or_shape():
    x = _sample(60)
    flat = fpemu.quantize(x, "e5m2", rounding="stochastic", key=jax.random.key(4))
    shaped = fpemu.quantize(x.reshape(6, 10), "e5m2", rounding="stochastic", key=jax.random.key(4))
    assert_same_bits(flat, shaped.reshape(60))


def test_ml_dtypes_names_and_dtypes_quantize_alike():
    x = _sample(1000)
    assert_same_bits(fpemu.quantize(x, "float8_e4m3fn"), fpemu.quantize(x, ml_dtypes.float8_e4m3fn))
    assert_same_bits(fpemu.quantize(x, jnp.bfloat16), fpemu.quantize(x, "bfloat16"))


@pytest.mark.parametrize("random_bits", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e2m1fn", "bf16", "e8m0fnu"])
def test_stochastic_up_probability_is_exact_over_all_random_values(fmt, random_bits):
    """Feed the engine every k-bit random value: exactly floor(2**k * f) of them round up."""
    from fractions import Fraction

    from fpemu._engine.convert import round_narrow

    fmt = fpemu.get_format(fmt)
    fp32 = fpemu.get_format("fp32")
    k = random_bits
    rng = np.random.default_rng(k)
    # inputs between neighbours (normal, subnormal and below the smallest value), plus exact values
    x = np.concatenate(
        [rng.uniform(0.5, 3.0, 24), rng.uniform(0, 4, 8) * fmt.min_subnormal, [fmt.min_normal, 1.0]]
    ).astype(np.float32)
    draws = (np.arange(1 << k, dtype=np.uint32) << np.uint32(32 - k)).astype(np.uint32)
    bits = np.repeat(x.view(np.uint32)[:, None], 1 << k, axis=1)
    random = np.broadcast_to(draws, bits.shape)
    out = jax.jit(lambda b, r: round_narrow(
        b, src=fp32, dst=fmt, rounding="stochastic", saturate=False, subnormals=True,
        output="src_bits", random=r, random_bits=k,
    ))(jnp.asarray(bits), jnp.asarray(random))  # fmt: skip
    y = np.asarray(out).view(np.float32)
    for i, xi in enumerate(x.tolist()):
        lo = reference.round_scalar(xi, fmt, rounding="toward_zero")
        hi = reference.round_scalar(xi, fmt, rounding="toward_positive")
        ups = int(np.sum(y[i] == np.float32(hi))) if hi != lo else 0
        if hi == lo:
            assert np.all(y[i] == np.float32(lo)), xi  # representable: never moves
            continue
        f = (Fraction(xi) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))
        assert set(y[i].tolist()) <= {lo, hi}
        assert ups == int(f * (1 << k)), (xi, lo, hi, ups, f)


_PUBLIC_OPS = {
    "quantize": lambda v: fpemu.quantize(v, "e3m2fn", rounding="nearest_away"),
    "encode": lambda v: fpemu.encode(v, "e2m3fn", rounding="toward_negative"),
    "decode": lambda v: fpemu.decode(fpemu.encode(v, "e5m2"), "e5m2"),
    "pack": lambda v: fpemu.pack(fpemu.encode(v, "e2m1fn"), "e2m1fn"),
    "unpack": lambda v: fpemu.unpack(fpemu.pack(fpemu.encode(v, "e3m2fn"), "e3m2fn"), "e3m2fn"),
}


@pytest.mark.long
@pytest.mark.parametrize("op", _PUBLIC_OPS, ids=str)
def test_every_public_op_is_the_same_eager_jitted_and_vmapped(op):
    fn = _PUBLIC_OPS[op]
    x = _sample(8 * 16).reshape(8, 16)
    eager = np.asarray(fn(x))
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), eager, strict=True)
    np.testing.assert_array_equal(np.asarray(jax.vmap(fn)(x)), eager, strict=True)
