"""`fpemu._jax.elementwise`: `select` and `clamp` give jnp.where's and jnp.clip's bits, refuse what
would change a value, and leave no nested ``jit`` in the jaxpr (the reason they exist)."""

from __future__ import annotations

import glob
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core

import fpemu
from fpemu import quantize, scaled
from fpemu._core.modes import STOCHASTIC_VARIANTS
from fpemu._jax.elementwise import clamp, pad_zeros, select

FLOATS = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e-45, -3e38], np.float32)


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.dtype(f"uint{8 * x.dtype.itemsize}")) if x.dtype.kind in "fV" else x  # V: bfloat16


def _nested_jits(fn, *args) -> list[str]:
    names: list[str] = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in ("jit", "pjit"):
                names.append(eqn.params["name"])
            for sub in core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16, np.uint32, np.int32, np.uint8, np.bool_])
def test_select_is_where_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "f" or dtype is jnp.bfloat16:
        finite_in_range = FLOATS if np.dtype(dtype) != np.float16 else FLOATS[:-1]  # -3e38 overflows float16
        a = finite_in_range.astype(dtype)
        b = np.roll(finite_in_range, 3).astype(dtype)
        nan_payload = np.array([0x7FC12345], np.uint32).view(np.float32).astype(dtype)  # NaN with a payload
        a = np.concatenate([a, nan_payload])
        b = np.concatenate([b, -nan_payload])
    else:
        info = np.iinfo(dtype) if dtype is not np.bool_ else None
        lo, hi = (0, 2) if info is None else (info.min, int(info.max) + 1)
        a = rng.integers(lo, hi, 10).astype(dtype)
        b = rng.integers(lo, hi, 10).astype(dtype)
    cond = np.arange(a.size) % 3 == 0
    for args in [(cond, a, b), (cond[:, None], a, b), (True, a, b), (cond, a[0], b), (cond, a, b[:1])]:
        got = jax.jit(select)(*args)
        want = jax.jit(jnp.where)(*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_select_python_scalars_take_the_array_dtype():
    x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    c = jnp.array([True, False, True])
    got = select(c, x, jnp.nan)
    assert got.dtype == jnp.float32
    np.testing.assert_array_equal(_bits(got), _bits(np.array([1.0, np.nan, 3.0], np.float32)))
    assert select(c, 7, jnp.arange(3, dtype=jnp.uint32)).tolist() == [7, 1, 7]
    assert select(c, jnp.arange(3, dtype=jnp.int32), -1).dtype == jnp.int32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((jnp.array([1, 0], jnp.uint32), jnp.ones(2, jnp.uint32), jnp.zeros(2, jnp.uint32)), "cond must be boolean"),
        ((1, jnp.ones(2, jnp.uint32), jnp.zeros(2, jnp.uint32)), "cond must be boolean, got int"),
        ((jnp.array([True, False]), jnp.ones(2, jnp.uint32), jnp.zeros(2, jnp.int32)), "one dtype"),
        ((jnp.array([True, False]), 1, 0), "two Python scalars"),
        ((jnp.array([True, False]), jnp.ones(2, jnp.uint32), -1), "not a uint32 value"),
        ((jnp.array([True, False]), jnp.ones(2, jnp.float32), 0.1), "not a float32 value"),
        ((jnp.array([True, False]), jnp.ones(2, jnp.int32), 1.5), "not a int32 value"),
    ],
)
def test_select_refuses_what_would_change_a_value(args, message):
    with pytest.raises(TypeError, match=message):
        select(*args)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint8, np.int16])
def test_clamp_is_clip(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -3 if info.min < 0 else 3, 0, 5, 31, 32, info.max], dtype)
    extremes = (np.asarray(info.min, dtype), np.asarray(info.max, dtype))
    for lo, hi in [(0, 31), (1, 127), extremes, (5, 5), (np.asarray(2, dtype), 40)]:
        got = clamp(jnp.asarray(x), lo, hi)
        want = jnp.clip(jnp.asarray(x), lo, hi)
        assert got.dtype == want.dtype == dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("x", "lo", "hi", "message"),
    [
        (jnp.ones(2, jnp.float32), 0, 1, "integer array"),
        (jnp.ones(2, jnp.int32), jnp.zeros(2, jnp.int32), 1, "lo must be a scalar"),
        (jnp.ones(2, jnp.int32), 0, np.uint32(3), "one dtype"),
        (jnp.ones(2, jnp.uint32), -1, 3, "not a uint32 value"),
        (jnp.ones(2, jnp.int8), 0, 254, "not a int8 value"),
        (5, 0, 3, "integer array"),
    ],
)
def test_clamp_refuses_what_would_change_a_value(x, lo, hi, message):
    with pytest.raises(TypeError, match=message):
        clamp(x, lo, hi)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.uint32, np.int8, np.bool_])
