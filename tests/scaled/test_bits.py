"""The exact float32 helpers of the fast path, against NumPy float32 arithmetic (IEEE: nearest even,
subnormals kept), on random bit patterns that cover subnormals, overflow and every exponent."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._scaled import bits as _bits

RNG = np.random.default_rng(20261121)
N = 1 << 14


def _bits_of(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _random_finite(n, rng=RNG):
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = np.where((b & 0x7F800000) == 0x7F800000, b & 0x807FFFFF, b)  # no inf/NaN
    sub = rng.integers(0, 1 << 23, n // 4, dtype=np.uint32) | (rng.integers(0, 2, n // 4, dtype=np.uint32) << 31)
    b[: n // 4] = sub  # a quarter subnormal
    b[:8] = [0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF]
    return b


def _short(n, bits, rng=RNG):
    """Normal float32 values with at most ``bits`` significant bits, exponents -30..30."""
    sig = rng.integers(1 << (bits - 1), 1 << bits, n).astype(np.float64)
    val = np.ldexp(sig, rng.integers(-30, 30, n) - bits) * rng.choice([-1.0, 1.0], n)
    val[:3] = [0.0, -0.0, 1.0]
    return val.astype(np.float32)


def test_unpack_matches_frexp():
    b = _random_finite(N) & 0x7FFFFFFF
    b = b[b != 0]
    ex, sig = jax.jit(_bits.unpack)(jnp.asarray(b))
    m, e = np.frexp(b.view(np.float32).astype(np.float64))
    np.testing.assert_array_equal(np.asarray(ex), e - 1)
    np.testing.assert_array_equal(np.asarray(sig), (m * 2.0**24).astype(np.uint32))


def test_mul_exact_at_the_subnormal_and_overflow_edges():
    a = np.array([1.0, 1.5, 3.0, 448.0, 6.0, 0.5, -1.5, 255.0], np.float32)
    b = np.array([2.0**-149, 2.0**-149, 2.0**-150 * 3, 2.0**-140, 2.0**127, 2.0**-126, 2.0**-148, 2.0**120], np.float64)
    b = b.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = a * b
    got = jax.jit(_bits.mul_exact)(jnp.asarray(_bits_of(a)), jnp.asarray(_bits_of(b)))
    np.testing.assert_array_equal(np.asarray(got), _bits_of(expected))


def _positive_normal(n, rng=RNG):
    b = _random_finite(n, rng) & 0x7FFFFFFF
    return np.where(b < 0x00800000, b | 0x00800000, b)  # subnormals become normals of the lowest binade


@pytest.mark.parametrize("bits", [1, 4, 6, 8])
@pytest.mark.parametrize("name", ["mul_exact", "mul_normal", "mul_scale"])
def test_mul_is_the_float32_product(name, bits):
    """`mul_exact` takes any finite ``b``, `mul_normal` a positive normal one, `mul_scale` a
    non-negative one (zeros and a quarter subnormal); random exponents put many products below
    2**-126 (checked) and beyond FLT_MAX."""
    a = _short(N, bits)
    b = {"mul_exact": _random_finite(N), "mul_normal": _positive_normal(N)}.get(name, _random_finite(N) & 0x7FFFFFFF)
    with np.errstate(over="ignore"):
        expected = a * b.view(np.float32)
    assert np.sum((np.abs(expected) < 2.0**-126) & (expected != 0)) > N // 20
    got = jax.jit(getattr(_bits, name))(jnp.asarray(_bits_of(a)), jnp.asarray(b))
    np.testing.assert_array_equal(np.asarray(got), _bits_of(expected))


@pytest.mark.parametrize("name", ["mul_normal", "mul_scale"])
def test_mul_at_the_subnormal_edges_with_a_scalar_scale(name):
    """One scale for every element (a tensor scale): ties at the subnormal quantum, products that round
    up to 2**-126 or just stay below, the smallest subnormal, and its half (a tie to zero); for
    `mul_scale` also subnormal scales (the largest, one of a single bit, the smallest) and zero,
    against elements up to 2**120, whose products with them are normal."""
    g = np.float32(2.0**-126 * (1 + 2.0**-23))  # 0x00800001
    a = np.array([1.0, -1.0, 1.5, 2.0**-23, 2.0**-24, 1.5 * 2.0**-24, 1 - 2.0**-8, -(1 - 2.0**-8), 0.0, -0.0])
    a = np.concatenate([a, np.ldexp(np.arange(129, 256), -8 - np.arange(127) % 30)]).astype(np.float32)
    scales = [g, np.float32(2.0**-126), np.float32(1.75 * 2.0**-120), np.float32(2.0**127)]
    if name == "mul_scale":
        a = np.concatenate([a, np.ldexp(np.arange(129, 256), np.arange(127) % 121), [2.0**120, -(2.0**100)]])
        a = a.astype(np.float32)
        subnormal = np.array([0x007FFFFF, 0x00400000, 0x00000003, 0x00000001, 0], np.uint32).view(np.float32)
        scales += list(subnormal)
    for scale in scales:
        with np.errstate(over="ignore"):
            expected = a * scale
        if 0 < scale < 2.0**-126:  # both of mul_scale's paths: normal products and subnormal ones
            assert (np.abs(expected) >= 2.0**-126).any() and ((np.abs(expected) < 2.0**-126) & (expected != 0)).any()
        got = jax.jit(getattr(_bits, name))(jnp.asarray(_bits_of(a)), jnp.asarray(_bits_of(scale)))
        np.testing.assert_array_equal(np.asarray(got), _bits_of(expected))


def test_mul_normal_of_a_product_with_a_constant():
    """XLA would compute ``(3 * d) * g`` for a broadcast scalar ``g`` as ``d * (3 * g)``: not the same bits."""
    d = _short(N, 4) * np.float32(2.0**-40)
    g = np.float32(0.00535397)
    with np.errstate(over="ignore"):
        expected = (np.float32(3) * d) * g
    fn = jax.jit(lambda d, g: _bits.mul_normal(_bits.to_bits(jnp.float32(3) * d), _bits.to_bits(g)))
    np.testing.assert_array_equal(np.asarray(fn(jnp.asarray(d), jnp.asarray(g))), _bits_of(expected))


def test_reciprocal_including_subnormals():
    b = _random_finite(N) & 0x7FFFFFFF
    b = b[b <= _bits_of(np.float32(2.0**126))]
    with np.errstate(divide="ignore", over="ignore"):
        expected = np.float32(1) / b.view(np.float32)
    got = jax.jit(_bits.reciprocal)(jnp.asarray(b))
    np.testing.assert_array_equal(_bits_of(got), _bits_of(expected))


def test_scale_up_is_the_exact_product_rounded_once():
    q = _short(N, 4)
    k = RNG.integers(-127, 128, N).astype(np.int32)
    with np.errstate(over="ignore"):
        expected = np.ldexp(q.astype(np.float64), k).astype(np.float32)
    got = jax.jit(_bits.scale_up)(jnp.asarray(_bits_of(q)), jnp.asarray(k))
    np.testing.assert_array_equal(np.asarray(got), _bits_of(expected))


def test_scale_up_passes_specials():
    q = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0], np.float32)
    got = jax.jit(_bits.scale_up)(jnp.asarray(_bits_of(q)), jnp.full(5, 100, jnp.int32))
    np.testing.assert_array_equal(np.asarray(got), _bits_of(q))


def test_scale_down_exact_where_normal_and_substitutes_elsewhere():
    b = _random_finite(N)
    k = RNG.integers(-127, 128, N).astype(np.int32)
    exact = np.ldexp(b.view(np.float32).astype(np.float64), -k)
    got = np.asarray(jax.jit(_bits.scale_down)(jnp.asarray(b), jnp.asarray(k))).view(np.float32)
    mag = np.abs(exact)
    normal = (mag >= 2.0**-126) & (mag <= np.finfo(np.float32).max)
    np.testing.assert_array_equal(got[normal], exact[normal].astype(np.float32))
    tiny = (mag < 2.0**-126) & (mag > 0)
    np.testing.assert_array_equal(np.abs(got[tiny]), np.float32(2.0**-126))
    np.testing.assert_array_equal(np.signbit(got[tiny]), np.signbit(exact[tiny]))
    huge = mag > np.finfo(np.float32).max
    np.testing.assert_array_equal(np.abs(got[huge]), np.finfo(np.float32).max)
    np.testing.assert_array_equal(_bits_of(got[mag == 0]), b[mag == 0])  # signed zeros kept


def test_mul_flushing_exact_where_normal():
    b = _random_finite(N)
    m = np.ldexp(RNG.uniform(1, 2, N), RNG.integers(-120, 127, N)).astype(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        expected = b.view(np.float32) * m
    got = np.asarray(jax.jit(_bits.mul_flushing)(jnp.asarray(b), jnp.asarray(m)))
    normal = np.abs(expected) >= 2.0**-126
    np.testing.assert_array_equal(_bits_of(got[normal]), _bits_of(expected[normal]))
    small = ~normal
    assert np.all((got[small] == 0) | (_bits_of(got[small]) == _bits_of(expected[small])))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("sh", [0, 1, 5, 23, 31, 32, 33, 40])
def test_rne_shift(sh):
    v = np.concatenate([RNG.integers(0, 1 << 32, 4096, dtype=np.uint64), [0, 1, 2, 3, 1 << 31, (1 << 31) + 1]])
    v = v.astype(np.uint32)
    got = np.asarray(jax.jit(_bits.rne_shift)(jnp.asarray(v), jnp.full(v.shape, sh, jnp.int32)))
    if sh <= 31:  # the short form, for callers that bound the shift
        short = jax.jit(lambda a, s: _bits.rne_shift(a, s, max_shift=31))(
            jnp.asarray(v), jnp.full(v.shape, sh, jnp.int32)
        )
        np.testing.assert_array_equal(np.asarray(short), got)
    expected = []
    for x in v.tolist():
        q, r = divmod(x, 1 << sh)
        half = (1 << sh) / 2
        expected.append(q + (r > half or (r == half and sh > 0 and q % 2 == 1)))
    np.testing.assert_array_equal(got, np.array(expected, np.uint64).astype(np.uint32))


def _grid_constants():
    """The constants `_rne.Grid.for_scale` scales: every registered format's largest value, smallest
    value and half of it (those that are positive normal float32 values), and some that take
    `scale_up`'s general path (a long significand, a value that the lowest scale rounds)."""
    from fpemu._core.registry import formats

    values = {3.0 * 2.0**-20, float(np.float32(1.0 + 2.0**-23)), 2.0**-100, 448.0, 2.0**127}
    for fmt in formats():
        for v in (fmt.max, fmt.min_subnormal, fmt.min_subnormal / 2):
            if 2.0**-126 <= v <= float(np.finfo(np.float32).max) and float(np.float32(v)) == v:
                values.add(v)
    return sorted(values)


