"""`fpemu.scalify._arith`: NumPy's result for NumPy values, jax.numpy's for JAX values, without its jitted
operators; and `scalify` traced without jax.numpy's jitted operators in every rounding mode."""

import operator
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu.scalify as jsa
from fpemu.scalify import _arith
from fpemu.scalify import _array as jsa_array
from fpemu.scalify import ops as scalify_ops
from fpemu.tools.models import TransformerBlock
from tests.jax.test_elementwise import PACKAGE, _jnp_jit_calls, _nested_jits

OPS = [
    (_arith.add, operator.add),
    (_arith.sub, operator.sub),
    (_arith.mul, operator.mul),
    (_arith.div, operator.truediv),
]
#: NaN, ±inf, ±0, a subnormal, the largest float16, ordinary values: each pair of them below.
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, 65504.0, 3.0, -0.75], np.float16)


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind == "f" else x


@pytest.mark.parametrize(("fn", "op"), OPS, ids=["add", "sub", "mul", "div"])
def test_numpy_values_give_numpy_results(fn, op):
    a, b = SPECIAL[:, None], SPECIAL[None, :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow and invalid warnings, as the operator's
        got, want = fn(a, b), op(a, b)
        scalar, scalar_want = fn(np.float32(3), np.float32(0)), op(np.float32(3), np.float32(0))
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype == np.float16
    np.testing.assert_array_equal(_bits(got), _bits(want))  # NaN, ±inf, -0 and overflow as NumPy gives them
    assert isinstance(scalar, np.float32) and _bits(scalar) == _bits(scalar_want)  # NumPy scalars stay NumPy scalars
    assert isinstance(_arith.bitwise_and(np.uint32(0x7F80_0001), np.uint32(0x7F80_0000)), np.uint32)
    assert isinstance(fn(np.float32(3), 2), np.float32) and isinstance(fn(3.0, 2.0), float)  # no JAX array: static


@pytest.mark.parametrize(("fn", "op"), OPS, ids=["add", "sub", "mul", "div"])
@pytest.mark.parametrize(
    "shapes", [((9, 9), (9, 9)), ((9, 9), ()), ((), (9, 9))], ids=["same", "rank0-rhs", "rank0-lhs"]
)
def test_jax_values_give_jnp_bits_in_one_equation(fn, op, shapes):
    full = np.broadcast_to(SPECIAL[:, None], (9, 9)), np.broadcast_to(SPECIAL[None, :], (9, 9))
    a, b = (jnp.asarray(v if s else v[5, 6]) for v, s in zip(full, shapes))  # rank 0: 6e-8 (lhs) or 65504 (rhs)
    got, want = jax.jit(fn)(a, b), jax.jit(op)(a, b)
    assert got.dtype == want.dtype == jnp.float16 and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))
    jaxpr = jax.make_jaxpr(fn)(a, b).jaxpr
    assert [e.primitive for e in jaxpr.eqns] == [e.primitive for e in jax.make_jaxpr(op)(a, b).jaxpr.eqns]
    assert len(jaxpr.eqns) == 1 and _nested_jits(fn, a, b) == []