def test_pad_zeros_is_jnp_pad(dtype):
    x = np.arange(1, 7).reshape(2, 3).astype(dtype)
    if np.dtype(dtype).kind == "f" or dtype is jnp.bfloat16:
        x = np.array([[np.nan, -0.0, np.inf], [-1.5, 3e-39, 2.0]], np.float32).astype(dtype)  # padding keeps each
    for pads in [[(0, 0), (0, 2)], [(1, 0), (0, 0)], [(2, 1), (3, 0)], ((0, 0), (0, 0))]:
        got = jax.jit(lambda v, pads=pads: pad_zeros(v, pads))(x)
        want = jnp.pad(jnp.asarray(x), pads)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(_bits(got), _bits(want))
    assert _nested_jits(lambda v: pad_zeros(v, [(0, 1), (0, 0)]), x) == []


def test_pad_zeros_wants_one_pair_per_axis():
    with pytest.raises(ValueError, match="one \\(before, after\\) pair per axis of x, got 1 for 2"):
        pad_zeros(jnp.ones((2, 2)), [(0, 1)])


def test_no_nested_jit_where_jnp_leaves_one():
    c, a = jnp.array([True, False]), jnp.ones(2, jnp.int32)
    assert _nested_jits(jnp.where, c, a, a) and _nested_jits(lambda v: jnp.clip(v, 0, 1), a)  # what is avoided
    assert _nested_jits(select, c, a, a) == []
    assert _nested_jits(lambda v: clamp(v, 0, 1), a) == []


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: scaled.quantize_dequantize(x, "mxfp8", axis=1),
        lambda x: scaled.quantize_dequantize(x, "nvfp4", axis=1),
        lambda x: scaled.quantize_dequantize(x, "fp8_e4m3", axis=None),
        lambda x: quantize(x, "e4m3fn"),
        lambda x: quantize(x, "e5m2", rounding="stochastic", key=jax.random.key(0)),
        lambda x: quantize(x, "bf16", rounding="toward_zero"),
    ],
    ids=["mxfp8", "nvfp4", "fp8-per-tensor", "quantize-e4m3fn", "quantize-stochastic", "quantize-bf16-rtz"],
)
def test_quantizers_trace_without_where_or_clip_jits(fn):
    """The rounding cores call `select`/`clamp`: no ``_where`` or ``clip`` equation in their jaxprs."""
    names = _nested_jits(fn, jnp.ones((4, 64), jnp.float32))
    assert not {"_where", "where", "clip"} & set(names), names


# -- no jnp operator in the rounding cores --------------------------------------------------------------

_JAX_DIR = os.path.dirname(jax.__file__) + os.sep
_FPEMU_DIR = os.path.dirname(fpemu.__file__)
#: Every module of the package but `fpemu.tools` (command-line tools and their models: user code).
PACKAGE = frozenset(
    path for path in glob.glob(os.path.join(_FPEMU_DIR, "**", "*.py"), recursive=True)
    if os.path.join(_FPEMU_DIR, "tools") + os.sep not in path
)  # fmt: skip


def _jnp_jit_calls(fn, *args, modules) -> list[tuple[str, int]]:
    """Where ``modules`` call a jitted jnp function (an operator on a tracer, ``jnp.maximum``, ...) while ``fn``
    is traced: every such call enters jit's Python path (its ``cache_miss``) under a trace; the caller is
    the nearest frame outside JAX. fpemu's own jitted functions (a quantizer, a GEMM) are not counted."""
    calls: list[tuple[str, int]] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "cache_miss" and frame.f_code.co_filename.startswith(_JAX_DIR):
            if not getattr(frame.f_locals.get("fun"), "__module__", "").startswith("jax."):
                return  # the function jitted is not JAX's
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename.startswith(_JAX_DIR):
                caller = caller.f_back
            if caller is not None and caller.f_code.co_filename in modules:
                calls.append((os.path.basename(caller.f_code.co_filename), caller.f_lineno))

    sys.setprofile(profile)
    try:
        jax.make_jaxpr(fn)(*args)
    finally:
        sys.setprofile(None)
    return calls


_X = jnp.linspace(-3.0, 3.0, 8 * 64, dtype=jnp.float32).reshape(8, 64)


def _operators(x):
    b = jax.lax.bitcast_convert_type(x, jnp.uint32)
    masked = b & np.uint32(1)
    small = masked < np.uint32(3)
    return ~small, jnp.maximum(b, np.uint32(2))


def test_the_probe_sees_jnp_operators():
    """The checks below cannot pass for want of seeing: jnp's ``&``, ``<`` and ``~`` and ``jnp.maximum`` on
    tracers, called from this module, are found on their lines."""
    first = _operators.__code__.co_firstlineno
    calls = _jnp_jit_calls(_operators, _X, modules={__file__})
    assert [line - first for _, line in calls] == [2, 3, 4, 4]


