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


def _special_amaxes() -> np.ndarray:
    """float32 amaxes: subnormals, the normal extremes, E4M3/E5M2/E2M1 maxima times powers of two and
    their neighbours, powers of two, and random magnitudes over the whole range."""
    f32 = np.float32
    tiny = np.array([1e-45, 2e-45, 2.0**-127, 2.0**-126 - 2.0**-149, 2.0**-126, 2.0**-125], np.float64)
    big = np.array([2.0**126, 2.0**127, np.finfo(f32).max], np.float64)
    maxima = np.array([448.0, 57344.0, 6.0, 7.5, 28.0, 1.0, 127 / 64], np.float64)
    around = np.concatenate([maxima * 2.0**k for k in (-140, -100, -20, -1, 0, 1, 20, 100, 115)])
    rng = np.random.default_rng(11)
    rand = rng.uniform(1, 2, 60) * 2.0 ** rng.integers(-149, 128, 60)
    with np.errstate(over="ignore", under="ignore"):  # out of float32's range: dropped below
        a = np.concatenate([tiny, big, around, 2.0 ** np.arange(-149, 128, 7)]).astype(f32)
    a = a[np.isfinite(a) & (a > 0)]
    with np.errstate(over="ignore"):  # float32's max steps to inf: dropped below
        neighbours = np.concatenate([np.nextafter(a, f32(0)), np.nextafter(a, f32(np.inf))])
    return np.unique(np.concatenate([a, neighbours[np.isfinite(neighbours) & (neighbours > 0)], rand.astype(f32)]))


def _reference_scale(amax: np.float32, block_format) -> np.float32:
    """The decode scale the exact reference gives a one-element group holding ``amax`` (current scaling)."""
    axis = None if block_format.block_size is None else 0
    leaf = reference.quantize(np.array([amax], np.float32), block_format, axis=axis, pad=True).scale.reshape(-1)[0]
    if block_format.scale_kind == "pow2":  # an E8M0 code: 2**(code - 127), 2**-127 a float32 subnormal
        return np.float32(np.ldexp(1.0, int(leaf) - 127))
    return np.float32(leaf)


SINGLE_LEVEL = [f for f in map(get_block_format, scaled.block_formats()) if f.scale_kind != "narrow"]


@pytest.mark.parametrize("margin", [0, 3, -2])
@pytest.mark.parametrize("block_format", SINGLE_LEVEL, ids=lambda f: f.name)
def test_scale_from_amax_is_current_scalings_scale(block_format, margin):
    """Bit for bit the scale the exact reference gives a group whose amax is ``amax``, for every single-level
    block format (a new one is tested automatically), with margins."""
    fmt = dataclasses.replace(block_format, margin=margin)
    amaxes = _special_amaxes()
    got = np.asarray(scaled.scale_from_amax(jnp.asarray(amaxes), fmt))
    want = np.array([_reference_scale(a, fmt) for a in amaxes], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    negative = np.asarray(scaled.scale_from_amax(jnp.asarray(-amaxes), fmt))  # |amax|
    np.testing.assert_array_equal(negative.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("block_format", SINGLE_LEVEL, ids=lambda f: f.name)
def test_scale_from_amax_special_values(block_format):
    a = jnp.array([0.0, -0.0, np.inf, -np.inf, np.nan], jnp.float32)
    got = np.asarray(scaled.scale_from_amax(a, block_format))
    assert scaled.scale_from_amax(2.0, block_format) == scaled.scale_from_amax(jnp.float32(2.0), block_format)
    assert got[:2].tolist() == [1.0, 1.0]  # an empty history: Transformer Engine's initial scale
    assert np.isnan(got[2:]).all()
    for dtype in (jnp.float16, jnp.bfloat16):  # exact widening: the float32 scale of the same amax
        x = jnp.array([3.0, 1e-3, 0.0, np.inf], dtype)
        np.testing.assert_array_equal(
            np.asarray(scaled.scale_from_amax(x, block_format)).view(np.uint32),
            np.asarray(scaled.scale_from_amax(x.astype(jnp.float32), block_format)).view(np.uint32),
        )


def test_scale_from_amax_margin_overrides_the_block_formats():
    amax = jnp.array([3.0, 700.0, 1e-40], jnp.float32)
    for name in ("fp8_e4m3", "mxfp8"):
        shifted = dataclasses.replace(get_block_format(name), margin=2)
        got = np.asarray(scaled.scale_from_amax(amax, name, margin=2))
        np.testing.assert_array_equal(
            got.view(np.uint32), np.asarray(scaled.scale_from_amax(amax, shifted)).view(np.uint32)
        )
        kept = np.asarray(scaled.scale_from_amax(amax, shifted, margin=None))
        np.testing.assert_array_equal(kept.view(np.uint32), got.view(np.uint32))
    with pytest.raises(ValueError, match="margin"):
        scaled.scale_from_amax(amax, "fp8_e4m3", margin=65)


def test_scale_from_amax_is_delayed_scalings_next_scale():
    fmt = dataclasses.replace(get_block_format("fp8_e5m2"), margin=1)
    ds = DelayedScaling(block_format=fmt, history_length=2)
    state = ds.update(jnp.array([3.0, -700.0]), ds.init((2,)))
    want = scaled.scale_from_amax(jnp.float32(700.0), fmt)
    assert np.asarray(state.scale).view(np.uint32) == np.asarray(want).view(np.uint32)


@pytest.mark.parametrize(
    ("amax", "block_format", "error", "message"),
    [
        (jnp.float32(1.0), "nvfp4", ValueError, "two amaxes"),
        (np.float64(0.1), "fp8_e4m3", TypeError, "amax holds 0.1, which is not a float32 value"),
        (np.array([1.0, 1e300]), "fp8_e4m3", TypeError, "amax holds 1e[+]300, which is not a float32 value"),
        (jnp.int32(3), "mxfp8", TypeError, "amax must be a float16, bfloat16, float32 or float64 array, got integer"),
        (3, "mxfp8", TypeError, "amax must be a floating-point array, got int 3"),
        ("1.0", "mxfp8", TypeError, "amax must be a float16, bfloat16, float32 or float64 array, got string"),
        ([0.5, 0.1], "fp8_e4m3", TypeError, "amax holds 0.1, which is not a float32 value"),
        (jnp.float32(1.0), "mxfp9", scaled.UnknownBlockFormatError, "mxfp9"),
    ],
)
def test_scale_from_amax_refuses(amax, block_format, error, message):
    with pytest.raises(error, match=message):
        scaled.scale_from_amax(amax, block_format)


def test_scale_from_amax_takes_host_float64_that_float32_holds():
    # Python floats and NumPy float64 whose values are float32 values (NaN, inf, subnormals included)
    # give the bits of the float32 array: nothing is rounded on the way in
    values = [1792.0, 0.0, float(np.float32(1e-40)), np.inf, np.nan, -3.0]
    want = np.asarray(scaled.scale_from_amax(jnp.asarray(np.array(values, np.float32)), "fp8_e4m3"))
    for given in (values, np.array(values, np.float64)):
        got = np.asarray(scaled.scale_from_amax(given, "fp8_e4m3"))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert float(scaled.scale_from_amax(1792.0, "fp8_e4m3")) == 4.0


def test_scale_from_amax_refuses_a_float64_jax_array(x64):
    with pytest.raises(TypeError, match="amax must be float16, bfloat16 or float32, got float64"):
        scaled.scale_from_amax(jnp.array([1.0], jnp.float64), "fp8_e4m3")