def test_a_numpy_value_with_a_jax_value_is_a_constant_of_the_equation():
    x = jnp.arange(4, dtype=jnp.float32)
    got = _arith.mul(x, np.float32(0.5))
    assert isinstance(got, jax.Array) and got.dtype == jnp.float32
    np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32) * np.float32(0.5))
    assert _nested_jits(lambda v: _arith.mul(np.float32(0.5), v), x) == []


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (jnp.ones((2, 3), jnp.float32), jnp.ones((2, 1), jnp.float32)),  # a broadcast other than rank 0
        (jnp.ones((2, 3), jnp.bfloat16), 2),  # a Python scalar: weakly typed, takes the array's dtype
        (jnp.ones((2, 3), jnp.float16), jnp.asarray(2.0)),  # a weakly typed float32 array: float16, as jnp promotes
    ],
    ids=["broadcast", "python-scalar", "weak-float32"],
)
def test_other_operands_get_jnp_promotion_and_broadcasting(a, b):
    for fn, op in OPS[:3]:
        got, want = fn(a, b), op(a, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_two_float_dtypes_raise_as_jnp_does_in_strict_promotion():
    a, b = jnp.ones(3, jnp.float16), jnp.ones(3, jnp.float32)
    for fn, op in OPS:
        with pytest.raises(jax.dtypes.TypePromotionError):
            op(a, b)
        with pytest.raises(jax.dtypes.TypePromotionError):
            fn(a, b)


def test_broadcast_arrays():
    a, b, c = jnp.ones((), jnp.float32), jnp.arange(3, dtype=jnp.float32).reshape(3, 1), jnp.ones((2, 1, 4))
    for got, want in zip(_arith.broadcast_arrays(a, b, c), jnp.broadcast_arrays(a, b, c)):
        assert got.shape == want.shape == (2, 3, 4)
        np.testing.assert_array_equal(got, want)
    assert _arith.broadcast_arrays(c)[0] is c and _nested_jits(lambda u, v: _arith.broadcast_arrays(u, v), a, b) == []


def test_sqrt():
    x = np.array([4.0, -1.0, np.inf, -0.0, np.nan], np.float32)
    with np.errstate(invalid="ignore"):  # sqrt(-1): NaN, with NumPy's warning
        want, got = np.sqrt(x), _arith.sqrt(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(jax.jit(_arith.sqrt)(jnp.asarray(x))), _bits(jnp.sqrt(jnp.asarray(x))))
    assert _nested_jits(_arith.sqrt, jnp.asarray(x)) == []
    ints = jnp.array([4, 9], jnp.int32)  # integers: jnp.sqrt's conversion to float
    assert _arith.sqrt(ints).dtype == jnp.sqrt(ints).dtype and np.array_equal(_arith.sqrt(ints), [2.0, 3.0])


def test_is_numpy():
    assert _arith.is_numpy(np.float32(1)) and _arith.is_numpy(np.ones(2))
    assert not _arith.is_numpy(jnp.ones(2)) and not _arith.is_numpy(1.0)


# -- scalify traced without jnp's jitted operators ----------------------------------------------------------

_MODEL = TransformerBlock(batch=2, seq=8, d=16, heads=2, lr=0.01)


@pytest.mark.parametrize("mode", list(jsa.Pow2RoundMode), ids=lambda m: m.name)
@pytest.mark.parametrize("scale_dtype", [None, np.float16])
def test_a_scalified_training_step_traces_without_jnp_operators(mode, scale_dtype):
    """The transformer block's training step (attention, LayerNorm, GELU, the SGD update): every scale
    rule it takes, in each rounding mode; float16 data with float32 or float16 scales."""
    params, x = _MODEL.make_inputs()
    args = jsa.tree.astype(jsa.as_scaled_array((params, x), scale=np.float32(0.5)), jnp.float16)
    with jsa.ScalifyConfig(rounding_mode=mode, scale_dtype=scale_dtype):
        step = jsa.scalify(_MODEL.step)
        assert _jnp_jit_calls(lambda a: step(*a), args, modules=PACKAGE) == []


@jax.custom_vjp
def _sin2(x):
    return lax.mul(lax.sin(x), np.float32(2))


_sin2.defvjp(lambda x: (_sin2(x), x), lambda x, g: (lax.mul(lax.mul(g, lax.cos(x)), np.float32(2)),))


def _rules(a, b):
    """Elementwise rules, a scan's stacked scales, a custom derivative's cotangents, tangents and the
    dynamic rescaling ops (written with lax: the probe counts the package's calls, not these)."""
    elementwise = (lax.log(b), lax.is_finite(a), lax.sqrt(b), lax.rsqrt(b), lax.div(a, b), lax.integer_pow(a, 3))
    stacked = lax.scan(lambda c, v: (lax.add(c, v), lax.mul(c, v)), a[0], b)
    grads = jax.grad(lambda u: lax.reduce_sum(lax.mul(_sin2(u), b), (0, 1)))(a)
    tangents = jax.jvp(lambda u: lax.mul(lax.tanh(u), b), (a,), (b,))
    rescaled = [
        f(a) for f in (scalify_ops.dynamic_rescale_max, scalify_ops.dynamic_rescale_l1, scalify_ops.dynamic_rescale_l2)
    ]
    return elementwise, stacked, grads, tangents, rescaled


@pytest.mark.parametrize("mode", list(jsa.Pow2RoundMode), ids=lambda m: m.name)
def test_scalify_rules_trace_without_jnp_operators(mode):
    data = np.linspace(0.5, 4.0, 6 * 8, dtype=np.float32).reshape(6, 8)
    a, b = jsa.as_scaled_array(data, scale=np.float32(0.25)), jsa.as_scaled_array(data, scale=np.float32(2))
    with jsa.ScalifyConfig(rounding_mode=mode):
        assert _jnp_jit_calls(jsa.scalify(_rules), a, b, modules=PACKAGE) == []


# -- the static facts the rules ask: np.all of the masks, without building them ----------------------------

_STATIC_CASES = [
    np.zeros(3),
    np.array([0.0, np.inf, -np.inf]),
    np.array([0.0, 1.0]),
    np.float32(0),
    0.0,
    np.inf,
    2,
    jnp.zeros(3),  # traced or not, a JAX array is never static
    jnp.zeros((0, 2)),  # an empty array: np.all of an empty mask is True
    jsa.ScaledArray(jnp.ones((2, 3)), np.float32(0)),  # a static zero scale
    jsa.ScaledArray(jnp.ones((2, 3)), np.float32(np.inf)),
    jsa.ScaledArray(jnp.ones((2, 3)), np.float32(2)),
    jsa.ScaledArray(jnp.ones((2, 0)), np.float32(2)),
    jsa.ScaledArray(np.zeros((2, 3), np.float32), jnp.float32(2)),  # static zero data, a traced scale
    jsa.ScaledArray(np.array([0.0, np.inf], np.float32), jnp.float32(2)),
    jsa.ScaledArray(np.array([0.0, 1.0], np.float32), jnp.float32(2)),
    jsa.ScaledArray(np.array([0.0, 1.0], np.float32), np.float32(3)),  # both static
    jsa.ScaledArray(np.array([1.0, 1.0], np.float32), np.float32(0)),
    jsa.ScaledArray(jnp.zeros(2), jnp.float32(0)),  # nothing static
]


@pytest.mark.parametrize("case", range(len(_STATIC_CASES)))
def test_all_static_is_np_all_of_the_mask(case):
    val = _STATIC_CASES[case]
    assert jsa_array.all_static_zero(val) is bool(np.all(jsa_array.is_static_zero(val)))
    assert jsa_array.all_static_anyscale(val) is bool(np.all(jsa_array.is_static_anyscale(val)))
