"""Every scale rule against its formula, on hand-picked power-of-two scales, compared as bits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
import fpemu.scalify as jsa
from fpemu.scalify import core

RNG = np.random.default_rng(1234)
A = RNG.standard_normal((4, 16)).astype(np.float32)
B = RNG.standard_normal((16, 3)).astype(np.float32)
C = RNG.standard_normal((4, 16)).astype(np.float32)
SA, SB, SC = np.float32(2.0), np.float32(8.0), np.float32(0.25)


def sa(data=A, scale=SA):
    return jsa.ScaledArray(jnp.asarray(data), jnp.asarray(scale))


def assert_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual.view(f"u{actual.dtype.itemsize}"), expected.view(f"u{expected.itemsize}"))


def assert_scaled(out, data, scale):
    assert isinstance(out, jsa.ScaledArray), type(out)
    assert_bits(out.scale, np.asarray(scale, np.float32))
    assert_bits(out.data, data)


def down(x):
    return np.float32(core.pow2_round_down(np.float32(x)))


# -- arithmetic --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [jnp.add, jnp.subtract], ids=["add", "sub"])
def test_add_sub(op):
    s = down(np.sqrt(SA**2 + SB**2))  # sqrt(68) -> 8
    out = jsa.scalify(op)(sa(A, SA), sa(C, SB))
    assert_scaled(out, op(A * (SA / s), C * (SB / s)), s)
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.UP):
        assert float(jsa.scalify(op)(sa(A, SA), sa(C, SB)).scale) == 16.0
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.NONE):
        assert float(jsa.scalify(op)(sa(A, SA), sa(C, SB)).scale) == np.float32(np.sqrt(np.float32(68)))


def test_add_any_and_zero_scales_make_no_nan():
    rule, _ = core.find_registered_scaled_op("add_any")
    assert rule is jsa.lax.scaled_add
    zero = jsa.ScaledArray(jnp.asarray(A), jnp.float32(0))
    out = jsa.scalify(jnp.add)(zero, zero)
    assert float(out.scale) == 0.0 and not np.isnan(np.asarray(out.data)).any()
    out = jsa.scalify(jnp.add)(zero, sa(C, SB))
    assert_scaled(out, C + A * 0, SB)


def test_mul_div_pow_sqrt():
    assert_scaled(jsa.scalify(jnp.multiply)(sa(A, SA), sa(C, SB)), A * C, SA * SB)
    assert_scaled(jsa.scalify(jnp.divide)(sa(A, SA), sa(C, SB)), A / C, SA / SB)
    assert_scaled(jsa.scalify(lambda x: x**3)(sa(A, SA)), lax.integer_pow(jnp.asarray(A), 3), SA**3)
    assert_scaled(jsa.scalify(lax.square)(sa(A, SA)), lax.square(jnp.asarray(A)), SA**2)
    pos = np.abs(A) + 0.5
    assert_scaled(jsa.scalify(jnp.sqrt)(sa(pos, np.float32(4))), jnp.sqrt(pos), 2.0)
    assert_scaled(jsa.scalify(lax.rsqrt)(sa(pos, np.float32(4))), lax.rsqrt(jnp.asarray(pos)), 0.5)


def test_mul_by_a_python_scalar_takes_its_pow2_scale():
    out = jsa.scalify(lambda x: x * 3.0)(sa(A, SA))
    assert_scaled(out, A * np.float32(1.5), SA * 2)


def test_rescale_ratios_beyond_float16_range_round_once():
    # A broadcast float16 scalar below 2**-15 gets a scale whose inverse (2**17 for 1e-5) overflows
    # float16: its data is computed in float32 and rounded once (it used to be inf).
    a16 = A.astype(np.float16)
    x = jsa.ScaledArray(jnp.asarray(a16), jnp.float32(2.0**-10))
    eps = np.float16(1e-5)
    assert float(eps) == 1.3125 * 2.0**-17
    out = jsa.scalify(lambda v: v * jnp.full(v.shape, eps))(x)
    assert_scaled(out, jnp.asarray(a16) * jnp.float16(1.3125), 2.0**-27)
    out = jsa.scalify(lambda v: v + jnp.full(v.shape, eps))(x)  # scale pow2(sqrt(2**-20 + 2**-34)) = 2**-10
    assert_scaled(out, jnp.asarray(a16) + jnp.float16(1.3125 * 2.0**-7), 2.0**-10)
    # A ratio below float16's smallest subnormal: 1024 * 2**-30 is 2**-20 in the larger scale (it used to be 0).
    tiny = jsa.ScaledArray(jnp.full((4,), 1024, jnp.float16), jnp.float32(2.0**-30))
    neg = jsa.ScaledArray(jnp.full((4,), -1, jnp.float16), jnp.float32(1))
    assert_scaled(jsa.scalify(jnp.maximum)(tiny, neg), np.full((4,), 2.0**-20, np.float16), 1.0)


# -- matmuls ----------------------------------------------------------------------------------------


def test_dot_general():
    out = jsa.scalify(jnp.matmul)(sa(A, SA), sa(B, SB))
    assert_scaled(out, (jnp.asarray(A) @ jnp.asarray(B)) / np.float32(4), SA * SB * 4)  # K=16: sqrt = 4


def test_dot_general_batch_and_several_contracting_dims():
    x = RNG.standard_normal((2, 3, 4, 8)).astype(np.float32)
    y = RNG.standard_normal((2, 4, 8, 5)).astype(np.float32)
    dims = (((2, 3), (1, 2)), ((0,), (0,)))
    ref = lax.dot_general(jnp.asarray(x), jnp.asarray(y), dims) / np.float32(4)  # K=32: pow2(5.66) = 4
    out = jsa.scalify(lambda u, v: lax.dot_general(u, v, dims))(sa(x, SA), sa(y, SB))
    assert_scaled(out, ref, SA * SB * 4)
    attention = jsa.scalify(lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k))
    q = RNG.standard_normal((2, 5, 64)).astype(np.float32)
    out = attention(sa(q, SA), sa(q, SB))
    assert_scaled(out, jnp.einsum("bqd,bkd->bqk", q, q) / np.float32(8), SA * SB * 8)


def test_conv():
    x = RNG.standard_normal((1, 2, 9)).astype(np.float32)  # N C W
    w = RNG.standard_normal((4, 2, 8)).astype(np.float32)  # O I W: K = 16
    conv = lambda u, v: lax.conv_general_dilated(u, v, (1,), "VALID")
    assert_scaled(
        jsa.scalify(conv)(sa(x, SA), sa(w, SB)), conv(jnp.asarray(x), jnp.asarray(w)) / np.float32(4), SA * SB * 4
    )


# -- reductions -------------------------------------------------------------------------------------


@pytest.mark.long
def test_reductions():
    x = jnp.asarray(A)
    assert_scaled(jsa.scalify(lambda v: v.sum(axis=1))(sa()), x.sum(axis=1) / np.float32(4), SA * 4)
    assert_scaled(jsa.scalify(lambda v: v.sum(axis=0))(sa()), x.sum(axis=0) / np.float32(2), SA * 2)  # N=4
    assert_scaled(jsa.scalify(lambda v: v.prod(axis=0))(sa()), x.prod(axis=0), SA**4)
    assert_scaled(jsa.scalify(lambda v: v.max(axis=1))(sa()), x.max(axis=1), SA)
    assert_scaled(jsa.scalify(lambda v: v.min())(sa()), x.min(), SA)
    assert_bits(jsa.scalify(lambda v: jnp.argmax(v, axis=1))(sa()), jnp.argmax(x, axis=1))
    assert_scaled(jsa.scalify(lambda v: jnp.cumsum(v, axis=1))(sa()), jnp.cumsum(x, axis=1) / np.float32(4), SA * 4)
    assert_scaled(jsa.scalify(lambda v: lax.cummax(v, axis=1))(sa()), lax.cummax(x, axis=1), SA)
    window = lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2), (1, 2), "VALID")
    assert_scaled(jsa.scalify(window)(sa()), window(x), SA)
    window_sum = lambda v: lax.reduce_window(v, 0.0, lax.add, (1, 2), (1, 2), "VALID")
    assert_scaled(jsa.scalify(window_sum)(sa()), window_sum(x), SA)


# -- selection: the max of the scales ------------------------------------------------------------------


def test_max_min_select_concatenate_clamp():
    s = max(SA, SB)
    a, c = A * (SA / s), C * (SB / s)
    assert_scaled(jsa.scalify(jnp.maximum)(sa(A, SA), sa(C, SB)), jnp.maximum(a, c), s)
    assert_scaled(jsa.scalify(jnp.minimum)(sa(A, SA), sa(C, SB)), jnp.minimum(a, c), s)
    pred = A > 0
    assert_scaled(jsa.scalify(lambda p, u, v: jnp.where(p, u, v))(pred, sa(A, SA), sa(C, SB)), jnp.where(pred, a, c), s)
    cat = jsa.scalify(lambda u, v: jnp.concatenate([u, v]))(sa(A, SA), sa(C, SB))
    assert_scaled(cat, jnp.concatenate([a, c]), s)


def test_stack_and_unstack():
    s = max(SA, SB)
    out = jsa.scalify(lambda u, v: jnp.stack([u, v], axis=1))(sa(A, SA), sa(C, SB))
    assert_scaled(out, jnp.stack([A * (SA / s), C * (SB / s)], axis=1), s)
    rows = jsa.scalify(lambda v: jnp.unstack(v, axis=1))(sa())
    assert len(rows) == A.shape[1]
    for row, ref in zip(rows, jnp.unstack(jnp.asarray(A), axis=1)):
        assert_scaled(row, ref, SA)


def test_relu_and_where_zero_keep_the_scale():
    for fn in (lambda v: jnp.maximum(v, 0.0), jax.nn.relu, lambda v: jnp.where(v > 0, v, 0.0)):
        assert_scaled(jsa.scalify(fn)(sa()), jnp.maximum(jnp.asarray(A), 0.0), SA)


def test_clamp():
    out = jsa.scalify(lambda v: jnp.clip(v, -1.0, 1.0))(sa(A, SB))
    assert_scaled(out, jnp.clip(jnp.asarray(A), -1 / SB, 1 / SB), SB)


# -- data movement: the scale unchanged ---------------------------------------------------------------

MOVES = {
    "reshape": lambda v: v.reshape(8, 8),
    "transpose": lambda v: v.T,
    "broadcast": lambda v: jnp.broadcast_to(v, (2, 4, 16)),
    "slice": lambda v: v[1:3, ::2],
    "rev": lambda v: v[::-1],
    "squeeze": lambda v: v[None].squeeze(0),
    "neg": lambda v: -v,
    "abs": jnp.abs,
    "pad_zero": lambda v: jnp.pad(v, 1),
    "dynamic_slice": lambda v: lax.dynamic_slice(v, (jnp.int32(1), jnp.int32(2)), (2, 3)),
    "gather": lambda v: v[jnp.array([3, 0, 1])],
    "reduce_precision": lambda v: lax.reduce_precision(v, 5, 2),
    "sort": lambda v: jnp.sort(v, axis=1),
    "copy": jnp.copy,
    "stop_gradient": lax.stop_gradient,
    "tile": lambda v: jnp.tile(v, (2, 1)),  # the tile primitive from jax 0.12, else broadcast and reshape
}


@pytest.mark.parametrize("name", list(MOVES))
def test_same_scale(name):
    fn = MOVES[name]
    assert_scaled(jsa.scalify(fn)(sa()), fn(jnp.asarray(A)), SA)


def test_split_top_k_pad_value():
    parts = jsa.scalify(lambda v: jnp.split(v, 2, axis=1))(sa())
    for part, ref in zip(parts, jnp.split(jnp.asarray(A), 2, axis=1)):
        assert_scaled(part, ref, SA)
    values, index = jsa.scalify(lambda v: lax.top_k(v, 3))(sa())
    ref_values, ref_index = lax.top_k(jnp.asarray(A), 3)
    assert_scaled(values, ref_values, SA)
    assert_bits(index, ref_index)
    padded = jsa.scalify(lambda v: jnp.pad(v, 1, constant_values=1.0))(sa())
    assert_scaled(padded, jnp.pad(jnp.asarray(A), 1, constant_values=1 / SA), SA)


def test_updates_take_the_max_scale():
    s = max(SA, SB)
    upd = C[0]
    out = jsa.scalify(lambda v, u: v.at[1].set(u))(sa(A, SA), sa(upd, SB))
    assert_scaled(out, jnp.asarray(A * (SA / s)).at[1].set(upd * (SB / s)), s)
    out = jsa.scalify(lambda v, u: v.at[1].add(u))(sa(A, SA), sa(upd, SB))
    assert_scaled(out, jnp.asarray(A * (SA / s)).at[1].add(upd * (SB / s)), s)
    out = jsa.scalify(lambda v, u: lax.dynamic_update_slice(v, u, (jnp.int32(1), jnp.int32(0))))(
        sa(A, SA), sa(C[:1], SB)
    )
    assert_scaled(out, lax.dynamic_update_slice(jnp.asarray(A * (SA / s)), C[:1] * (SB / s), (1, 0)), s)


# -- casts -------------------------------------------------------------------------------------------


def test_convert_element_type_goes_through_fpemu_quantize():
    assert_scaled(jsa.scalify(lambda v: v.astype(jnp.float16))(sa()), A.astype(np.float16), SA)
    x = np.array([[464.0, 1.0625, 3 * 2.0**-10, 2.0**-10]], np.float32)  # e4m3fn corner cases
    out = jsa.scalify(lambda v: v.astype(jnp.float8_e4m3fn))(sa(x, SA))
    assert_scaled(out, fpemu.quantize(jnp.asarray(x), "e4m3fn").astype(jnp.float8_e4m3fn), SA)
    assert np.asarray(out.data, np.float32).tolist() == [[448.0, 1.0, 2.0**-8, 0.0]]  # OCP: subnormals, ties to even
    assert_bits(jsa.scalify(lambda v: v.astype(jnp.int32))(sa()), (A * SA).astype(np.int32))


# -- unscaled results ----------------------------------------------------------------------------------

UNSCALED = {
    "exp": jnp.exp, "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
    "erf": jax.scipy.special.erf, "floor": jnp.floor, "pow": lambda v: jnp.power(jnp.abs(v) + 1, v),
}  # fmt: skip


@pytest.mark.parametrize("name", list(UNSCALED))
def test_unscale_compute_rescale(name):
    fn = UNSCALED[name]
    assert_scaled(jsa.scalify(fn)(sa(A / 4, SA)), fn(jnp.asarray(A / 4 * SA)), 1.0)


@pytest.mark.parametrize(
    "fn",
    [jax.grad(lambda v: jnp.sum(jnp.tanh(v))), jax.grad(lambda v: jnp.sum(jax.scipy.special.erf(v)))],
    ids=["tanh", "erf"],
)
def test_derivatives_of_tanh_and_erf(fn):
    """From jax 0.11.2 and 0.12 these hold ``one_minus_square`` and ``polynomial`` (the fallback: unscaled
    operands, scale 1); before, the same derivatives as ``mul``/``sub`` chains. Power-of-two scales: the
    value is the unscaled function's, bit for bit."""
    out = jsa.scalify(fn)(sa(A / 4, SA))
    assert_bits(jsa.asarray(out, jnp.float32), fn(jnp.asarray(A / 4 * SA)))


def test_log_sign_compare_is_finite():
    pos = np.abs(A) + 0.5
    out = jsa.scalify(jnp.log)(sa(pos, SB))
    assert_scaled(out, jnp.log(pos) + np.float32(np.log(np.float32(SB))), 1.0)
    assert_scaled(jsa.scalify(jnp.sign)(sa()), jnp.sign(A), 1.0)
    assert_bits(jsa.scalify(lambda u, v: u < v)(sa(A, SA), sa(C, SB)), A * SA < C * SB)
    inf = jsa.ScaledArray(jnp.asarray(A), jnp.float32(np.inf))
    assert not np.asarray(jsa.scalify(jnp.isfinite)(inf)).any()


def test_unscaled_inputs_run_unchanged():
    f = lambda u, v: jnp.tanh(u @ v).sum()
    closed = jax.make_jaxpr(f)(A, B)
    assert_bits(jsa.scalify(f)(A, B), jax.core.eval_jaxpr(closed.jaxpr, closed.consts, A, B)[0])
    assert_bits(jax.jit(jsa.scalify(f))(A, B), jax.jit(f)(A, B))
