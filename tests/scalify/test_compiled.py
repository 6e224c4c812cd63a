"""What a scalified program compiles to: exact scale ratios without divisions, and scale arithmetic that
XLA does not copy into every fusion (the compile-time defect of bench/RESULTS_scalify.md)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu.scalify as jsa
from fpemu.scalify._pow2 import pow2_divide


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def assert_same(actual, expected):
    """Equal bits, any NaN matching any NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    bad = (bits(actual) != bits(expected)) & ~nan
    assert not bad.any(), list(zip(actual[bad][:5].tolist(), expected[bad][:5].tolist()))


def pairs(nums, dens):
    """Every (num, den) pair as two flat arrays (elementwise: a broadcast divisor lets XLA multiply by
    a reciprocal instead of dividing, which is not the division being compared with)."""
    n, d = np.meshgrid(nums, dens, indexing="ij")
    return n.ravel(), d.ravel()


def powers(dtype, lo, hi):
    return np.array([0, np.inf] + [2.0**e for e in range(lo, hi + 1)]).astype(dtype)


def test_pow2_divide_float16_every_value_by_every_power_of_two():
    nums, dens = pairs(np.arange(2**16, dtype=np.uint16).view(np.float16), powers(np.float16, -24, 15))
    out = jax.jit(jax.vmap(pow2_divide))(nums, dens)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # exact in float64, rounded once
        expected = np.where(dens == 0, 0, nums.astype(np.float64) / dens.astype(np.float64)).astype(np.float16)
    assert_same(out, expected)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bfloat16"])
def test_pow2_divide_is_the_division(dtype):
    """Bit for bit XLA's division (0 where the divisor is 0), from 2**-126 to 2**127 (whose
    reciprocal is subnormal), infinite divisors and special numerators included."""
    rng = np.random.default_rng(0)
    if dtype == np.float32:
        finite = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        dens = powers(np.float32, -126, 127)
    else:
        finite = np.arange(2**16, dtype=np.uint16).view(dtype)
        dens = powers(dtype, -126, 127)[[0, 1, 2, 3, 10, 100, 127, 128, 129, 200, 250, 251, 252, 253]]
    special = np.array([0, -0.0, np.inf, -np.inf, np.nan, 2.0**-126, 2.0**127, 3.0, -1.5 * 2.0**127], dtype)
    nums, dens = pairs(np.concatenate([finite, special]), dens)
    divide = jax.vmap(lambda n, d: jnp.where(d == 0, jnp.zeros_like(d), n / d))
    assert_same(jax.jit(jax.vmap(pow2_divide))(nums, dens), jax.jit(divide)(nums, dens))


def test_pow2_divide_float64(x64):
    rng = np.random.default_rng(1)
    finite = rng.integers(0, 2**63, 300, dtype=np.uint64).view(np.float64)
    special = np.array([0, -0.0, np.inf, -np.inf, np.nan, 2.0**-1022, 5e-324, 2.0**1023, -3.0])
    nums, dens = pairs(np.concatenate([finite, -finite, special]), powers(np.float64, -1022, 1023)[::7])
    divide = jax.vmap(lambda n, d: jnp.where(d == 0, jnp.zeros_like(d), n / d))
    assert_same(jax.jit(jax.vmap(pow2_divide))(nums, dens), jax.jit(divide)(nums, dens))


A = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32) * 100
C = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
F16_SUB = 2.0**-20  # a float16 subnormal


@pytest.mark.parametrize("mode", ["DOWN", "UP", "STOCHASTIC"])
@pytest.mark.parametrize(
    "sa, sb, dtype",
    [(3.0, 5.0, np.float32), (2.0**127, 2.0**126, np.float32), (2.0**127, 2.0**-120, np.float32),
     (2.0**-126, 2.0**-126, np.float32), (F16_SUB, F16_SUB / 4, np.float16), (0.0, 2.0, np.float32),
     (0.0, 0.0, np.float32)],
)  # fmt: skip
def test_add_rescales_exactly(sa, sb, dtype, mode):
    """``data = da * (sa/s) + db * (sb/s)``, each product in float32 rounded once to float16, with
    the quotients of float64 (exact: ``s`` is a power of two) rounded to the scale dtype."""
    a = jsa.ScaledArray(jnp.asarray(A, jnp.float16), jnp.asarray(sa, dtype))
    b = jsa.ScaledArray(jnp.asarray(C, jnp.float16), jnp.asarray(sb, dtype))
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode[mode]):
        out = jax.jit(jsa.scalify(jnp.add))(a, b)
    s = np.float64(np.asarray(out.scale))
    assert s == 0 or s == np.inf or np.frexp(s)[0] == 0.5  # 0, inf or a power of two

    def part(data, scale):
        ratio = np.asarray(np.float64(scale) / s if s else 0.0).astype(dtype).astype(np.float32)
        return (np.asarray(data, np.float16).astype(np.float32) * ratio).astype(np.float16)

    assert_same(out.data, part(A, sa) + part(C, sb))


def _deep_step(depth):
    def loss(ws, x):
        for w in ws:
            x = x + jnp.tanh(x @ w)
        return jnp.sum(x * x)

    def step(ws, x):
        return [w - 0.1 * g for w, g in zip(ws, jax.grad(loss)(ws, x))]

    return step


def _lines(fn, *args):
    return jax.jit(fn).lower(*args).compile().as_text().count("\n")


@pytest.mark.long
@pytest.mark.parametrize("mode", ["DOWN", "UP"])
def test_compiled_scale_arithmetic_is_not_copied_into_every_fusion(mode):
    """A training step of 8 residual layers compiles to at most 12 times the plain program's lines
    (before each scale was materialised once: 24 times, 28 under UP, growing quadratically)."""
    rng = np.random.default_rng(4)
    ws = [rng.standard_normal((8, 8)).astype(np.float16) for _ in range(8)]
    x = rng.standard_normal((4, 8)).astype(np.float16)
    step = _deep_step(len(ws))
    scaled = [jsa.as_scaled_array(v, scale=np.float32(1)) for v in ws], jsa.as_scaled_array(x, scale=np.float32(1))
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode[mode]):
        ratio = _lines(jsa.scalify(step), *scaled) / _lines(step, ws, x)
    assert ratio <= 12, ratio
