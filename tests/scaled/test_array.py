"""`BlockArray`: a pytree through jit, vmap and grad; dtype and shape of every output; codes,
packing and nbytes; reprs and NumPy/JAX conversion; NaN through storage; what from_codes and
from_packed refuse."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.scaled import BlockArray
from fpemu.testing import scaled_reference as reference

RECIPES = scaled.block_formats()
X = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * 3


def _same(a, b):
    reference.assert_equal(np.asarray(a), np.asarray(b))


@pytest.mark.long
@pytest.mark.parametrize("recipe", RECIPES)
def test_dtype_and_shape_of_every_output(recipe):
    sa = scaled.BlockArray.from_array(jnp.asarray(X), recipe)
    r = sa.block_format
    assert sa.shape == X.shape and sa.dtype == np.float32 and sa.values.dtype == jnp.float32
    groups = 64 // r.block_size if r.block_size else 1
    assert sa.scale.shape == ((4, groups) if r.block_size else (1, 1))
    assert sa.scale.dtype == (jnp.float32 if r.scale_kind == "fp32" else jnp.uint8)
    assert (sa.global_scale is None) == (not r.global_scale)
    assert sa.scale_values().dtype == jnp.float32 and sa.scale_values().shape == sa.scale.shape
    assert sa.dequantize().dtype == jnp.float32
    assert scaled.quantize_dequantize(jnp.asarray(X), recipe).dtype == jnp.float32  # codes: test_pack_round_trip


def test_dequantize_to_another_dtype():
    sa = scaled.BlockArray.from_array(jnp.asarray(X), "mxfp8_e5m2")
    y = sa.dequantize(jnp.bfloat16)
    assert y.dtype == jnp.bfloat16
    _same(y, np.asarray(sa.dequantize()).astype(jnp.bfloat16))


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "fp8_e4m3"])
def test_jit_in_and_out(recipe):
    sa = scaled.BlockArray.from_array(jnp.asarray(X), recipe)
    f = jax.jit(lambda x: scaled.BlockArray.from_array(x, recipe))
    sb = f(jnp.asarray(X))
    assert isinstance(sb, BlockArray) and sb.block_format == sa.block_format and sb.axis == sa.axis
    _same(sb.values, sa.values)
    _same(jax.jit(lambda s: s.dequantize())(sa), sa.dequantize())
    leaves, treedef = jax.tree_util.tree_flatten(sa)
    assert len(leaves) == (3 if sa.global_scale is not None else 2)
    _same(jax.tree_util.tree_unflatten(treedef, leaves).dequantize(), sa.dequantize())


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "nvfp4"])
def test_vmap_matches_per_example_calls(recipe):
    batch = jnp.asarray(np.stack([X, X * 1e-3, X * 1e3]))
    out = jax.vmap(lambda x: scaled.BlockArray.from_array(x, recipe))(batch)
    assert out.values.shape == (3, 4, 64)
    for i in range(3):
        one = scaled.BlockArray.from_array(batch[i], recipe)
        _same(out.values[i], one.values)
        _same(out.scale[i], one.scale)
    # the batched BlockArray dequantizes as a whole (scales keep one axis per array axis)
    expected = np.stack([np.asarray(scaled.BlockArray.from_array(batch[i], recipe).dequantize()) for i in range(3)])
    _same(out.dequantize(), expected)
    _same(jax.vmap(lambda x: scaled.quantize_dequantize(x, recipe))(batch), expected)


@pytest.mark.long
@pytest.mark.parametrize("recipe", RECIPES)
def test_gradient_is_straight_through(recipe):
    x = X.copy()
    x[0, :32] = 0.0  # an all-zero block (E8M0 scale 2**-127)
    x[1, 3] = np.inf  # a NaN-scale block
    x = jnp.asarray(x)
    g = jax.grad(lambda v: scaled.BlockArray.from_array(v, recipe).dequantize().sum())(x)
    _same(g, np.ones(X.shape, np.float32))


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "fp8_e4m3"])
def test_fused_gradient_is_the_identity(recipe):
    x = X.copy()
    x[1, 3] = np.nan
    g = jax.grad(lambda v: (scaled.quantize_dequantize(v, recipe) * jnp.arange(64.0)[None]).sum())(jnp.asarray(x))
    _same(g, np.broadcast_to(np.arange(64.0, dtype=np.float32), X.shape))


@pytest.mark.parametrize("recipe", ["mxfp6_e2m3", "nvfp4", "fp8_e5m2"])
def test_gradient_under_jit_with_other_cotangents(recipe):
    x = jnp.asarray(X)
    g = jax.jit(jax.grad(lambda v: jnp.sum(scaled.BlockArray.from_array(v, recipe).dequantize() * 3.0)))(x)
    if scaled.get_block_format(recipe).is_pow2:  # (3 * s) / s is exact for powers of two
        _same(g, np.full(X.shape, 3.0, np.float32))
    else:  # and within one float32 rounding otherwise
        np.testing.assert_allclose(np.asarray(g), 3.0, rtol=2.0**-23)


def test_gradient_of_the_values_divides_by_the_scale():
    x = jnp.asarray(X)
    sa = scaled.BlockArray.from_array(x, "mxfp4")
    g = jax.grad(lambda v: scaled.BlockArray.from_array(v, "mxfp4").values.sum())(x)
    s = np.repeat(np.asarray(sa.scale_values()), 32, axis=-1)
    _same(g, 1 / s)


@pytest.mark.long
def test_forward_mode():
    x = jnp.asarray(X)
    t = jnp.ones_like(x)
    _, dy = jax.jvp(lambda v: scaled.quantize_dequantize(v, "nvfp4"), (x,), (t,))
    _same(dy, t)
    _, dy = jax.jvp(lambda v: scaled.BlockArray.from_array(v, "mxfp6_e3m2").dequantize(), (x,), (t,))
    _same(dy, t)


def test_bfloat16_gradient_dtype():
    x = jnp.asarray(X, jnp.bfloat16)
    g = jax.grad(lambda v: scaled.BlockArray.from_array(v, "mxfp8_e4m3").dequantize().astype(jnp.float32).sum())(x)
    assert g.dtype == jnp.bfloat16 and np.all(np.asarray(g, np.float32) == 1)


def test_numpy_and_jax_conversion():
    sa = scaled.BlockArray.from_array(jnp.asarray(X), "mxfp6_e2m3")
    y = np.asarray(sa.dequantize())
    _same(np.asarray(sa), y)
    assert np.asarray(sa, dtype=np.float64).dtype == np.float64
    _same(jnp.asarray(sa), y)
    _same(jnp.sin(sa), jnp.sin(y))


def test_repr():
    sa = scaled.BlockArray.from_array(jnp.asarray(X), "nvfp4")
    assert repr(sa) == (
        "BlockArray(nvfp4: shape=(4, 64) float32, blocks of 16 along axis -1, e2m1fn elements, "
        "e4m3fn scales (4, 4), float32 tensor scale, 148 bytes packed)"
    )
    sa = scaled.BlockArray.from_array(jnp.asarray(X), "fp8_e4m3", axis=0)
    assert "one scale per slice along axis -2" in repr(sa) and "fp32 scales (1, 64)" in repr(sa)
    assert "one scale per tensor" in repr(scaled.BlockArray.from_array(jnp.asarray(X), "fp8_e4m3"))


@pytest.mark.parametrize(("recipe", "nbytes"), [
    ("mxfp8_e4m3", 256 + 8), ("mxfp8_e5m2", 256 + 8), ("mxfp6_e3m2", 192 + 8), ("mxfp6_e2m3", 192 + 8),
    ("mxfp4", 128 + 8), ("mxint8", 256 + 8), ("nvfp4", 128 + 16 + 4), ("fp8_e4m3", 256 + 4), ("fp8_e5m2", 256 + 4),
])  # fmt: skip
def test_nbytes_is_the_packed_size(recipe, nbytes):
    sa = scaled.BlockArray.from_array(jnp.asarray(X), recipe)
    assert sa.nbytes == nbytes == sa.pack().nbytes


@pytest.mark.long
@pytest.mark.parametrize(("recipe", "cols"), [*((r, 64) for r in RECIPES), ("mxfp6_e3m2", 50), ("mxfp4", 49)])
def test_pack_round_trip(recipe, cols):
    x = jnp.asarray(X[:, :cols])
    sa = scaled.BlockArray.from_array(x, recipe, pad=True)
    packed = sa.pack()
    assert packed.elements.dtype == jnp.uint8
    back = BlockArray.from_packed(packed, block_format=recipe, shape=x.shape, axis=sa.axis)
    _same(back.values, sa.values)
    _same(back.dequantize(), sa.dequantize())
    again = BlockArray.from_codes(sa.codes(), sa.scale, block_format=recipe, axis=sa.axis, global_scale=sa.global_scale)
    _same(again.dequantize(), sa.dequantize())


@pytest.mark.long
def test_fp4_packing_layout():
    """Two E2M1 codes per byte, the first in the low nibble (fpemu.pack's layout)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [6.0, -1.0, 0.5, 3.0]  # amax 6: scale 2**0
    sa = scaled.BlockArray.from_array(jnp.asarray(x), "mxfp4")
    assert sa.codes()[0, :4].tolist() == [0x7, 0xA, 0x1, 0x5]
    assert sa.pack().elements[0, :2].tolist() == [0xA7, 0x51]
    assert sa.pack().scale.tolist() == [[127]]


@pytest.mark.long
def test_mxint8_codes_are_twos_complement():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [1.0, -1.0, -1.5, 0.015625]  # amax 1.5: scale 2**0
    sa = scaled.BlockArray.from_array(jnp.asarray(x), "mxint8")
    assert sa.codes()[0, :4].tolist() == [64, -64, -96, 1]
    assert sa.pack().elements[0, :4].tolist() == [64, 192, 160, 1]
    minus_two = BlockArray.from_codes(np.full((1, 32), -128, np.int8), sa.scale, block_format="mxint8")
    assert float(minus_two.dequantize()[0, 0]) == -2.0  # the -128 code decodes, though quantize never makes it


@pytest.mark.long
def test_scale_values_and_e8m0_codes():
    x = np.zeros((1, 64), np.float32)
    x[0, 32] = 448.0 * 2**-20
    sa = scaled.BlockArray.from_array(jnp.asarray(x), "mxfp8_e4m3")
    assert sa.scale.tolist() == [[0, 127 - 20]]
    assert sa.scale_values().tolist() == [[2.0**-127, 2.0**-20]]
    assert fpemu.decode(sa.scale, "e8m0fnu").tolist() == [[2.0**-127, 2.0**-20]]


def test_dequantize_dtype_errors():
    sa = scaled.BlockArray.from_array(jnp.asarray(X), "mxfp4")
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        sa.dequantize(jnp.int8)


# -- NaN through storage ---------------------------------------------------------------------------

SINGLE_LEVEL = [r for r in RECIPES if not scaled.get_block_format(r).global_scale]


def _nan_input() -> np.ndarray:
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(2, 64)
    x[0, 5] = np.nan
    return x


@pytest.mark.long
@pytest.mark.parametrize("recipe", SINGLE_LEVEL)
def test_nan_element_with_a_given_scale_survives_pack_and_unpack(recipe):
    """With a given scale a NaN element stays NaN in `values`. FP8 elements store it as their NaN code;
    FP4, FP6 and INT8 have none, so the group is stored with the NaN scale (OCP MX: a NaN block) and
    every element of that group reads back as NaN (e.g. all of row 0's first block of 32)."""
    r = scaled.get_block_format(recipe)
    x = _nan_input()
    axis = -1 if r.block_size else None
    sa = BlockArray.from_array(jnp.asarray(x), recipe, axis=axis, scale=np.float32(1.0))
    assert np.isnan(np.asarray(sa.values)[0, 5]) and np.isnan(np.asarray(sa.dequantize())[0, 5])
    packed = sa.pack()
    back = BlockArray.from_packed(packed, block_format=recipe, shape=x.shape, axis=axis)
    y = np.asarray(back.dequantize())
    if r.element.has_nan:  # the element's own NaN code: only that element, the scales unchanged
        expected_nan = np.zeros(x.shape, bool)
        expected_nan[0, 5] = True
        _same(packed.scale, sa.scale)
    else:
        expected_nan = np.zeros(x.shape, bool)
        expected_nan[0, : r.block_size or 64] = True  # the first block of row 0 (the tensor: fp32 scales)
        if r.block_size is None:
            expected_nan[:] = True
        scale = np.asarray(packed.scale)
        nan_scale = np.isnan(scale) if r.scale_kind == "fp32" else scale == r.scale_format.nan_code
        assert nan_scale.ravel().tolist() == [True] + [False] * (scale.size - 1)
    np.testing.assert_array_equal(np.isnan(y), expected_nan)
    finite = ~expected_nan
    _same(y[finite], np.asarray(sa.dequantize())[finite])


@pytest.mark.long
@pytest.mark.parametrize("recipe", RECIPES)
def test_nan_block_survives_pack_and_unpack_through_its_scale(recipe):
    """Current scaling: a block (or slice, or tensor) holding NaN gets the NaN scale, which pack stores."""
    r = scaled.get_block_format(recipe)
    x = _nan_input()
    axis = -1 if r.block_size else 1
    sa = BlockArray.from_array(jnp.asarray(x), recipe, axis=axis)
    back = BlockArray.from_packed(sa.pack(), block_format=recipe, shape=x.shape, axis=axis)
    expected_nan = np.zeros(x.shape, bool)
    expected_nan[0, : r.block_size or 64] = True
    np.testing.assert_array_equal(np.isnan(np.asarray(back.dequantize())), expected_nan)


@pytest.mark.long
def test_pack_of_an_mxfp4_nan_no_longer_gives_negative_zero():
    """The issue's case: before, the NaN became the code 0x8 (-0.0) under a finite scale."""
    x = np.ones((1, 32), np.float32)
    x[0, 0] = np.nan
    sa = BlockArray.from_array(jnp.asarray(x), "mxfp4", scale=np.float32(1.0))
    assert sa.codes()[0, 0] == 0x8  # fpemu.encode's answer for an FP4 NaN, documented
    packed = sa.pack()
    assert packed.scale.tolist() == [[fpemu.get_format("e8m0fnu").nan_code]]
    assert np.isnan(np.asarray(BlockArray.from_packed(packed, block_format="mxfp4", shape=(1, 32)).dequantize())).all()


def test_pack_under_jit_keeps_the_nan_scale():
    x = _nan_input()
    packed = jax.jit(lambda v: BlockArray.from_array(v, "mxfp6_e2m3", scale=1.0).pack())(jnp.asarray(x))
    assert packed.scale.tolist() == [[0xFF, 127], [127, 127]]


# -- from_codes / from_packed: what they refuse ------------------------------------------------------


@functools.cache
def _codes_and_scale(recipe):
    sa = BlockArray.from_array(jnp.asarray(X), recipe)
    return sa, sa.codes(), sa.scale


@pytest.mark.parametrize(
    ("recipe", "bad_shape"),
    [
        ("mxfp4", (4, 3)),
        ("mxfp4", (4, 1)),
        ("mxfp4", (2, 2)),
        ("fp8_e4m3", (1, 64)),
        ("nvfp4", (4, 8)),
        ("mxfp8_e4m3", (8,)),
    ],
)
def test_from_codes_refuses_scales_of_the_wrong_shape(recipe, bad_shape):
    """Extra scales were silently ignored before; now the expected shape is named."""
    sa, codes, scale = _codes_and_scale(recipe)
    bad = np.ones(bad_shape, np.asarray(scale).dtype)
    with pytest.raises(ValueError, match=rf"scale must have shape \({scale.shape[0]}, {scale.shape[1]}\)"):
        BlockArray.from_codes(codes, bad, block_format=recipe, global_scale=sa.global_scale)


@pytest.mark.parametrize("recipe", ["mxfp4", "mxint8", "nvfp4"])
def test_from_codes_refuses_float_scales_where_codes_are_stored(recipe):
    """Float scales were read as E8M0 codes before (2.0 as the code 2, i.e. 2**-125)."""
    sa, codes, scale = _codes_and_scale(recipe)
    name = scaled.get_block_format(recipe).scale_format.name
    with pytest.raises(
        TypeError, match=rf"scale of block format {recipe} must hold uint8 {name} codes.*got dtype float32"
    ):
        BlockArray.from_codes(codes, sa.scale_values(), block_format=recipe, global_scale=sa.global_scale)


def test_from_codes_refuses_codes_where_float_scales_are_stored():
    sa, codes, scale = _codes_and_scale("fp8_e4m3")
    with pytest.raises(
        TypeError, match="scale of block format fp8_e4m3 must hold float32 decode scales, got dtype uint8"
    ):
        BlockArray.from_codes(codes, np.ones((1, 1), np.uint8), block_format="fp8_e4m3")


@pytest.mark.parametrize(
    ("scale", "error", "match"),
    [
        (np.array([[256, 0]] * 4, np.int32), ValueError, r"scale codes must lie in \[0, 256\) for e8m0fnu, got 256"),
        (np.array([[-1, 0]] * 4, np.int32), ValueError, "got -1"),
        (None, TypeError, "scale must be the scale leaf"),
        (np.array([["a", "b"]] * 4), TypeError, "uint8 e8m0fnu codes"),
    ],
)
def test_from_codes_scale_code_errors(scale, error, match):
    _, codes, _ = _codes_and_scale("mxfp4")
    with pytest.raises(error, match=match):
        BlockArray.from_codes(codes, scale, block_format="mxfp4")


@pytest.mark.parametrize(
    ("recipe", "value", "match"),
    [
        ("fp8_e4m3", -1.0, "NaN or positive and finite, got -1.0"),
        ("fp8_e4m3", 0.0, "got 0.0"),
        ("fp8_e4m3", np.inf, "got inf"),
        (scaled.BlockFormat(name="pow2_fp32", element="e4m3fn", scale_format="fp32", scale_rule="ceil"), 3.0,
         "positive normal powers of two, got 3.0"),
    ],
)  # fmt: skip
def test_from_codes_float_scale_values_the_recipe_cannot_hold(recipe, value, match):
    codes = np.zeros((2, 4), np.uint8)
    with pytest.raises(ValueError, match=match):
        BlockArray.from_codes(codes, np.full((1, 1), value, np.float32), block_format=recipe)


def test_from_codes_float64_scales_must_be_float32_values():
    codes = np.zeros((2, 4), np.uint8)
    ok = BlockArray.from_codes(codes, [[0.5]], block_format="fp8_e4m3")  # a Python float that is a float32
    assert ok.scale.dtype == jnp.float32 and ok.scale.tolist() == [[0.5]]
    with pytest.raises(ValueError, match="not exact"):
        BlockArray.from_codes(codes, [[0.1]], block_format="fp8_e4m3")


def test_from_codes_global_scale():
    sa, codes, scale = _codes_and_scale("nvfp4")
    with pytest.raises(ValueError, match="block format nvfp4 has a float32 tensor scale: pass global_scale"):
        BlockArray.from_codes(codes, scale, block_format="nvfp4")
    with pytest.raises(ValueError, match=r"global_scale must have shape \(1, 1\)"):
        BlockArray.from_codes(codes, scale, block_format="nvfp4", global_scale=np.ones((1, 2), np.float32))
    with pytest.raises(ValueError, match="global_scale must be positive and finite"):
        BlockArray.from_codes(codes, scale, block_format="nvfp4", global_scale=np.float32(np.nan))
    with pytest.raises(TypeError, match="global_scale must be a float32 array, got dtype int32"):
        BlockArray.from_codes(codes, scale, block_format="nvfp4", global_scale=np.ones((1, 1), np.int32))
    again = BlockArray.from_codes(codes, scale, block_format="nvfp4", global_scale=float(sa.global_scale[0, 0]))
    _same(again.dequantize(), sa.dequantize())
    with pytest.raises(ValueError, match="block format mxfp4 has no tensor scale: global_scale must be None"):
        BlockArray.from_codes(*_codes_and_scale("mxfp4")[1:], block_format="mxfp4", global_scale=1.0)


def test_from_codes_axis_dtype_and_code_errors():
    _, codes, scale = _codes_and_scale("mxfp4")
    with pytest.raises(ValueError, match="block format mxfp4 has blocks of 32 along an axis: axis must be an int"):
        BlockArray.from_codes(codes, scale, block_format="mxfp4", axis=None)
    with pytest.raises(ValueError, match=r"axis=2 is out of range for codes of rank 2 \(valid: -2..1\)"):
        BlockArray.from_codes(codes, scale, block_format="mxfp4", axis=2)
    with pytest.raises(TypeError, match="axis must be an int"):
        BlockArray.from_codes(codes, scale, block_format="mxfp4", axis="last")
    with pytest.raises(TypeError, match="dtype must be float16, bfloat16 or float32, got int8"):
        BlockArray.from_codes(codes, scale, block_format="mxfp4", dtype=np.int8)
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\) for e2m1fn, got 16"):
        BlockArray.from_codes(np.full((4, 64), 16, np.uint8), scale, block_format="mxfp4")
    with pytest.raises(TypeError, match="codes must be an integer array"):
        BlockArray.from_codes(np.zeros((4, 64), np.float32), scale, block_format="mxfp4")
    with pytest.raises(ValueError, match=r"integers k of int8_ocp and must lie in \[-128, 128\), got 200"):
        BlockArray.from_codes(np.full((4, 64), 200, np.int16), scale, block_format="mxint8")


