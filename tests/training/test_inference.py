"""Inference recipes under emulate, and `fpemu.quantize_params` (#33 item 1): a Flax linen MLP trained on
digits keeps its accuracy; each recipe's operands are `fpemu.scaled.quantize_dequantize` bit for bit."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.testing import assert_bit_exact

EXAMPLE = pathlib.Path(__file__).parent.parent.parent / "examples" / "inference_digits.py"
WEIGHT_ONLY = ("fp8_weights", "mxfp8_weights", "mxfp4_weights", "nvfp4_weights")
# the scaled recipe each inference recipe's weight (and activation) quantizer is, along the contraction
SCALED = {
    "fp8_weights": "fp8_e4m3",
    "mxfp8_weights": "mxfp8_e4m3",
    "mxfp4_weights": "mxfp4",
    "nvfp4_weights": "nvfp4",
    "fp8_w8a8": "fp8_e4m3",
    "mxfp8_w8a8": "mxfp8_e4m3",
    "nvfp4_w4a4": "nvfp4",
}
W8A8 = {"fp8_w8a8", "mxfp8_w8a8", "nvfp4_w4a4"}


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.fixture(scope="module")
def digits():
    """(example module, model, fp32 variables, x_test, y_test): trained once for the module (seconds)."""
    pytest.importorskip("sklearn")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    spec = importlib.util.spec_from_file_location("inference_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # flax's dataclass transform looks its module up
    spec.loader.exec_module(module)
    x_train, y_train, x_test, y_test = module.load_data()
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):  # optax: default JAX rules
        model, variables = module.train(x_train, y_train, hidden=(64,), epochs=12)
    return module, model, variables, x_test, y_test


# -- the recipes --------------------------------------------------------------------------------------------


def test_every_inference_recipe_is_forward_only_with_a_source():
    assert fpemu.INFERENCE_RECIPES == tuple(SCALED)
    for name in fpemu.INFERENCE_RECIPES:
        r = fpemu.inference_recipe(name)
        assert r.name == name and r.source and fpemu.Policy(dot=name).dot is r
        assert r.forward.rhs is not None and (r.forward.lhs is not None) == (name in W8A8)
        assert r.dgrad.quantizers == (None, None) and r.wgrad.quantizers == (None, None)
    assert not set(fpemu.INFERENCE_RECIPES) & set(fpemu.TRAINING_RECIPES)  # one name, one thing


@pytest.mark.long
@pytest.mark.parametrize("name", tuple(SCALED))
def test_a_single_dot_quantizes_each_operand_as_quantize_dequantize(name):
    kx, kw = jax.random.split(jax.random.key(3))
    x = jax.random.normal(kx, (8, 64), jnp.float32)
    w = jax.random.normal(kw, (64, 16), jnp.float32) * 0.1
    y = fpemu.emulate(lambda w, x: x @ w, fpemu.Policy(dot=name))(w, x)
    recipe = SCALED[name]

    def product(a, b):
        """The product as docs/emulate.md defines it: float32 accumulation of the exact products, on
        bfloat16 operands when every value of both is a bfloat16 value (MX elements times powers of
        two, NVFP4's blocks; not FP8 values times a float32 scale), in the backend's summation order,
        which a float32 dot's need not be (it is not on a CPU with AVX512-BF16)."""
        if name in ("mxfp8_w8a8", "nvfp4_w4a4"):
            a16, b16 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
            assert_bit_exact(a16.astype(jnp.float32), a)  # exact: the same values
            assert_bit_exact(b16.astype(jnp.float32), b)
            return jnp.dot(a16, b16, preferred_element_type=jnp.float32)
        return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)

    if recipe == "nvfp4":  # the float32 tensor scales multiply the product, once (cuBLAS's alpha)
        wb, tw = scaled.quantize_dequantize_split(w, recipe, axis=0)
        xb, tx = scaled.quantize_dequantize_split(x, recipe, axis=1) if name in W8A8 else (x, jnp.float32(1))
        alpha = tx.reshape(()) * tw.reshape(())
        expected = product(xb, wb) * alpha
    else:
        wq = scaled.quantize_dequantize(w, recipe, axis=0)  # one scale per output channel / block of inputs
        xq = scaled.quantize_dequantize(x, recipe, axis=1) if name in W8A8 else x  # per token / block of features
        expected = product(xq, wq)
    np.testing.assert_array_equal(_bits(y), _bits(expected))


