"""`quantize_operand` / `scaled_view` against the NumPy oracle, along each operand's contraction, bit for bit."""

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu._training import TRAINING_RECIPES, Quantizer, amax_of, quantize_operand, scaled_view, training_recipe
from fpemu._training.layout import Contraction, untiles
from fpemu.testing import assert_bit_exact
from fpemu.testing.recipe_reference import quantize_operand_reference

KEY = jax.random.key(11)


def data(shape, seed=0, dtype=np.float32):
    """Signed values over several binades (some blocks small, some large), a zero."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * np.exp2(rng.integers(-4, 5, size=shape))
    x.flat[0] = 0.0
    return x.astype(dtype)


def _q(fmt, scaling, **kw):
    return Quantizer(format=fmt, scaling=scaling, **kw)


E8 = {"scale_format": "e8m0fnu"}
NV = {"scale_format": "e4m3fn", "tensor_scale": True}
SR = {"rounding": "stochastic"}
# Every scaling, with float, power-of-two, E8M0 and two-level scales, nearest and stochastic.
QUANTIZERS = {
    "none": _q("e4m3fn", "none"),
    "none_sr": _q("e5m2", "none", **SR, random_bits=8),
    "tensor": _q("e4m3fn", "tensor"),
    "tensor_sr": _q("e5m2", "tensor", **SR),
    "row_ceil": _q("e4m3fn", "row", scale_rule="ceil"),
    "row_e8m0": _q("e2m1fn", "row", **E8),
    "block_mx": _q("e2m1fn", "block", block_size=4, **E8),
    "block_mx_sr": _q("e4m3fn", "block", block_size=4, **E8, **SR, random_bits=8),
    "block_nv": _q("e2m1fn", "block", block_size=4, **NV),
    "block_nv_sr": _q("e2m1fn", "block", block_size=4, **NV, **SR),
    "block_ceil": _q("e4m3fn", "block", block_size=4, scale_rule="ceil"),
    "block_2d_ceil": _q("e4m3fn", "block_2d", block_size=4, scale_rule="ceil"),
    "block_2d_nv": _q("e2m1fn", "block_2d", block_size=2, **NV),
    "block_2d_sr": _q("e2m1fn", "block_2d", block_size=2, **E8, **SR),
}
# (shape, contracting dims): the last or first axis, two merged in place, moved (reversed / apart), none.
LAYOUTS = [
    ((6, 10), (1,)),
    ((6, 10), (0,)),
    ((3, 4, 5), (1, 2)),
    ((3, 4, 5), (2, 0)),
    ((2, 3, 5), (0, 2)),
    ((7,), (0,)),
    ((3, 4), ()),
]
# Each quantizer with one layout (each layout twice); a few run by default, the sweep with -m slow.
FAST = ("block_nv_sr", "block_2d_nv", "row_e8m0", "tensor_sr")
CASES = [
    pytest.param(name, LAYOUTS[i % len(LAYOUTS)], marks=() if name in FAST else pytest.mark.slow)
    for i, name in enumerate(QUANTIZERS)
]


@pytest.mark.long
@pytest.mark.parametrize(("name", "layout"), CASES, ids=lambda v: str(v))
def test_matches_the_reference(name, layout):
    q = QUANTIZERS[name]
    shape, dims = layout
    x = data(shape, seed=len(name))
    got = quantize_operand(jnp.asarray(x), dims, q, key=KEY)
    expected = quantize_operand_reference(x, dims, q, key=KEY)
    assert got.dtype == np.float32
    assert_bit_exact(got, expected)


@pytest.mark.parametrize(("name", "dtype"), [("block_nv_sr", ml_dtypes.bfloat16), ("block_2d_nv", np.float16)])
def test_half_precision_operands_keep_their_dtype(name, dtype):
    x = data((4, 8), seed=3, dtype=dtype)
    got = quantize_operand(jnp.asarray(x), (0,), QUANTIZERS[name], key=KEY)
    assert got.dtype == dtype
    assert_bit_exact(got, quantize_operand_reference(x, (0,), QUANTIZERS[name], key=KEY))


def test_nan_and_inf_poison_their_group_only():
    x = data((4, 8), seed=5)
    x[1, 2], x[3, 7] = np.nan, np.inf
    for name in ("block_2d_nv",):
        got = np.asarray(quantize_operand(jnp.asarray(x), (1,), QUANTIZERS[name]))
        assert_bit_exact(got, quantize_operand_reference(x, (1,), QUANTIZERS[name]))
        assert np.isnan(got[1, 2]) and np.isnan(got[3, 7]) and not np.isnan(got[0, 4:]).any()


# -- where the groups are --------------------------------------------------------------------------------


def test_blocks_run_along_the_contraction_axis():
    """What fpemu.scaled does along that axis: a forward lhs contracts its last axis, a forward rhs its first."""
    q = Quantizer(format="e2m1fn", scaling="block", block_size=32, scale_format="e8m0fnu")
    x = jnp.asarray(data((4, 64), seed=1))
    rows = quantize_operand(x, [1], q)
    assert_bit_exact(rows, scaled.quantize_dequantize(x, "mxfp4", axis=1))
    assert_bit_exact(quantize_operand(x.T, [0], q), rows.T)  # the same blocks, transposed
    assert_bit_exact(quantize_operand(x, [-1], q), rows)


def test_merged_contracting_dims_block_like_the_flattened_operand():
    q = QUANTIZERS["block_mx"]
    x = data((3, 4, 6), seed=2)
    flat = quantize_operand(jnp.asarray(x.reshape(3, 24)), [1], q)
    assert_bit_exact(quantize_operand(jnp.asarray(x), [1, 2], q), flat.reshape(3, 4, 6))
    moved = quantize_operand(jnp.asarray(x.transpose(1, 2, 0)), [0, 1], q)  # the same K, listed first
    assert_bit_exact(moved, flat.reshape(3, 4, 6).transpose(1, 2, 0))


def test_block_2d_tiles_a_weight_once_for_both_of_its_gemms():
    """DeepSeek-V3 / NVFP4 weights: each b x b tile shares one scale, whichever axis the GEMM contracts."""
    q = Quantizer(format="e4m3fn", scaling="block_2d", block_size=8, scale_format="e8m0fnu")
    w = data((16, 16), seed=4)
    forward = np.asarray(quantize_operand(jnp.asarray(w), [0], q))  # y = x . W contracts W's rows
    dgrad = np.asarray(quantize_operand(jnp.asarray(w), [1], q))  # dx = g . W^T contracts W's columns
    assert_bit_exact(forward, dgrad)
    per_tile = scaled.BlockFormat(name="tile", element="e4m3fn", scale_format="e8m0fnu", scale_rule="ocp")
    for r in range(0, 16, 8):
        for c in range(0, 16, 8):
            tile = jnp.asarray(w[r : r + 8, c : c + 8])
            assert_bit_exact(forward[r : r + 8, c : c + 8], scaled.quantize_dequantize(tile, per_tile, axis=None))


# -- scales, as each recipe says ---------------------------------------------------------------------------


def _quantizers(recipe):
    """A recipe's quantizers with distinct scales, each with the contracting dim of a 2-D operand in its first GEMM."""
    dims = {"forward": ((1,), (0,)), "dgrad": ((1,), (1,)), "wgrad": ((0,), (0,))}
    seen = {}
    for gemm in ("forward", "dgrad", "wgrad"):
        for q, d in zip(recipe.gemm(gemm).quantizers, dims[gemm]):
            kind = (q.format, q.scaling, q.scale_format)  # the rounding mode does not change the scales
            seen.setdefault(kind, (q, gemm, d))
    return list(seen.values())


