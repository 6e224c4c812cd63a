"""`ScaledArray`: a pytree through jit, vmap and grad; dtype and shape of every output; codes,
packing and nbytes; reprs and NumPy/JAX conversion."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.scaled import ScaledArray, reference

RECIPES = scaled.recipes()
X = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * 3


def _same(a, b):
    reference.assert_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("recipe", RECIPES)
def test_dtype_and_shape_of_every_output(recipe):
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), recipe)
    r = sa.recipe
    assert sa.shape == X.shape and sa.dtype == np.float32 and sa.values.dtype == jnp.float32
    groups = 64 // r.block_size if r.block_size else 1
    assert sa.scale.shape == ((4, groups) if r.block_size else (1, 1))
    assert sa.scale.dtype == (jnp.float32 if r.scale_kind == "fp32" else jnp.uint8)
    assert (sa.global_scale is None) == (not r.global_scale)
    assert sa.scale_values().dtype == jnp.float32 and sa.scale_values().shape == sa.scale.shape
    assert sa.dequantize().dtype == jnp.float32
    assert scaled.quantize_dequantize(jnp.asarray(X), recipe).dtype == jnp.float32  # codes: test_pack_round_trip


def test_dequantize_to_another_dtype():
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), "mxfp8_e5m2")
    y = sa.dequantize(jnp.bfloat16)
    assert y.dtype == jnp.bfloat16
    _same(y, np.asarray(sa.dequantize()).astype(jnp.bfloat16))


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "fp8_e4m3"])
def test_jit_in_and_out(recipe):
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), recipe)
    f = jax.jit(lambda x: scaled.ScaledArray.from_array(x, recipe))
    sb = f(jnp.asarray(X))
    assert isinstance(sb, ScaledArray) and sb.recipe == sa.recipe and sb.axis == sa.axis
    _same(sb.values, sa.values)
    _same(jax.jit(lambda s: s.dequantize())(sa), sa.dequantize())
    leaves, treedef = jax.tree_util.tree_flatten(sa)
    assert len(leaves) == (3 if sa.global_scale is not None else 2)
    _same(jax.tree_util.tree_unflatten(treedef, leaves).dequantize(), sa.dequantize())


@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "nvfp4"])
def test_vmap_matches_per_example_calls(recipe):
    batch = jnp.asarray(np.stack([X, X * 1e-3, X * 1e3]))
    out = jax.vmap(lambda x: scaled.ScaledArray.from_array(x, recipe))(batch)
    assert out.values.shape == (3, 4, 64)
    for i in range(3):
        one = scaled.ScaledArray.from_array(batch[i], recipe)
        _same(out.values[i], one.values)
        _same(out.scale[i], one.scale)
    # the batched ScaledArray dequantizes as a whole (scales keep one axis per array axis)
    expected = np.stack([np.asarray(scaled.ScaledArray.from_array(batch[i], recipe).dequantize()) for i in range(3)])
    _same(out.dequantize(), expected)
    _same(jax.vmap(lambda x: scaled.quantize_dequantize(x, recipe))(batch), expected)


@pytest.mark.parametrize("recipe", RECIPES)
def test_gradient_is_straight_through(recipe):
    x = X.copy()
    x[0, :32] = 0.0  # an all-zero block (E8M0 scale 2**-127)
    x[1, 3] = np.inf  # a NaN-scale block
    x = jnp.asarray(x)
    g = jax.grad(lambda v: scaled.ScaledArray.from_array(v, recipe).dequantize().sum())(x)
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
    g = jax.jit(jax.grad(lambda v: jnp.sum(scaled.ScaledArray.from_array(v, recipe).dequantize() * 3.0)))(x)
    if scaled.get_recipe(recipe).is_pow2:  # (3 * s) / s is exact for powers of two
        _same(g, np.full(X.shape, 3.0, np.float32))
    else:  # and within one float32 rounding otherwise
        np.testing.assert_allclose(np.asarray(g), 3.0, rtol=2.0**-23)


def test_gradient_of_the_values_divides_by_the_scale():
    x = jnp.asarray(X)
    sa = scaled.ScaledArray.from_array(x, "mxfp4")
    g = jax.grad(lambda v: scaled.ScaledArray.from_array(v, "mxfp4").values.sum())(x)
    s = np.repeat(np.asarray(sa.scale_values()), 32, axis=-1)
    _same(g, 1 / s)


def test_forward_mode():
    x = jnp.asarray(X)
    t = jnp.ones_like(x)
    _, dy = jax.jvp(lambda v: scaled.quantize_dequantize(v, "nvfp4"), (x,), (t,))
    _same(dy, t)
    _, dy = jax.jvp(lambda v: scaled.ScaledArray.from_array(v, "mxfp6_e3m2").dequantize(), (x,), (t,))
    _same(dy, t)


def test_bfloat16_gradient_dtype():
    x = jnp.asarray(X, jnp.bfloat16)
    g = jax.grad(lambda v: scaled.ScaledArray.from_array(v, "mxfp8_e4m3").dequantize().astype(jnp.float32).sum())(x)
    assert g.dtype == jnp.bfloat16 and np.all(np.asarray(g, np.float32) == 1)


def test_numpy_and_jax_conversion():
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), "mxfp6_e2m3")
    y = np.asarray(sa.dequantize())
    _same(np.asarray(sa), y)
    assert np.asarray(sa, dtype=np.float64).dtype == np.float64
    _same(jnp.asarray(sa), y)
    _same(jnp.sin(sa), jnp.sin(y))


def test_repr():
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), "nvfp4")
    assert repr(sa) == (
        "ScaledArray(nvfp4: shape=(4, 64) float32, blocks of 16 along axis -1, e2m1fn elements, "
        "e4m3fn scales (4, 4), float32 tensor scale, 148 bytes packed)"
    )
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), "fp8_e4m3", axis=0)
    assert "one scale per slice along axis -2" in repr(sa) and "fp32 scales (1, 64)" in repr(sa)
    assert "one scale per tensor" in repr(scaled.ScaledArray.from_array(jnp.asarray(X), "fp8_e4m3"))


@pytest.mark.parametrize(("recipe", "nbytes"), [
    ("mxfp8_e4m3", 256 + 8), ("mxfp8_e5m2", 256 + 8), ("mxfp6_e3m2", 192 + 8), ("mxfp6_e2m3", 192 + 8),
    ("mxfp4", 128 + 8), ("mxint8", 256 + 8), ("nvfp4", 128 + 16 + 4), ("fp8_e4m3", 256 + 4), ("fp8_e5m2", 256 + 4),
])  # fmt: skip
def test_nbytes_is_the_packed_size(recipe, nbytes):
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), recipe)
    assert sa.nbytes == nbytes == sa.pack().nbytes


@pytest.mark.parametrize(("recipe", "cols"), [*((r, 64) for r in RECIPES), ("mxfp6_e3m2", 50), ("mxfp4", 49)])
def test_pack_round_trip(recipe, cols):
    x = jnp.asarray(X[:, :cols])
    sa = scaled.ScaledArray.from_array(x, recipe, pad=True)
    packed = sa.pack()
    assert packed.elements.dtype == jnp.uint8
    back = ScaledArray.from_packed(packed, recipe=recipe, shape=x.shape, axis=sa.axis)
    _same(back.values, sa.values)
    _same(back.dequantize(), sa.dequantize())
    again = ScaledArray.from_codes(sa.codes(), sa.scale, recipe=recipe, axis=sa.axis, global_scale=sa.global_scale)
    _same(again.dequantize(), sa.dequantize())


def test_fp4_packing_layout():
    """Two E2M1 codes per byte, the first in the low nibble (fpemu.pack's layout)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [6.0, -1.0, 0.5, 3.0]  # amax 6: scale 2**0
    sa = scaled.ScaledArray.from_array(jnp.asarray(x), "mxfp4")
    assert sa.codes()[0, :4].tolist() == [0x7, 0xA, 0x1, 0x5]
    assert sa.pack().elements[0, :2].tolist() == [0xA7, 0x51]
    assert sa.pack().scale.tolist() == [[127]]


def test_mxint8_codes_are_twos_complement():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [1.0, -1.0, -1.5, 0.015625]  # amax 1.5: scale 2**0
    sa = scaled.ScaledArray.from_array(jnp.asarray(x), "mxint8")
    assert sa.codes()[0, :4].tolist() == [64, -64, -96, 1]
    assert sa.pack().elements[0, :4].tolist() == [64, 192, 160, 1]
    minus_two = ScaledArray.from_codes(np.full((1, 32), -128, np.int8), sa.scale, recipe="mxint8")
    assert float(minus_two.dequantize()[0, 0]) == -2.0  # the -128 code decodes, though quantize never makes it


def test_scale_values_and_e8m0_codes():
    x = np.zeros((1, 64), np.float32)
    x[0, 32] = 448.0 * 2**-20
    sa = scaled.ScaledArray.from_array(jnp.asarray(x), "mxfp8_e4m3")
    assert sa.scale.tolist() == [[0, 127 - 20]]
    assert sa.scale_values().tolist() == [[2.0**-127, 2.0**-20]]
    assert fpemu.decode(sa.scale, "e8m0fnu").tolist() == [[2.0**-127, 2.0**-20]]


def test_dequantize_dtype_errors():
    sa = scaled.ScaledArray.from_array(jnp.asarray(X), "mxfp4")
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        sa.dequantize(jnp.int8)