@pytest.mark.long
@pytest.mark.parametrize("k_min", [-127, -126, 0])
def test_scale_up_constant_is_scale_up(k_min):
    k = jnp.arange(k_min, 300, dtype=jnp.int32)
    values = _grid_constants()
    # one program for every constant (a row each), compiled once
    got = jax.jit(lambda k: jnp.stack([_bits.scale_up_constant(v, k, k_min) for v in values]))(k)
    constants = jnp.asarray(_bits_of(np.array(values, np.float32)))
    expected = jax.jit(_bits.scale_up)(constants[:, None], k[None, :])
    for value, got_row, expected_row in zip(values, np.asarray(got), np.asarray(expected), strict=True):
        np.testing.assert_array_equal(got_row, expected_row, err_msg=f"{value!r}")


@pytest.mark.parametrize("numerator", [1.0, 6.0, 448.0, 2688.0, 57344.0, 2.0**110, float(np.finfo(np.float32).max)])
def test_constant_over_amax_including_subnormals(numerator):
    """`_const_over`: the float32 quotient, rounded once, for subnormal amax too (where it is not subnormal)."""
    from fpemu._scaled.scale import _const_over

    b = _random_finite(N) & 0x7FFFFFFF
    b = b[b != 0]
    with np.errstate(over="ignore"):
        expected = np.float32(numerator) / b.view(np.float32)
    keep = np.abs(expected) >= np.float32(2.0**-126)  # a subnormal quotient is outside its contract (flushed)
    b, expected = b[keep], expected[keep]
    got = jax.jit(lambda a: _const_over(numerator, a))(jnp.asarray(b))
    np.testing.assert_array_equal(_bits_of(got), _bits_of(expected))