SLOW = pytest.mark.slow


@pytest.mark.long
@pytest.mark.parametrize(
    "name",
    [
        "mxfp8",
        "nvfp4",
        *(pytest.param(n, marks=SLOW) for n in ("fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_blockwise")),
    ],
)
def test_scales_are_what_each_recipe_says(name):
    x = data((32, 32), seed=6)
    amax = np.float32(np.max(np.abs(x)))
    for q, gemm, dims in _quantizers(training_recipe(name)):
        kw = {"key": KEY, "amax": amax if q.scaling == "delayed" else None}
        sa = scaled_view(jnp.asarray(x), dims, q, **kw)
        s = np.asarray(sa.scale_values())
        where = f"{name} {gemm} {q}"
        if q.scale_format.name == "e8m0fnu":  # OCP MX: E8M0 codes, powers of two
            assert sa.scale.dtype == np.uint8 and np.all(np.frexp(s)[0] == 0.5), where
        elif q.scale_format.name == "e4m3fn":  # NVFP4: E4M3 codes under a float32 tensor scale
            assert sa.scale.dtype == np.uint8 and sa.global_scale.dtype == np.float32, where
            assert_bit_exact(fpemu.quantize(jnp.asarray(s), "e4m3fn"), s)
        elif q.scale_rule == "ceil":  # torchao rowwise, TE blockwise: float32 powers of two
            assert sa.scale.dtype == np.float32 and np.all(np.frexp(s)[0] == 0.5), where
        else:  # TE current / delayed scaling: float32 amax / max, via the encode scale max / amax
            m = np.float32(q.format.max)
            assert_bit_exact(s.reshape(()), np.float32(1) / (m / amax), err_msg=where)


