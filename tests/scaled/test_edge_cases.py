"""The edge cases the issue lists, each with known answers written from the spec (not from the code):
all-zero blocks and tensors, NaN/inf blocks, amax at and beyond E8M0's range, denormal-range
blocks, block sizes that do not divide the axis, half-precision inputs, negative axes, size-0
arrays, and the errors' messages."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.testing import scaled_reference as reference

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]
FLT_MAX = np.finfo(np.float32).max
E8M0_NAN = fpemu.get_format("e8m0fnu").nan_code


def _q(x, recipe, **kw):
    return scaled.BlockArray.from_array(jnp.asarray(np.asarray(x, np.float32)), recipe, **kw)


# -- all-zero blocks and tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("recipe", scaled.block_formats())
def test_all_zero_tensor_has_finite_scales_and_zero_output(recipe):
    x = np.zeros((4, 64), np.float32)
    x[1, ::3] = -0.0
    sa = _q(x, recipe)
    scales = np.asarray(sa.scale_values())
    assert np.all(np.isfinite(scales)), scales
    y = np.asarray(sa.dequantize())
    assert np.all(y == 0)
    y2 = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), recipe))
    np.testing.assert_array_equal(y2.view(np.uint32), y.view(np.uint32))
    if sa.global_scale is not None:
        assert np.all(np.isfinite(np.asarray(sa.global_scale)))


@pytest.mark.long
@pytest.mark.parametrize("recipe", MX)
def test_mx_zero_block_gets_the_smallest_e8m0_scale(recipe):
    x = np.zeros((1, 64), np.float32)
    x[0, 32:] = 1.0
    sa = _q(x, recipe)
    emax = sa.element.emax
    assert np.asarray(sa.scale).tolist() == [[0, 127 - emax]]  # code 0 = 2**-127
    assert float(sa.scale_values()[0, 0]) == 2.0**-127


def test_float_scale_of_zero_tensor_is_one_and_nvfp4_zero_block_scale_is_zero():
    assert _q(np.zeros((3, 4)), "fp8_e4m3").scale.tolist() == [[1.0]]
    x = np.zeros((1, 32), np.float32)
    x[0, 16:] = 3.0
    sa = _q(x, "nvfp4")
    assert np.asarray(sa.scale)[0, 0] == 0  # e4m3 code of 0.0
    assert np.all(np.asarray(sa.dequantize())[0, :16] == 0)


# -- NaN and infinity ------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", MX)
@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_mx_block_with_nan_or_inf_has_nan_scale_and_dequantizes_to_nan(recipe, special):
    """OCP MX v1.0: the shared scale of a block whose amax is NaN/inf is NaN (E8M0 0xff) and every
    element of the block then reads as NaN; other blocks are unaffected."""
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(1, 64)
    x[0, 5] = special
    sa = _q(x, recipe)
    assert np.asarray(sa.scale).tolist() == [[E8M0_NAN, np.asarray(sa.scale)[0, 1]]]
    assert np.asarray(sa.scale)[0, 1] != E8M0_NAN
    y = np.asarray(sa.dequantize())
    assert np.all(np.isnan(y[0, :32])) and np.all(np.isfinite(y[0, 32:]))
    assert np.all(np.asarray(sa.values)[0, :32] == 0)
    np.testing.assert_array_equal(np.isnan(np.asarray(scaled.quantize_dequantize(jnp.asarray(x), recipe))), np.isnan(y))


@pytest.mark.parametrize("recipe", ["nvfp4", "fp8_e4m3", "fp8_e5m2"])
def test_float_scale_groups_with_nan_or_inf(recipe):
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    x[0, 3] = np.inf
    axis = -1 if recipe == "nvfp4" else 1
    sa = _q(x, recipe, axis=axis)
    y = np.asarray(sa.dequantize())
    if recipe == "nvfp4":
        assert np.asarray(sa.scale)[0, 0] == fpemu.get_format("e4m3fn").nan_code
        assert np.all(np.isnan(y[0, :16])) and np.all(np.isfinite(y[0, 16:])) and np.all(np.isfinite(y[1]))
        assert np.isfinite(float(sa.global_scale.ravel()[0]))  # the tensor scale ignores NaN/inf blocks
    else:
        assert np.isnan(float(sa.scale[0, 0])) and np.isfinite(float(sa.scale[1, 0]))
        assert np.all(np.isnan(y[0])) and np.all(np.isfinite(y[1]))


def test_given_scale_keeps_nan_elements_and_saturates_inf():
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    y = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), "fp8_e4m3", scale=np.float32(0.5)))
    assert np.isnan(y[0]) and y[1:].tolist() == [224.0, -224.0, 1.0]


# -- the scale format's range ------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", MX)
def test_amax_at_the_top_of_float32(recipe):
    """amax = FLT_MAX: floor(log2) = 127, so the OCP exponent is 127 - emax (in E8M0's range)."""
    x = np.full((1, 64), FLT_MAX, np.float32)
    x[0, 1] = -FLT_MAX
    sa = _q(x, recipe)
    emax = sa.element.emax
    assert np.asarray(sa.scale).tolist() == [[127 - emax + 127] * 2]
    y = np.asarray(sa.dequantize())
    assert np.all(np.isfinite(y)) and y[0, 0] <= FLT_MAX and y[0, 1] < 0


def test_ceil_rule_beyond_e8m0_range_clamps_to_2_127():
    """MXINT8 with the round-up rule: amax = FLT_MAX needs 2**128 (max 127/64 * 2**127 < FLT_MAX);
    E8M0 stops at 2**127, so the scale saturates and the elements saturate to ±127/64."""
    x = np.full((1, 32), FLT_MAX, np.float32)
    sa = _q(x, "mxint8", scale_rule="ceil")
    assert np.asarray(sa.scale).tolist() == [[254]]
    assert float(sa.values[0, 0]) == 127 / 64
    reference.assert_equal(sa, reference.quantize(x, sa.block_format))


@pytest.mark.parametrize("recipe", MX)
def test_amax_below_the_smallest_e8m0_scale(recipe):
    """amax = 2**-149 (the smallest float32): floor(log2) - emax < -127, so the scale clamps to
    2**-127 and the element value is 2**-149 / 2**-127 = 2**-22 (below every element's smallest
    value but e5m2's... so it rounds to 0 or to the smallest subnormal)."""
    x = np.zeros((1, 64), np.float32)
    x[0, 0] = 2.0**-149
    sa = _q(x, recipe)
    assert np.asarray(sa.scale).tolist() == [[0, 0]]
    expected = fpemu.quantize(jnp.float32(2.0**-22), sa.element, saturate=True)
    assert float(sa.values[0, 0]) == float(expected)
    reference.assert_equal(sa, reference.quantize(x, recipe))


@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "mxfp4", "nvfp4", "fp8_e4m3", "mxint8"])
def test_denormal_range_blocks_are_scaled_not_flushed(recipe):
    """A block of float32 subnormals: XLA:CPU would flush them in float arithmetic; the scaled
    values must still be exact (the block's own scale brings them into range)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 64)) * 2.0**-120).astype(np.float32)  # amax around 2**-118
    x[1] = (rng.standard_normal(64) * 2.0**-135).astype(np.float32)  # subnormal
    axis = None if recipe.startswith("fp8") else -1
    sa = _q(x, recipe, axis=axis)
    reference.assert_equal(sa, reference.quantize(x, recipe, axis=axis))
    y = np.asarray(sa.dequantize())
    if recipe == "mxfp8_e4m3":  # the scale reaches 2**-127 and e4m3 goes down to 2**-9: most survive
        assert np.count_nonzero(y[1]) > 32
        assert scaled.qsnr(x[1], y[1]) > 10


def test_denormal_block_beside_a_normal_block():
    x = np.zeros((1, 64), np.float32)
    x[0, :32] = np.float32(2.0**-140) * np.arange(1, 33, dtype=np.float32)
    x[0, 32:] = 1.0
    sa = _q(x, "mxfp8_e4m3")
    assert np.asarray(sa.scale).tolist() == [[0, 127 - 8]]
    reference.assert_equal(sa, reference.quantize(x, "mxfp8_e4m3"))


# -- block sizes, axes, shapes, dtypes ---------------------------------------------------------------


def test_block_size_must_divide_the_axis_unless_pad():
    x = jnp.ones((2, 40))
    with pytest.raises(ValueError, match=r"x.shape\[1\]=40 is not a multiple of block_size=32.*pad=True"):
        scaled.BlockArray.from_array(x, "mxfp4")
    sa = scaled.BlockArray.from_array(x, "mxfp4", pad=True)
    assert sa.scale.shape == (2, 2)
    assert sa.dequantize().shape == (2, 40)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_negative_and_positive_axes_agree(axis):
    x = np.random.default_rng(0).standard_normal((32, 32, 32)).astype(np.float32)
    sa = _q(x, "mxfp6_e2m3", axis=axis)
    ndim = 3
    assert sa.axis == axis % ndim - ndim
    expected_shape = [32, 32, 32]
    expected_shape[axis] = 1
    assert sa.scale.shape == tuple(expected_shape)
    moved = _q(np.moveaxis(x, axis, -1), "mxfp6_e2m3")
    np.testing.assert_array_equal(np.moveaxis(np.asarray(sa.values), axis, -1), np.asarray(moved.values))
    reference.assert_equal(sa, reference.quantize(x, "mxfp6_e2m3", axis=axis))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_half_precision_inputs_keep_their_dtype(dtype, recipe):
    x = jnp.asarray(np.random.default_rng(2).standard_normal((4, 64)), dtype)
    sa = scaled.BlockArray.from_array(x, recipe)
    assert sa.dtype == np.dtype(dtype)
    assert sa.values.dtype == jnp.float32
    y = sa.dequantize()
    assert y.dtype == dtype
    assert scaled.quantize_dequantize(x, recipe).dtype == dtype
    reference.assert_equal(sa, reference.quantize(np.asarray(x), recipe))


def test_half_precision_mx_output_is_exact():
    """Power-of-two scales and 8-bit elements: the dequantized bfloat16 equals the float32 one."""
    x = jnp.asarray(np.random.default_rng(3).standard_normal((4, 64)) * 1e-3, jnp.bfloat16)
    y = scaled.quantize_dequantize(x, "mxfp8_e4m3")
    y32 = scaled.quantize_dequantize(x.astype(jnp.float32), "mxfp8_e4m3")
    np.testing.assert_array_equal(np.asarray(y.astype(jnp.float32)), np.asarray(y32))


@pytest.mark.long
@pytest.mark.parametrize(
    ("recipe", "shape"),
    [
        ("mxfp4", (0, 32)),
        ("mxfp4", (4, 0)),
        ("mxfp4", (0,)),
        ("nvfp4", (0, 32)),
        ("mxint8", (4, 0)),
        ("fp8_e4m3", (0,)),
    ],  # fmt: skip
)
def test_size_zero_arrays(recipe, shape):
    x = jnp.zeros(shape, jnp.float32)
    sa = scaled.BlockArray.from_array(x, recipe, pad=True)
    assert sa.shape == shape
    assert sa.dequantize().shape == shape
    assert scaled.quantize_dequantize(x, recipe, pad=True).shape == shape
    assert sa.pack().nbytes == sa.nbytes


def test_scalar_input_per_tensor():
    sa = scaled.BlockArray.from_array(jnp.float32(300.0), "fp8_e4m3")
    assert sa.shape == () and sa.scale.shape == ()
    assert float(sa.dequantize()) == 300.0


# -- errors ----------------------------------------------------------------------------------------


def test_unknown_recipe_names_close_matches():
    match = r"unknown block format 'mxfp9'; did you mean 'mxfp8'.*block formats: mxfp8_e4m3"
    with pytest.raises(scaled.UnknownBlockFormatError, match=match):
        scaled.BlockArray.from_array(jnp.ones(32), "mxfp9")


def test_float64_is_refused():
    with pytest.raises(TypeError, match="float64.*astype"):
        scaled.BlockArray.from_array(np.ones(32), "mxfp4")
    with pytest.raises(TypeError, match="JAX or NumPy array"):
        scaled.BlockArray.from_array([1.0] * 32, "mxfp4")
    with pytest.raises(TypeError, match="int32"):
        scaled.BlockArray.from_array(np.ones(32, np.int32), "mxfp4")


def test_axis_errors():
    with pytest.raises(ValueError, match=r"axis=2 is out of range for x of shape \(4, 32\) \(valid: -2..1\)"):
        scaled.BlockArray.from_array(jnp.ones((4, 32)), "mxfp4", axis=2)
    with pytest.raises(ValueError, match="axis must be an int, not None"):
        scaled.BlockArray.from_array(jnp.ones((4, 32)), "mxfp4", axis=None)
    with pytest.raises(TypeError, match="axis must be an int, got float 1.0"):
        scaled.BlockArray.from_array(jnp.ones((4, 32)), "fp8_e4m3", axis=1.0)


def test_rounding_errors_list_the_allowed_modes():
    with pytest.raises(ValueError, match="rounding must be one of nearest_even, nearest_away, toward_zero, stochastic"):
        scaled.BlockArray.from_array(jnp.ones(4), "fp8_e4m3", rounding="toward_positive")
    with pytest.raises(ValueError, match="needs key"):
        scaled.BlockArray.from_array(jnp.ones(32), "mxfp4", rounding="stochastic")
    with pytest.raises(ValueError, match="rounding must be one of"):
        scaled.BlockArray.from_array(jnp.ones(32), "mxfp4", rounding="nearest")


def test_scale_argument_errors():
    with pytest.raises(ValueError, match="not supported for block format nvfp4"):
        scaled.BlockArray.from_array(jnp.ones(16), "nvfp4", scale=1.0)
    with pytest.raises(ValueError, match="powers of two"):
        scaled.BlockArray.from_array(jnp.ones(32), "mxfp4", scale=3.0)
    with pytest.raises(ValueError, match="positive normal"):
        scaled.BlockArray.from_array(jnp.ones(4), "fp8_e4m3", scale=0.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled.BlockArray.from_array(jnp.ones((4, 32)), "mxfp4", scale=np.ones(3, np.float32))


def test_pad_must_be_bool():
    with pytest.raises(TypeError, match="pad must be a bool"):
        scaled.BlockArray.from_array(jnp.ones(32), "mxfp4", pad="yes")


def test_mxint8_has_no_negative_zero():
    x = np.zeros((1, 64), np.float32)
    x[0, 0], x[0, 1], x[0, 2] = 1.0, -0.0, -1e-4
    sa = _q(x, "mxint8")
    y = np.asarray(sa.dequantize())
    assert not np.signbit(y[0, 1]) and not np.signbit(y[0, 2])


def test_bfloat16_input_is_scaled_exactly():
    x = np.array([[448.0, 2.0**-3 * 1.0625, 2.0**-133]], ml_dtypes.bfloat16)  # exact in bf16; one subnormal
    sa = scaled.BlockArray.from_array(jnp.asarray(x), "mxfp8_e4m3", pad=True)  # scale 2**0
    assert sa.values.tolist() == [[448.0, 0.125, 0.0]]  # 0.1328125 ties down to even 0.125
    reference.assert_equal(sa, reference.quantize(x, "mxfp8_e4m3", pad=True))