@pytest.mark.long
def test_from_codes_defaults_and_accepted_forms():
    """The axis default is from_array's (per tensor for fp8_e4m3); a 0-d scale is a per-tensor one;
    MXINT8 codes may be the signed integers k or the unsigned codes."""
    sa, codes, scale = _codes_and_scale("fp8_e4m3")
    again = BlockArray.from_codes(codes, scale[0, 0], block_format="fp8_e4m3")
    assert again.axis is None and again.scale.shape == (1, 1)
    _same(again.dequantize(), sa.dequantize())
    sa, codes, scale = _codes_and_scale("mxint8")
    unsigned = np.asarray(codes).view(np.uint8)
    _same(BlockArray.from_codes(unsigned, scale, block_format="mxint8").values, sa.values)
    _same(BlockArray.from_codes(np.asarray(codes).astype(np.int32), scale, block_format="mxint8").values, sa.values)


def test_from_codes_under_jit_out_of_range_scale_codes_are_nan_scales():
    """Under jit the values are not checked; out-of-range codes (elements or scales) read as NaN, never
    as a wrapped-around value."""
    codes = jnp.zeros((1, 32), jnp.int32).at[0, 1].set(16)

    @jax.jit
    def f(c, s):
        return BlockArray.from_codes(c, s, block_format="mxfp4").dequantize()

    y = np.asarray(f(codes, jnp.array([[127]], jnp.int32)))
    assert y[0, 0] == 0 and np.isnan(y[0, 1])
    assert np.isnan(np.asarray(f(jnp.zeros((1, 32), jnp.int32), jnp.array([[383]], jnp.int32)))).all()