@pytest.mark.long
@pytest.mark.parametrize(
    "name", ["block_2d_ceil", *(pytest.param(n, marks=SLOW) for n in ("tensor", "row_e8m0", "block_nv", "block_2d_nv"))]
)
def test_scaled_view_dequantizes_to_quantize_operand(name):
    q = QUANTIZERS[name]
    x = jnp.asarray(data((4, 6), seed=7))
    sa = scaled_view(x, [0], q)
    back = sa.dequantize()
    if q.scaling == "block_2d":
        c = Contraction(x.shape, (0,))
        back = c.unmatrix(untiles(back, q.block_size, (c.rows, c.k)))
    assert_bit_exact(back, quantize_operand(x, [0], q))


# -- delayed scaling ---------------------------------------------------------------------------------------


DELAYED = [
    _q("e4m3fn", "delayed"),
    _q("e4m3fn", "delayed", **E8),
    pytest.param(_q("e5m2", "delayed", **SR), marks=SLOW),
    pytest.param(_q("e2m1fn", "delayed", scale_rule="ceil"), marks=SLOW),
]


@pytest.mark.parametrize("q", DELAYED, ids=repr)
@pytest.mark.parametrize("amax", [3.5, 1.7, 0.3, 0.0, float("nan"), float("inf")])
def test_delayed_scaling_matches_the_reference(q, amax):
    margin = 2 if q.scale_format.name == "e8m0fnu" else 0
    x = data((4, 8), seed=8) / 4  # up to ~1.5: an amax of 0.3 makes elements saturate
    got = quantize_operand(jnp.asarray(x), [1], q, key=KEY, amax=np.float32(amax), margin=margin)
    assert_bit_exact(got, quantize_operand_reference(x, [1], q, key=KEY, amax=amax, margin=margin))
    if not math.isfinite(amax):
        assert np.isnan(got).all()
    if amax == 0:  # an empty history: Transformer Engine's initial scale, 1
        unscaled = Quantizer(format=q.format, scaling="none", rounding=q.rounding)
        assert_bit_exact(got, quantize_operand(jnp.asarray(x), [1], unscaled, key=KEY))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic"])
def test_a_quantizer_without_scales_rounds_as_fpemu_quantize(rounding, dtype):
    """``scaling="none"``: each element rounded to the format, as `fpemu.quantize` rounds it (its random
    bits drawn from the same key), NaN and infinities included; a format the dtype cannot hold is refused."""
    x = data((6, 40), seed=12, dtype=dtype) * 300
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    q = Quantizer(format="e4m3fn", scaling="none", rounding=rounding, saturate=True)
    key = KEY if rounding == "stochastic" else None
    got = quantize_operand(jnp.asarray(x), [1], q, key=key)
    options = {"key": KEY} if rounding == "stochastic" else {}
    assert_bit_exact(got, fpemu.quantize(jnp.asarray(x), "e4m3fn", rounding=rounding, saturate=True, **options))
    assert np.isnan(np.asarray(got, np.float32)[0, 0]) and np.signbit(np.asarray(got, np.float32)[0, 3])
    if dtype is ml_dtypes.bfloat16:
        with pytest.raises(ValueError, match="fp16"):
            quantize_operand(jnp.asarray(x), [1], Quantizer(format="fp16", scaling="none"))