@pytest.mark.long
def test_gradients_are_untouched_and_gemm_roles_names_the_weight():
    kx, kw = jax.random.split(jax.random.key(4))
    x, w = jax.random.normal(kx, (8, 32)), jax.random.normal(kw, (32, 4))

    def loss(w, x):
        return jnp.sum(x @ w)

    # the backward GEMMs read the unquantized operands (straight through), in float32: the gradient of
    # sum(x @ w) does not depend on the forward product, so it is the float32 one up to summation order
    got = jax.grad(fpemu.emulate(loss, fpemu.Policy(dot="fp8_w8a8")), argnums=(0, 1))(w, x)
    for g, ref in zip(got, jax.grad(loss, argnums=(0, 1))(w, x), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-6, atol=1e-6)
    (name, gemm, reason), *_ = fpemu.gemm_roles(loss, w, x)
    assert gemm == "forward" and "rhs: the weight W" in reason


def _w_at_x():
    rng = np.random.default_rng(7)
    w = jnp.asarray(rng.normal(size=(8, 32)).astype(np.float32))  # (out, in): a model written y = W @ x
    x = jnp.asarray(rng.normal(size=(32, 4)).astype(np.float32))  # (in, batch)
    return w, x


@pytest.mark.long
def test_policy_weights_finds_the_weight_on_the_left():
    """``Policy.weights`` names the arguments that hold weights: in ``W @ x`` the left operand comes from
    one, so it is quantized as the weight (per output channel, i.e. per row) and ``x`` per token."""
    w, x = _w_at_x()
    apply = lambda w, x: w @ x
    got = fpemu.emulate(apply, fpemu.Policy(dot="fp8_w8a8", weights=0))(w, x)
    wq = scaled.quantize_dequantize(w, "fp8_e4m3", axis=1)  # one scale per row: each output channel
    xq = scaled.quantize_dequantize(x, "fp8_e4m3", axis=0)  # one scale per column: each token
    assert_bit_exact(got, wq @ xq)
    weight_only = fpemu.emulate(apply, fpemu.Policy(dot="fp8_weights", weights=(0,)))(w, x)
    assert_bit_exact(weight_only, wq @ x)
    # without it, the convention: the right operand is the weight (x here, quantized per its columns)
    assert_bit_exact(fpemu.emulate(apply, fpemu.Policy(dot="fp8_weights"))(w, x), w @ xq)
    [(_, gemm, reason)] = fpemu.gemm_roles(apply, w, x, weights=0)
    assert gemm == "forward" and "lhs: the weight W, from Policy.weights" in reason
    [(_, _, reason)] = fpemu.gemm_roles(apply, w, x)
    assert "rhs: the weight W" in reason


def test_closed_over_parameters_are_weights_and_ambiguity_falls_back_to_the_convention():
    w, x = _w_at_x()
    closed = fpemu.emulate(lambda x: w @ x, fpemu.Policy(dot="fp8_weights", weights=()))(x)
    assert_bit_exact(closed, scaled.quantize_dequantize(w, "fp8_e4m3", axis=1) @ x)
    [(_, _, reason)] = fpemu.gemm_roles(lambda w, x: w @ x, w, x, weights=True)  # both are selected
    assert reason.endswith("both operands from Policy.weights, so the convention")


def test_policy_weights_bad_values_name_the_field():
    with pytest.raises(ValueError, match=r"Policy.weights selects .* not inference recipes .* fp8_weights"):
        fpemu.Policy(dot="mxfp8", weights=0)
    with pytest.raises(TypeError, match="Policy.weights must be True"):
        fpemu.Policy(dot="fp8_weights", weights="params")
    w, x = _w_at_x()
    with pytest.raises(ValueError, match=r"Policy.weights names positional argument\(s\) \[5\]"):
        fpemu.emulate(lambda w, x: w @ x, fpemu.Policy(dot="fp8_weights", weights=5))(w, x)