@pytest.mark.parametrize(
    ("recipe", "shape"),
    [
        ("mxfp4", (4, 62)),
        ("mxfp4", (4, 66)),
        ("mxfp4", (2, 64)),
        ("mxfp8_e4m3", (4, 63)),
        ("mxfp6_e2m3", (4, 60)),
        ("mxfp4", (256,)),
    ],
)
def test_from_packed_refuses_a_shape_that_does_not_match(recipe, shape):
    """A shape that drops codes returned a truncated array before."""
    sa = _codes_and_scale(recipe)[0]
    with pytest.raises(ValueError, match=r"packed.elements has shape .* shape must be the shape that was packed"):
        BlockArray.from_packed(sa.pack(), block_format=recipe, shape=shape)


@pytest.mark.parametrize(
    ("packed_as", "read_as", "says"),
    [
        ("mxfp4", "mxfp8", r"4-bit codes for shape=\(4, 64\), but block_format='mxfp8_e4m3' has 8-bit e4m3fn elements: "
         r"pass the block format it was packed with \(block formats with 4-bit elements: mxfp4, nvfp4\)"),
        ("mxfp8_e4m3", "mxfp6_e2m3", r"8-bit codes .* block_format='mxfp6_e2m3' has 6-bit e2m3fn elements"),
    ],
)  # fmt: skip
def test_from_packed_blames_the_recipe_when_another_element_width_fits(packed_as, read_as, says):
    """The shape is right and the recipe wrong: the message names the recipe, not the shape."""
    sa = _codes_and_scale(packed_as)[0]
    assert sa.shape == (4, 64)
    with pytest.raises(ValueError, match=says):
        BlockArray.from_packed(sa.pack(), block_format=read_as, shape=sa.shape)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp6_e3m2"])