def test_delayed_scale_is_the_one_delayed_scaling_computes_from_the_history():
    """fpemu.scaled.DelayedScaling's scale after a step whose amax is 1.7 quantizes the next step the same."""
    x = jnp.asarray(data((4, 8), seed=9) / 4)
    ds = scaled.DelayedScaling(block_format="fp8_e4m3", history_length=4)
    state = ds.update(jnp.array([1.7, -0.5]), ds.init(jnp.zeros(2)))
    one = scaled.DelayedScalingState(state.amax_history[:, :1].reshape(4, 1, 1), state.scale[:1].reshape(1, 1))
    expected, _ = ds.quantize_dequantize(x, one)
    got = quantize_operand(x, [1], _q("e4m3fn", "delayed"), amax=jnp.float32(1.7))
    assert_bit_exact(got, expected)


# -- stochastic rounding -----------------------------------------------------------------------------------


def test_stochastic_rounding_is_keyed_and_matches_fpemu_scaled():
    q = QUANTIZERS["block_mx_sr"]
    x = jnp.asarray(data((8, 16), seed=10))
    a = quantize_operand(x, [1], q, key=KEY)
    assert_bit_exact(a, quantize_operand(x, [1], q, key=KEY))
    assert not np.array_equal(a, quantize_operand(x, [1], q, key=jax.random.key(12)))
    expected = scaled.quantize_dequantize(
        x, "mxfp8_e4m3", axis=1, block_size=4, rounding="stochastic", key=KEY, random_bits=8
    )
    assert_bit_exact(a, expected)


@pytest.mark.long
def test_stochastic_rounding_is_unbiased_over_every_random_value():
    """With 3 random bits, eight copies of a value drawing 0..7 average to it exactly (its fraction is k/8)."""
    q = Quantizer(format="e2m1fn", scaling="row", scale_format="e8m0fnu", rounding="stochastic", random_bits=3)
    x = np.full((1, 9), 4.0 * (1 + 3 / 8) / 2, np.float32)  # 2.75 between the E2M1 values 2 and 3: f = 6/8
    x[0, 8] = 6.0  # the row max: scale 1
    out = quantize_operand_reference(x, [1], q, random=np.array([[*range(8), 0]]))
    assert sorted(set(out[0, :8].tolist())) == [2.0, 3.0]
    assert out[0, :8].mean() == 2.75
    big = np.full((1, 4096), 2.75, np.float32)
    big[0, 0] = 6.0
    mean = float(quantize_operand(jnp.asarray(big), [1], q, key=KEY)[0, 1:].mean())
    assert abs(mean - 2.75) < 4 * 0.433 / 64  # four standard errors of 4095 draws


# -- amax --------------------------------------------------------------------------------------------------


def test_amax_of():
    assert amax_of(jnp.array([1.0, -3.5, 2.0])).tolist() == 3.5
    assert amax_of(jnp.array([-0.0])).tolist() == 0.0 and not np.signbit(amax_of(jnp.array([-0.0])))
    assert amax_of(jnp.zeros((0,))).tolist() == 0.0
    assert np.isnan(amax_of(jnp.array([1.0, np.nan, np.inf])))
    assert amax_of(jnp.array([-np.inf, 1.0])).tolist() == np.inf
    tiny = np.array([2.0**-140, -(2.0**-139)], np.float32)  # float32 subnormals count
    assert amax_of(jnp.asarray(tiny)).tolist() == 2.0**-139
    bf = amax_of(jnp.array([1.0, -2.5], jnp.bfloat16))
    assert bf.dtype == np.float32 and bf.tolist() == 2.5


