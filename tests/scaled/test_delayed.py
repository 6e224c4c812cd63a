"""Delayed scaling: the functional amax-history state, reductions, margin, and the scale rules."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled
from fpemu.scaled import DelayedScaling, DelayedScalingState, get_block_format
from fpemu.testing import scaled_reference as reference


def _run(ds, xs):
    state = ds.init(xs[0])
    scales, outs = [], []
    for x in xs:
        scales.append(np.asarray(state.scale).copy())
        y, state = ds.quantize_dequantize(jnp.asarray(x, jnp.float32), state)
        outs.append(np.asarray(y))
    return scales, outs, state


def test_first_step_uses_scale_one_then_the_history():
    ds = DelayedScaling(block_format="fp8_e4m3", history_length=3)
    xs = [np.array([1.0, -896.0]), np.array([1.0, 2.0]), np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([1, 1])]
    scales, outs, state = _run(ds, xs)
    # amax history 896, 2, 0.5, 0.5: the max over the last 3 steps; scale = fl(1 / fl(448 / amax))
    assert [s.item() for s in scales] == [1.0, 2.0, 2.0, 2.0, np.float32(1) / np.float32(224)]
    assert outs[0].tolist() == [1.0, -448.0]  # saturated: the scale was still 1
    assert outs[1].tolist() == [1.0, 2.0]
    assert state.amax_history.ravel().tolist() == [1.0, 0.5, 0.5]


def test_most_recent_reduction():
    ds = DelayedScaling(block_format="fp8_e4m3", history_length=4, reduction="most_recent")
    scales, _, _ = _run(ds, [np.array([448.0]), np.array([4.48]), np.array([44.8])])
    assert [s.item() for s in scales] == [1.0, 1.0, np.float32(1) / (np.float32(448) / np.float32(4.48))]


def test_scale_kept_while_amax_is_zero_or_not_finite():
    ds = DelayedScaling(block_format="fp8_e4m3", history_length=1)
    steps = [np.array([v]) for v in (896.0, 0.0, np.nan, np.inf, 1.0)]
    scales, outs, _ = _run(ds, steps)
    assert [s.item() for s in scales] == [1.0, 2.0, 2.0, 2.0, 2.0]
    assert np.isnan(outs[2][0]) and outs[3][0] == 896.0  # a given scale: NaN stays, inf saturates


@pytest.mark.long
def test_state_matches_current_scaling_with_the_same_amax():
    """With history_length 1, step t + 1's scale is step t's current-scaling scale."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_t(3, (8, 16)).astype(np.float32) * 10.0**k for k in range(-3, 3)]
    for recipe, axis in (("fp8_e4m3", None), ("fp8_e5m2", 0), ("mxfp8_e4m3", -1)):
        ds = DelayedScaling(block_format=recipe, history_length=1, axis=axis)
        state = ds.init(xs[0])
        for x in xs:
            _, state = ds.quantize(jnp.asarray(x), state)
            current = scaled.BlockArray.from_array(jnp.asarray(x), recipe, axis=axis, pad=True)
            np.testing.assert_array_equal(np.asarray(state.scale), np.asarray(current.scale_values()))


def test_quantize_with_state_matches_reference_with_given_scale():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 32)).astype(np.float32) * 50
    for recipe in ("fp8_e4m3", "mxfp6_e3m2"):
        axis = -1 if get_block_format(recipe).block_size else None
        ds = DelayedScaling(block_format=recipe, history_length=2, axis=axis)
        state = ds.update(x * 0.25, ds.init(x))
        sa, _ = ds.quantize(jnp.asarray(x), state)
        reference.assert_equal(sa, reference.quantize(x, recipe, axis=axis, scale=np.asarray(state.scale)))


def test_pow2_rule_and_margin():
    recipe = dataclasses.replace(get_block_format("fp8_e4m3"), scale_rule="ceil", margin=1)
    ds = DelayedScaling(block_format=recipe, history_length=2)
    scales, _, _ = _run(ds, [np.array([100.0]), np.array([1.0])])
    assert scales[1].item() == 2.0**-2 * 2  # ceil(log2(100 / 448)) = -2, margin 1


def test_float_margin():
    recipe = dataclasses.replace(get_block_format("fp8_e4m3"), margin=2)
    ds = DelayedScaling(block_format=recipe, history_length=2)
    scales, _, _ = _run(ds, [np.array([448.0]), np.array([1.0])])
    assert scales[1].item() == 4.0


def test_per_axis_state_shapes():
    ds = DelayedScaling(block_format="fp8_e4m3", history_length=5, axis=0)
    state = ds.init((3, 7))
    assert state.scale.shape == (1, 7) and state.amax_history.shape == (5, 1, 7)
    ds = DelayedScaling(block_format="mxfp4", history_length=2, axis=-1)
    assert ds.init(jnp.zeros((3, 64))).scale.shape == (3, 2)


def test_jit_and_grad_through_a_training_step():
    ds = DelayedScaling(block_format="fp8_e5m2", history_length=8)

    @jax.jit
    def step(x, state):
        def loss(v):
            y, new_state = ds.quantize_dequantize(v, state)
            return jnp.sum(y * y), new_state

        (value, new_state), grad = jax.value_and_grad(loss, has_aux=True)(x)
        return value, grad, new_state

    x = jnp.linspace(-3.0, 3.0, 16)
    state = ds.init(x)
    for _ in range(3):
        _, grad, state = step(x, state)
    assert isinstance(state, DelayedScalingState)
    y, _ = ds.quantize_dequantize(x, state)
    np.testing.assert_array_equal(np.asarray(grad), 2 * np.asarray(y))  # straight through: d(y^2)/dx = 2y


def test_errors():
    with pytest.raises(ValueError, match="single-level block format"):
        DelayedScaling(block_format="nvfp4")
    with pytest.raises(ValueError, match="history_length must be an int >= 1"):
        DelayedScaling(history_length=0)
    with pytest.raises(ValueError, match="reduction must be one of 'max', 'most_recent'"):
        DelayedScaling(reduction="mean")
    with pytest.raises(ValueError, match="axis must be an int, not None"):
        DelayedScaling(block_format="mxfp4")
    ds = DelayedScaling(history_length=2)
    with pytest.raises(ValueError, match="state does not fit x of shape"):
        ds.quantize(jnp.ones((2, 3)), DelayedScaling(history_length=3).init((2, 3)))
    with pytest.raises(scaled.UnknownBlockFormatError):
        DelayedScaling(block_format="fp8")
    with pytest.raises(ValueError, match=r"axis=2 is out of range for shape \(4, 8\) \(valid: -2..1\)"):
        DelayedScaling(block_format="fp8_e4m3", axis=2).init((4, 8))