def test_from_packed_refuses_a_shape_that_drops_codes_into_the_padding(recipe):
    """63 FP4 codes pack into the same 32 bytes as 64 (61 FP6 codes into the 48 bytes of 64): the dropped
    code would be read as padding, which pack always writes as zero codes."""
    x = np.full((4, 64), 1.0, np.float32)
    sa = BlockArray.from_array(jnp.asarray(x), recipe)
    short = 63 if recipe == "mxfp4" else 61
    with pytest.raises(ValueError, match=rf"nonzero codes after the first shape\[-1\]={short} codes"):
        BlockArray.from_packed(sa.pack(), block_format=recipe, shape=(4, short), axis=-1)
    padded = BlockArray.from_array(jnp.asarray(x[:, :short]), recipe, pad=True)
    back = BlockArray.from_packed(padded.pack(), block_format=recipe, shape=(4, short))
    _same(back.dequantize(), padded.dequantize())


def test_from_packed_argument_errors():
    sa = _codes_and_scale("mxfp4")[0]
    packed = sa.pack()
    with pytest.raises(TypeError, match="packed must be a fpemu.scaled.Packed"):
        BlockArray.from_packed(packed.elements, block_format="mxfp4", shape=(4, 64))
    with pytest.raises(TypeError, match="packed.elements must be uint8"):
        BlockArray.from_packed(packed._replace(elements=packed.elements.astype(jnp.int32)), block_format="mxfp4",
                                shape=(4, 64))  # fmt: skip
    with pytest.raises(TypeError, match="shape must be a tuple of ints"):
        BlockArray.from_packed(packed, block_format="mxfp4", shape=64)
    with pytest.raises(ValueError, match=r"shape\[1\] must be an int >= 0"):
        BlockArray.from_packed(packed, block_format="mxfp4", shape=(4, -64))
    with pytest.raises(ValueError, match=r"scale must have shape \(4, 2\)"):
        BlockArray.from_packed(packed._replace(scale=packed.scale[:, :1]), block_format="mxfp4", shape=(4, 64))


@pytest.mark.long
def test_scale_values_of_a_nan_block_are_nan():
    """The E8M0 NaN code (0xff) is a NaN scale, not 2**128 (= inf)."""
    x = jnp.array([jnp.nan, 1.0, 2.0, 4.0], jnp.float32)
    for name in ("mxfp8_e4m3", "mxfp4"):
        s = BlockArray.from_array(x, name, axis=0, pad=True)
        assert np.isnan(np.asarray(s.scale_values())).all()