def test_recipe_names_are_checked_and_both_sets_listed():
    with pytest.raises(ValueError, match="inference recipes: fp8_weights.*nvfp4_w4a4") as err:
        fpemu.Policy(dot="fp8_weight")
    assert "training recipes: fp8_current" in str(err.value) and "did you mean 'fp8_weights'" in str(err.value)
    with pytest.raises(ValueError, match="exact and lower case; did you mean 'fp8_w8a8'"):
        fpemu.Policy(dot="FP8_W8A8")
    with pytest.raises(ValueError, match=r"an inference recipe.*fpemu.inference_recipe\('mxfp4_weights'\)"):
        fpemu.training_recipe("mxfp4_weights")
    with pytest.raises(ValueError, match=r"a training recipe.*fpemu.training_recipe\('mxfp8'\)"):
        fpemu.inference_recipe("mxfp8")
    with pytest.raises(TypeError, match=r"Policy\(dot='nvfp4_w4a4'\)"):
        fpemu.emulate(lambda x: x, "nvfp4_w4a4")(jnp.ones(2))
    with pytest.raises(fpemu.UnknownFormatError, match="inference recipe"):
        fpemu.DotPolicy(lhs="fp8_weights")


# -- the trained model ----------------------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("name", WEIGHT_ONLY)
def test_quantize_params_keeps_the_accuracy_of_a_trained_mlp(digits, name):
    module, model, variables, x, y = digits
    fp32 = module.accuracy(model.apply(variables, x), y)
    assert fp32 > 0.9
    stored, report = fpemu.quantize_params(variables, name)
    tolerance = 0.03 if "fp4" in name else 0.01
    assert module.accuracy(model.apply(stored, x), y) >= fp32 - tolerance
    layers = variables["params"]
    assert set(layers) == {"Dense_0", "Dense_1"}
    for layer, leaves in layers.items():
        got = stored["params"][layer]
        np.testing.assert_array_equal(_bits(got["bias"]), _bits(leaves["bias"]))
        by_hand = scaled.quantize_dequantize(leaves["kernel"], SCALED[name], axis=0)
        np.testing.assert_array_equal(_bits(got["kernel"]), _bits(by_hand))
    rows = {r.path: r for r in report.rows}
    kernel = rows["params/Dense_0/kernel"]
    assert kernel.axes == (0,) and kernel.recipe == name and kernel.bytes_after < kernel.bytes_before / 3
    assert rows["params/Dense_0/bias"].axes is None and np.isinf(rows["params/Dense_0/bias"].qsnr_db)
    assert "params/Dense_1/kernel" in str(report) and "total" in str(report)


@pytest.mark.long
def test_emulated_fp8_w8a8_keeps_the_accuracy_of_a_trained_mlp(digits):
    module, model, variables, x, y = digits
    fp32 = module.accuracy(model.apply(variables, x), y)
    logits = fpemu.emulate(model.apply, fpemu.Policy(dot="fp8_w8a8"))(variables, x)
    assert module.accuracy(logits, y) >= fp32 - 0.01
    assert 20 < float(scaled.qsnr(model.apply(variables, x), logits)) < 60  # quantized, not untouched


# -- quantize_params: trees, axes, bytes, bad inputs ---------------------------------------------------------


@pytest.mark.long
def test_report_bytes_are_the_packed_storage():
    w = jnp.linspace(-1, 1, 64 * 16, dtype=jnp.float32).reshape(64, 16)
    expected = {
        "fp8_weights": 64 * 16 + 16 * 4,  # e4m3 elements, one float32 scale per output channel
        "mxfp8_weights": 64 * 16 + 2 * 16,  # E8M0 scale per 32
        "mxfp4_weights": 64 * 16 // 2 + 2 * 16,
        "nvfp4_weights": 64 * 16 // 2 + 4 * 16 + 4,  # E4M3 scale per 16, a float32 tensor scale
    }
    for name, nbytes in expected.items():
        _, report = fpemu.quantize_params({"w": w}, name)
        assert (report.bytes_before, report.bytes_after) == (64 * 16 * 4, nbytes), name


@pytest.mark.long
def test_axes_patterns_name_3d_kernels_and_keep_leaves():
    k = jax.random.normal(jax.random.key(5), (4, 8, 32), jnp.float32)  # (heads, head_dim, features) out kernel
    params = {"attn": {"out": {"kernel": k}}, "embed": {"embedding": jnp.ones((10, 32))}, "step": jnp.int32(3)}
    q, report = fpemu.quantize_params(params, "mxfp8_weights", axes={"out/kernel": (0, 1), "embedding": None})
    by_hand = scaled.quantize_dequantize(k.reshape(32, 32), "mxfp8_e4m3", axis=0).reshape(k.shape)
    np.testing.assert_array_equal(_bits(q["attn"]["out"]["kernel"]), _bits(by_hand))
    assert q["embed"]["embedding"] is params["embed"]["embedding"] and q["step"] is params["step"]
    assert [r.axes for r in report.rows] == [(0, 1), None, None]
    with pytest.raises(ValueError, match=r"attn/out/kernel has shape \(4, 8, 32\).*needs its contraction axes"):
        fpemu.quantize_params(params, "mxfp8_weights")


