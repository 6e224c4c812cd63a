"""fpemu.scalify.ops, .lax, .tree and .quantization, eagerly on ScaledArrays and inside scalify."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
import fpemu.scalify as jsa


@pytest.mark.parametrize(
    "fn, data, scale",
    [(jsa.ops.dynamic_rescale_max, [2, -3], 8), (jsa.ops.dynamic_rescale_l1, [1, -6], 8),
     (jsa.ops.dynamic_rescale_l2, [4, -8], 16)],  # max 3, mean |x| 3.5, RMS 6.32: pow2 2, 2, 4
)  # fmt: skip
def test_dynamic_rescale(fn, data, scale):
    x = jsa.scaled_array(data, np.float16(4), dtype=np.float16)
    for out in (fn(x), jsa.scalify(fn)(x)):
        assert isinstance(out, jsa.ScaledArray) and out.dtype == np.float16
        assert float(out.scale) == scale and out.scale.dtype == np.float16
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    zero = fn(jsa.scaled_array([0, 0], np.float32(1), dtype=np.float16))
    assert float(zero.scale) == 2.0**-14  # the floor
    plain = np.ones(3, np.float32)
    assert fn(plain) is plain


def test_rescale_grad_variants_act_on_the_backward_pass_only():
    x = jsa.scaled_array([2.0, -3.0], np.float32(4))
    out = jsa.scalify(jsa.ops.dynamic_rescale_max_grad)(x)
    assert float(out.scale) == 4.0

    def f(v):
        return jnp.sum(jsa.ops.dynamic_rescale_l2_grad(v) * 3.0)

    g = jsa.scalify(jax.grad(f))(x)
    assert isinstance(g, jsa.ScaledArray) and np.asarray(g).tolist() == [3.0, 3.0]


def test_reduce_precision_is_ocp_e4m3():
    sc = jsa.as_scaled_array(np.array([17.0, 19.0], np.float32), scale=np.float32(2))
    out = jsa.scalify(lambda v: jsa.ops.reduce_precision_on_forward(v, ml_dtypes.float8_e4m3fn))(sc)
    assert out.data.tolist() == [8.0, 10.0] and float(out.scale) == 2.0
    x = jnp.array([464.0, 3 * 2.0**-10, 250.0], jnp.float32)  # lax.reduce_precision(4, 3): inf, 0, 256
    assert jsa.ops.reduce_precision_on_forward(x, "e4m3fn").tolist() == [448.0, 2.0**-8, 256.0]
    assert jsa.ops.reduce_precision_on_forward(x, "e3m2fn").tolist() == fpemu.quantize(x, "e3m2fn").tolist()
    g = jax.grad(lambda v: jsa.ops.reduce_precision_on_forward(v, "e4m3fn").sum())(x)
    assert g.tolist() == [1.0, 1.0, 1.0]
    g = jax.grad(lambda v: (jsa.ops.reduce_precision_on_backward(v, "e4m3fn") * 300.0).sum())(x)
    assert g.tolist() == [288.0, 288.0, 288.0]


def test_cast_on_forward_and_backward():
    x = jsa.as_scaled_array(np.array([1.0, 464.0], np.float32))
    out = jsa.scalify(lambda v: jsa.ops.cast_on_forward(v, jnp.float8_e4m3fn))(x)
    assert out.data.dtype == jnp.float8_e4m3fn and np.asarray(out, np.float32).tolist() == [1.0, 448.0]
    g = jax.grad(lambda v: (jsa.ops.cast_on_backward(v, jnp.float16) * 70000.0).sum())(jnp.ones(2))
    assert g.dtype == jnp.float16 and np.isinf(np.asarray(g)).all()  # the gradient was cast


def test_debug_callback_sees_scaled_arrays(capsys):
    seen = []
    x = jsa.as_scaled_array(np.array([1.0, 2.0], np.float32), scale=np.float32(2))
    jsa.scalify(lambda v: jsa.debug_callback(lambda a: seen.append(a), v * 2.0))(x)
    jsa.ops.debug_print("value {}", x)
    jax.effects_barrier()
    assert isinstance(seen[0], jsa.ScaledArray) and np.asarray(seen[0]).tolist() == [2.0, 4.0]
    assert "value ScaledArray(" in capsys.readouterr().out
    grads = []
    jax.grad(lambda v: jsa.ops.debug_callback_grad(lambda g: grads.append(g), v)[0].sum())(jnp.ones(2))
    jax.effects_barrier()
    assert np.asarray(grads[0]).tolist() == [1.0, 1.0]


def test_scale_primitives_are_identities_outside_scalify():
    x = jnp.arange(3.0)
    assert jsa.lax.set_scaling(x, jnp.float32(4)) is not None
    np.testing.assert_array_equal(jsa.lax.set_scaling(x, jnp.float32(4)), x)
    np.testing.assert_array_equal(jsa.lax.stop_scaling(x, jnp.float16), x.astype(jnp.float16))
    data, scale = jsa.lax.get_data_scale(x)
    assert data is x and float(scale) == 1.0
    np.testing.assert_array_equal(jax.jit(jsa.lax.rebalance)(x, jnp.float32(2)), x)
    assert jax.grad(lambda v: jsa.lax.set_scaling(v, jnp.float32(4)).sum())(x).tolist() == [1.0] * 3
    assert jax.grad(lambda v: jsa.lax.stop_scaling(v).sum())(x).tolist() == [1.0] * 3
    assert jax.vmap(lambda v: jsa.lax.set_scaling(v, jnp.float32(4)))(x[:, None]).shape == (3, 1)


def test_scale_primitives_inside_scalify_and_eagerly():
    x = jnp.array([1.0, 2.0], jnp.float32)
    out = jsa.scalify(lambda v: jsa.lax.set_scaling(v, jnp.float32(4)))(x)  # always scaled
    assert out.data.tolist() == [0.25, 0.5] and float(out.scale) == 4
    sx = jsa.as_scaled_array(x, scale=np.float32(2))
    assert jsa.scalify(jsa.lax.stop_scaling)(sx).tolist() == [1.0, 2.0]
    data, scale = jsa.scalify(jsa.lax.get_data_scale)(sx)
    assert data.tolist() == [0.5, 1.0] and float(scale) == 2.0
    for fn in (jsa.lax.rebalance, jsa.scalify(jsa.lax.rebalance)):
        out = fn(sx, np.float32(4))
        assert out.data.tolist() == [0.125, 0.25] and float(out.scale) == 8.0
    zero = jsa.lax.set_scaling(sx, np.float32(0))
    assert not np.isnan(np.asarray(zero.data)).any()


def test_tree():
    tree = {"a": jsa.as_scaled_array(np.ones(2, np.float32)), "b": np.arange(2), "c": jnp.ones(1)}
    leaves, treedef = jsa.tree.flatten(tree)
    assert len(leaves) == 3 and jsa.tree.unflatten(treedef, leaves)["b"] is tree["b"]
    assert len(jsa.tree.leaves(tree)) == 3 and jsa.tree.structure(tree) == treedef
    cast = jsa.tree.astype(tree, np.float16, floating_only=True)
    assert cast["a"].dtype == np.float16 and cast["b"].dtype == tree["b"].dtype
    assert jsa.tree.map(lambda v: v.shape, tree)["a"] == (2,)
    assert jsa.tree.all({"x": True, "y": np.bool_(True)}) and not jsa.tree.all([True, False])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_quantization(dtype):
    x = np.array([-2, 0, 2, 1, 9, 15], dtype)
    assert jsa.quantization.pow2_truncate(x).tolist() == [-2.0, 0.0, 2.0, 1.0, 8.0, 8.0]
    assert jsa.quantization.pow2_truncate(jnp.asarray(x)).tolist() == [-2.0, 0.0, 2.0, 1.0, 8.0, 8.0]
    if dtype == np.float16:
        return
    v = np.array([0.6, 2, 1, 9, 15, 127], dtype).reshape(3, 2)
    codes = jsa.quantization.as_e8m0(v)
    assert (
        codes.dtype == np.uint8
        and codes.tolist() == (np.log2(jsa.quantization.pow2_truncate(v).astype(np.float32)) + 127).tolist()
    )
    assert jsa.quantization.as_e8m0(np.array([-0.1, -3, 0, 2**-127], dtype)).tolist() == [0, 0, 0, 0]
    p = np.array([2**-127, 0.25, 1, 2, 8, 2.0**127], dtype)
    assert jsa.quantization.from_e8m0(jsa.quantization.as_e8m0(p), dtype).tolist() == p.tolist()
    assert jsa.quantization.from_e8m0(jsa.quantization.as_e8m0(jnp.asarray(p)), dtype).tolist() == p.tolist()