@pytest.mark.parametrize("name", [f.name for f in fpemu.formats() if f.name != "fp64"])
def test_quantize_calls_no_jnp_operator_in_the_package(name):
    """`fpemu.quantize` in every rounding mode and stochastic variant, and `fpemu.encode` and `fpemu.decode`,
    trace without a jitted jnp call from the package (each would trace a jit of its own per new shape:
    `fpemu._jax.elementwise`)."""
    key = jax.random.key(0)
    for rounding in fpemu.ROUNDING_MODES:
        fn = lambda x: quantize(x, name, rounding=rounding, key=key if rounding == "stochastic" else None)  # noqa: B023
        assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == [], rounding
    for variant in STOCHASTIC_VARIANTS:
        fn = lambda x: quantize(x, name, rounding="stochastic", key=key, stochastic_variant=variant)  # noqa: B023
        assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == [], variant
    assert _jnp_jit_calls(lambda x: fpemu.decode(fpemu.encode(x, name), name), _X, modules=PACKAGE) == []
    codes = np.arange(-3, 300, dtype=np.int32)  # out of range too: NaN
    assert _jnp_jit_calls(lambda c: fpemu.decode(c, name), codes, modules=PACKAGE) == []


@pytest.mark.parametrize(
    ("name", "rounding"),
    [
        (name, rounding)
        for name in scaled.block_formats()
        for rounding in scaled.get_block_format(name).allowed_roundings
    ],
)
def test_quantize_dequantize_calls_no_jnp_operator_in_the_package(name, rounding):
    key = jax.random.key(0) if rounding == "stochastic" else None
    fn = lambda x: scaled.quantize_dequantize(x, name, rounding=rounding, key=key)
    assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == []


def _mlp_loss(params, x):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"]) ** 2)


@pytest.mark.parametrize("recipe", fpemu.TRAINING_RECIPES)
@pytest.mark.parametrize("with_stats", [False, True])
def test_a_recipe_training_step_calls_no_jnp_operator_in_the_package(recipe, with_stats):
    """`fpemu.emulate`'s GEMMs under every training recipe (their quantizers, keys, amax histories, Hadamard
    transforms, chunked sums, materializations, and with ``with_stats`` the statistics of their operands) trace
    without a jitted jnp call from the package: each would trace a jit of its own per new shape, at every GEMM
    of every step's trace. The forward product contracts 384 elements (FP8 blockwise's loop over 128-product
    chunks)."""
    params = {"w1": jnp.full((384, 32), 0.01, jnp.float32), "w2": jnp.full((32, 4), 0.02, jnp.float32)}
    step = jax.value_and_grad(_mlp_loss)
    policy = fpemu.Policy(dot=recipe)
    key = jax.random.key(0) if policy.stochastic else None  # stochastic rounding: NVFP4's gradients
    args = (params, jnp.linspace(-3.0, 3.0, 8 * 384, dtype=jnp.float32).reshape(8, 384))
    if fpemu.training_recipe(recipe).stateful:  # delayed scaling: amax histories
        fn = fpemu.emulate(step, policy, key=key, state=True, with_stats=with_stats)
        args = (fpemu.init_training_state(step, policy, *args), *args)
    else:
        fn = fpemu.emulate(step, policy, key=key, with_stats=with_stats)
    assert _jnp_jit_calls(fn, *args, modules=PACKAGE) == []


def test_a_hopper_accumulator_calls_no_jnp_operator_in_the_package():
    """`fpemu.matmul`'s FP8 tensor-core accumulator (``accumulate="hopper_fp8"``), in its loop over groups."""
    fn = lambda a: fpemu.matmul(a, a.T, lhs="e4m3fn", rhs="e5m2", accumulate="hopper_fp8", accumulate_every=32)
    assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == []


@pytest.mark.parametrize("name", scaled.block_formats())
def test_a_block_array_decodes_without_a_jnp_operator_in_the_package(name):
    """`fpemu.scaled.BlockArray`'s dequantized values, decode scales (exact products with a tensor scale, E8M0's
    subnormal ``2**-127``) and signed codes: no jitted jnp call from the package."""
    for read in (lambda a: a.dequantize(), lambda a: a.scale_values(), lambda a: a.codes()):
        fn = lambda x: read(scaled.BlockArray.from_array(x, name))  # noqa: B023
        assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == []


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_the_error_metrics_call_no_jnp_operator_in_the_package(axis):
    """`fpemu.scaled.qsnr` and `fpemu.scaled.relative_error` in each norm: no jitted jnp call from the package
    (a metric traced in a loop over formats or steps traces none of jnp's jits)."""
    y = _X + np.float32(0.01)
    fns = [lambda x: scaled.qsnr(x, y, axis=axis)]
    fns += [lambda x, o=o: scaled.relative_error(x, y, ord=o, axis=axis) for o in (1, 2, np.inf)]
    for fn in fns:
        assert _jnp_jit_calls(fn, _X, modules=PACKAGE) == []