@pytest.mark.long
def test_quantize_params_takes_flax_nnx_state():
    nnx = pytest.importorskip("flax.nnx")
    layer = nnx.Linear(32, 8, rngs=nnx.Rngs(0))
    state = nnx.state(layer, nnx.Param)
    q, report = fpemu.quantize_params(state, "fp8_weights")
    assert type(q) is type(state)
    paths = [r.path for r in report.rows]
    assert paths == ["bias/value", "kernel/value"] and report.rows[1].axes == (0,)
    kernel = jax.tree.leaves(state)[1]
    np.testing.assert_array_equal(
        _bits(jax.tree.leaves(q)[1]), _bits(scaled.quantize_dequantize(kernel, "fp8_e4m3", axis=0))
    )


@pytest.mark.long
def test_a_contraction_the_block_does_not_divide_is_refused_unless_pad():
    w = jax.random.normal(jax.random.key(6), (40, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"w of shape \(40, 8\).*contraction of 40 elements.*block size 32.*pad=True"):
        fpemu.quantize_params({"w": w}, "mxfp4_weights")
    with pytest.raises(
        ValueError, match="not a multiple of block_size=32"
    ):  # quantize_dequantize refuses the same shape
        scaled.quantize_dequantize(w, "mxfp4", axis=0)
    q, _ = fpemu.quantize_params({"w": w}, "mxfp4_weights", pad=True)
    np.testing.assert_array_equal(_bits(q["w"]), _bits(scaled.quantize_dequantize(w, "mxfp4", axis=0, pad=True)))


@pytest.mark.long
def test_bad_inputs_name_the_argument():
    params = {"dense": {"kernel": jnp.ones((32, 4)), "bias": jnp.ones(4)}}
    with pytest.raises(ValueError, match=r"axes pattern\(s\) 'query' match no leaf; paths: dense/bias, dense/kernel"):
        fpemu.quantize_params(params, "fp8_weights", axes={"query": 0})
    with pytest.raises(ValueError, match="recipe='fp8' is not a recipe; inference recipes: fp8_weights"):
        fpemu.quantize_params(params, "fp8")
    with pytest.raises(TypeError, match="recipe must be a recipe name"):
        fpemu.quantize_params(params, 8)
    with pytest.raises(TypeError, match="axes must be a mapping"):
        fpemu.quantize_params(params, "fp8_weights", axes=[0])
    with pytest.raises(ValueError, match=r"axes\['dense/kernel'\]=\(2,\) is out of range"):
        fpemu.quantize_params(params, "fp8_weights", axes={"kernel": 2})
    with pytest.raises(ValueError, match="stochastically"):
        fpemu.quantize_params(params, fpemu.Quantizer(format="e4m3fn", rounding="stochastic"))
    with pytest.raises(ValueError, match=r"dense/kernel has dtype float64.*astype\(jnp.float32\)"):
        fpemu.quantize_params({"dense": {"kernel": np.ones((32, 4))}}, "fp8_weights")
    with pytest.raises(ValueError, match="leaves the weight"):
        fpemu.quantize_params(params, fpemu.TrainingRecipe(
            name="x", forward=fpemu.GemmRecipe(lhs=None, rhs=None), dgrad=fpemu.GemmRecipe(lhs=None, rhs=None),
            wgrad=fpemu.GemmRecipe(lhs=None, rhs=None)))  # fmt: skip
    # a training recipe's weight quantizer: NVFP4's 16 x 16 tiles
    _, report = fpemu.quantize_params({"k": jnp.ones((32, 16))}, "nvfp4")
    assert report.recipe == "nvfp4" and report.bytes_after == 32 * 16 // 2 + 2 + 4  # two tiles, a tensor scale
    with pytest.raises(ValueError, match="its rows of 4 elements is not a multiple of the block size 16 of nvfp4"):
        fpemu.quantize_params(params, "nvfp4")
