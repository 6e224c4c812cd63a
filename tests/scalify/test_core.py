"""fpemu.scalify core: power-of-two helpers, ScaledArray, construction, configuration, registry."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.extend.core import Primitive

import fpemu.scalify as jsa
from fpemu.scalify import core

F16_TINY = float(np.finfo(np.float16).smallest_subnormal)  # 2**-24


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def assert_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(bits(actual), bits(expected))


# -- pow2 helpers ------------------------------------------------------------------------------------

DOWN = [(0.0, 0.0), (1.0, 1.0), (2.1, 2.0), (0.3, 0.25), (0.51, 0.5), (65500.0, 32768.0), (F16_TINY, F16_TINY),
        (float(np.finfo(np.float16).smallest_normal),) * 2, (3.123283386230469e-05, 3.0517578125e-05)]  # fmt: skip
UP = [(2.1, 4.0), (0.3, 0.5), (0.51, 1.0), (17000.0, 32768.0), (4.0, 4.0), (1.0, 1.0), (0.0, 0.0)]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("value, expected", DOWN)
def test_pow2_round_down(value, expected, dtype):
    out = core.pow2_round_down(dtype(value))
    assert isinstance(out, (np.ndarray, np.generic))  # NumPy in, NumPy out (static)
    assert_bits(out, np.asarray(dtype(expected)))
    if dtype != np.float64:
        assert_bits(core.pow2_round_down(jnp.asarray(dtype(value))), np.asarray(dtype(expected)))


@pytest.mark.parametrize("value, expected", UP)
def test_pow2_round_up_keeps_powers_of_two(value, expected):
    assert_bits(core.pow2_round_up(np.float16(value)), np.asarray(np.float16(expected)))
    assert_bits(core.pow2_round(jnp.float32(value), jsa.Pow2RoundMode.UP), np.asarray(np.float32(expected)))


@pytest.mark.parametrize("mode", ["DOWN", "UP"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_pow2_special_values_give_inf(mode, dtype):
    x = np.array([np.inf, -np.inf, np.nan], dtype)
    out = core.pow2_round(x, jsa.Pow2RoundMode[mode])
    assert_bits(out, np.full(3, np.inf, dtype))
    scale, mantissa = core.pow2_decompose(jnp.asarray(x), np.float32)
    assert_bits(scale, np.full(3, np.inf, np.float32))
    np.testing.assert_array_equal(np.asarray(mantissa), x)


def test_pow2_decompose_round_trips_float16_subnormals():
    x = np.array([F16_TINY, 3 * F16_TINY, 3.123283386230469e-05, 65504.0, -2.1, 0.0], np.float16)
    scale, mantissa = core.pow2_decompose(x, np.float32)
    assert scale.dtype == np.float32 and mantissa.dtype == np.float16
    np.testing.assert_array_equal(scale * mantissa.astype(np.float32), x.astype(np.float32))
    assert np.all((np.abs(mantissa[:-1]) >= 1) & (np.abs(mantissa[:-1]) < 2))


def test_get_mantissa():
    for dtype in (np.float16, np.float32):
        assert core.get_mantissa(dtype(65504)) == 1.9990234375
        assert core.get_mantissa(dtype(2.1)) * core.pow2_round_down(dtype(2.1)) == dtype(2.1)


@pytest.mark.long
def test_pow2_stochastic_is_keyed_unbiased_and_keeps_powers_of_two():
    key = jax.random.key(7)
    x = jnp.full((4096,), 3.0, jnp.float32)  # 2 * 1.5: up with probability 1/2
    out = core.pow2_round(x, jsa.Pow2RoundMode.STOCHASTIC, key=key)
    assert set(np.unique(np.asarray(out)).tolist()) == {2.0, 4.0}
    assert abs(float(out.mean()) - 3.0) < 0.1
    assert_bits(out, core.pow2_round(x, "STOCHASTIC", key=key))  # reproducible
    powers = jnp.asarray([0.25, 1.0, 8.0, 0.0], jnp.float32)
    assert_bits(core.pow2_round(powers, jsa.Pow2RoundMode.STOCHASTIC, key=key), np.asarray(powers))
    with pytest.raises(ValueError, match="needs key"):
        core.pow2_round(x, jsa.Pow2RoundMode.STOCHASTIC)
    with pytest.raises(ValueError, match="mode must be a Pow2RoundMode"):
        core.pow2_round(x, "sideways")


# -- ScaledArray -------------------------------------------------------------------------------------


def test_scaled_array_is_a_pytree_with_data_attributes():
    sa = jsa.scaled_array([1.0, 1.5], np.float32(4), dtype=jnp.float16)
    assert sa.dtype == np.float16 and sa.shape == (2,) and sa.size == 2 and sa.ndim == 1
    assert sa.aval == jax.core.ShapedArray((2,), jnp.float16)
    assert jax.tree_util.tree_leaves(sa)[1].dtype == np.float32
    assert np.asarray(sa).tolist() == [4.0, 6.0]
    cast = sa.astype(jnp.float32)
    assert cast.dtype == np.float32 and cast.scale is sa.scale
    doubled = jax.jit(lambda s: jax.tree_util.tree_map(lambda v: v * 2, s))(sa)
    assert isinstance(doubled, jsa.ScaledArray)
    with pytest.raises(ValueError, match="scalar"):
        jsa.ScaledArray(np.ones(2), np.ones(2))


def test_to_array_beyond_the_data_range():
    sa = jsa.ScaledArray(np.array([1.5], np.float16), np.float32(2**18))  # 1.5 * 2**18 overflows float16
    assert np.asarray(sa, dtype=np.float32).tolist() == [1.5 * 2**18]
    assert np.isinf(sa.to_array()).all()


def test_as_scaled_array():
    assert jsa.as_scaled_array(3) == 3 and jsa.as_scaled_array(True) is True
    ints = np.arange(3)
    assert jsa.as_scaled_array(ints) is ints
    s = jsa.as_scaled_array(3.0)
    assert (float(s.data), float(s.scale), s.dtype) == (1.5, 2.0, np.float32)
    s = jsa.as_scaled_array(np.float64(0.3))
    assert s.dtype == np.float64 and float(s.scale) == 0.25 and float(s.data) == 0.3 / 0.25
    sa = jsa.as_scaled_array(np.array([1.0, 2.0], np.float16), scale=np.float32(0.5))
    assert sa.data.tolist() == [2.0, 4.0] and sa.data.dtype == np.float16 and sa.scale.dtype == np.float32
    big = jsa.as_scaled_array(np.array([2.0, 4.0], np.float32) * 256**2, scale=np.float32(2 * 256**2)).astype(
        np.float16
    )
    assert big.data.tolist() == [1.0, 2.0] and np.asarray(big, dtype=np.float32).tolist() == [131072.0, 262144.0]
    tree = jsa.as_scaled_array({"w": np.ones(2, np.float32), "n": 4})
    assert isinstance(tree["w"], jsa.ScaledArray) and tree["n"] == 4
    assert jsa.asarray(tree)["w"].tolist() == [1.0, 1.0]


def test_make_scaled_scalar():
    s = core.make_scaled_scalar(np.float64(65504.0))
    assert s.dtype == np.float64 and s.scale.dtype == np.float64 and float(s.data) == 1.9990234375
    tiny = core.make_scaled_scalar(np.float16(F16_TINY), np.float32)
    assert float(tiny.data) == 1.0 and float(tiny.scale) == F16_TINY and tiny.scale.dtype == np.float32
    assert_bits(tiny.to_array(), np.asarray(np.float16(F16_TINY)))
    zero = core.make_scaled_scalar(np.float32(0.0))
    assert float(zero.data) == 0.0 and float(zero.scale) == 0.0


def test_static_predicates_see_numpy_only():
    assert core.is_static_zero(np.zeros(3)).all()
    assert not core.is_static_zero(jnp.zeros(3)).any()  # JAX arrays are never static
    assert core.is_static_zero(jsa.ScaledArray(jnp.ones(2), np.float32(0))).all()
    assert core.is_static_anyscale(np.array([0.0, np.inf, -np.inf, 1.0])).tolist() == [True, True, True, False]
    assert core.is_static_one_scalar(1.0) and core.is_static_one_scalar(np.float32(1))
    assert not core.is_static_one_scalar(jnp.float32(1))
    assert core.is_static_one_scalar(jsa.ScaledArray(np.float32(1), np.float32(1)))
    assert core.get_scale_dtype(jsa.ScaledArray(np.ones(1, np.float16), np.float32(1))) == np.float32
    assert core.is_scaled_leaf(jsa.ScaledArray(np.ones(1), np.float32(1))) and not core.is_scaled_leaf({})


# -- configuration and registry -------------------------------------------------------------------


def test_config_context_is_nested_and_validated():
    assert core.get_scalify_config() == jsa.ScalifyConfig()
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.UP, scale_dtype=np.float32) as cfg:
        assert core.get_scalify_config() is cfg
        with jsa.ScalifyConfig(rounding_mode="NONE"):
            assert core.get_scalify_config().rounding_mode == jsa.Pow2RoundMode.NONE
        assert core.get_scalify_config() is cfg
    assert core.get_scalify_config().rounding_mode == jsa.Pow2RoundMode.DOWN
    assert hash(jsa.ScalifyConfig(scale_dtype="float32")) == hash(jsa.ScalifyConfig(scale_dtype=np.float32))
    with pytest.raises(ValueError, match="scale_dtype"):
        jsa.ScalifyConfig(scale_dtype=np.int32)
    # jax-scalify's calling form: its two fields by position, in its order; fpemu's seed only by name
    assert jsa.ScalifyConfig(jsa.Pow2RoundMode.UP, np.float16) == jsa.ScalifyConfig(
        rounding_mode=jsa.Pow2RoundMode.UP, scale_dtype=np.float16
    )
    with pytest.raises(TypeError):
        jsa.ScalifyConfig(jsa.Pow2RoundMode.UP, None, 3)


def test_registry():
    rule, kind = core.find_registered_scaled_op(jax.lax.mul_p)
    assert rule is jsa.lax.scaled_mul and kind == core.ScaledPrimitiveType.FORWARD
    assert core.find_registered_scaled_op(jax.lax.population_count_p) == (None, core.ScaledPrimitiveType.NEVER)
    with pytest.raises(KeyError, match="already registered"):
        core.register_scaled_op(jax.lax.add_p, jsa.lax.scaled_add)
    with pytest.raises(KeyError, match="already registered"):

        @core.register_scaled_lax_op
        def scaled_mul(a, b):
            return a

    with pytest.raises(AttributeError, match="no jax.lax primitive"):

        @core.register_scaled_lax_op
        def scaled_not_a_primitive(a):
            return a


def test_unknown_primitive_names_the_ways_out_and_user_rules_work():
    twice_p = Primitive("fpemu_test_twice")
    twice_p.def_impl(lambda v: v * 2)
    twice_p.def_abstract_eval(lambda v: v)
    x = jsa.as_scaled_array(np.ones(2, np.float32), scale=np.float32(4))
    with pytest.raises(NotImplementedError, match="'fpemu_test_twice'.*stop_scaling.*register_scaled_op"):
        jsa.scalify(twice_p.bind)(x)
    core.register_scaled_op(twice_p, lambda v: jsa.ScaledArray(v.data, v.scale * 2))
    out = jsa.scalify(twice_p.bind)(x)
    assert (out.data.tolist(), float(out.scale)) == ([0.25, 0.25], 8.0)


def test_ml_dtypes_float8_data():
    sa = jsa.as_scaled_array(jnp.array([400.0, 448.0, 512.0]), scale=np.float32(128)).astype(jnp.float8_e4m3fn)
    assert sa.data.dtype == ml_dtypes.float8_e4m3fn
    assert np.asarray(sa, dtype=np.float32).tolist() == [384.0, 448.0, 512.0]