# -- gradients and bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["block_2d_ceil", pytest.param("block_2d_nv", marks=SLOW), pytest.param("none", marks=SLOW)]
)
def test_the_gradient_is_straight_through(name):
    x = jnp.asarray(data((4, 8), seed=13))
    g = jax.grad(lambda v: (quantize_operand(v, [0], QUANTIZERS[name]) * jnp.arange(32.0).reshape(4, 8)).sum())(x)
    assert_bit_exact(g, jnp.arange(32.0).reshape(4, 8))


BAD = [
    ({"contracting_dims": [2]}, ValueError, r"contracting_dims=\(2,\) is out of range for an operand of rank 2"),
    ({"contracting_dims": [1, -1]}, ValueError, r"contracting_dims=\(1, -1\) repeats a dimension"),
    ({"contracting_dims": ["1"]}, TypeError, r"contracting_dims must be an int"),
    ({"contracting_dims": "1"}, TypeError, r"contracting_dims must be a sequence of ints"),
    ({"amax": 1.0}, ValueError, r"amax is only used with scaling='delayed', not 'block'"),
    ({"q": DELAYED[0]}, ValueError, r"scaling='delayed' needs amax"),
    ({"q": DELAYED[0], "amax": np.ones(2, np.float32)}, ValueError, r"amax must be a scalar"),
    ({"q": DELAYED[0], "amax": np.int32(3)}, TypeError, r"amax must be a float scalar"),
    ({"q": QUANTIZERS["block_nv_sr"], "key": None}, ValueError, r"rounding='stochastic'\) needs key="),
    ({"q": "mxfp8"}, TypeError, r"q must be a fpemu Quantizer"),
    ({"x": np.ones((2, 4))}, TypeError, r"x must be a float16, bfloat16 or float32 array, got dtype float64"),
    ({"x": [[1.0]]}, TypeError, r"x must be a JAX or NumPy array"),
    ({"margin": 65}, ValueError, r"margin must be an int >= -64 and <= 64"),
]


@pytest.mark.parametrize(("changes", "error", "message"), BAD, ids=lambda v: str(v)[:40])
def test_bad_inputs_name_the_argument(changes, error, message):
    args = {"x": np.ones((2, 4), np.float32), "contracting_dims": [1], "q": QUANTIZERS["block_nv"], **changes}
    with pytest.raises(error, match=message):
        quantize_operand(args.pop("x"), args.pop("contracting_dims"), args.pop("q"), **args)


def test_scaled_view_refuses_an_unscaled_quantizer():
    with pytest.raises(ValueError, match="scaling='none' has no scales"):
        scaled_view(jnp.ones((2, 2)), [1], QUANTIZERS["none"])


@pytest.mark.parametrize("name", TRAINING_RECIPES)
def test_only_float_per_tensor_scales_are_tensor_scaled(name):
    """FP8 current and delayed scaling (float32 amax / max) and NVFP4 (its second level) keep a per-tensor
    scale for the GEMM's result; power-of-two, per-row and per-block scales do not; nor do bare formats."""
    recipe = training_recipe(name)
    expected = name in ("fp8_current", "fp8_delayed", "nvfp4")
    for gemm in (recipe.forward, recipe.dgrad, recipe.wgrad):
        assert [q.tensor_scaled for q in (gemm.lhs, gemm.rhs)] == [expected, expected], name
    assert not Quantizer(format="e4m3fn", scaling="none").tensor_scaled
    assert not Quantizer(format="e4m3fn", scaling="tensor", scale_rule="ceil").tensor_scaled
    assert not Quantizer(format="e4m3fn", scaling="row").tensor_scaled


def test_a_quantizer_names_the_block_format_it_quantizes_with():
    mx = Quantizer(format="e4m3fn", scaling="block", block_size=32, scale_format="e8m0fnu")
    assert mx.block_format == scaled.BlockFormat(
        name="e4m3fn/block", element="e4m3fn", block_size=32, scale_format="e8m0fnu", scale_rule="ocp"
    )
    tile = Quantizer(format="e2m1fn", scaling="block_2d", block_size=16, scale_format="e4m3fn", tensor_scale=True)
    assert tile.block_format.block_size == 16 and tile.block_format.global_scale  # the tile's side
    with pytest.raises(ValueError, match="scaling='none' has no block format"):
        Quantizer(format="e4m3fn", scaling="none").block_format  # noqa: B018
