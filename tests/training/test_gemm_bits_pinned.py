"""The bits of every training recipe's GEMMs and of `fpemu.scaled.matmul`, pinned across refactors.

`tests/data/gemm_bits.npz` holds, for every named training recipe, what a small training step (a
convolution, two dense layers) gives under ``Policy(dot=recipe)`` -- the loss and gradients of
``jax.value_and_grad(emulate(loss))`` and of ``emulate(jax.value_and_grad(loss))``, the statistics of
``with_stats=True``, the new amax histories of a delayed-scaling recipe -- and, for every recipe of
`fpemu.scaled.matmul`, its product. The arrays were computed by the code before the GEMM core moved
into `fpemu._training` (issue 30) and are compared bit for bit (the uint views, NaN included).

XLA's float32 sums may change between JAX releases and between machines (a dot's order of additions
is XLA's, and XLA:CPU picks its dot kernels by the CPU's instruction set: two AMD EPYC guests with
AVX512-BF16 gave different bits for the same bfloat16 dots), so the arrays are keyed on the JAX
version, the backend and a fingerprint of the backend's summation order (`_sums`: the bits of dots
and a convolution of this test's shapes). Another machine's sums can have an overlay of their own:
`tests/data/gemm_bits.SUMS.npz` holds the arrays that differ there from `gemm_bits.npz` (on an Intel
Xeon with AMX-BF16, the `fpemu.scaled.matmul` products of bf16, fp8_e4m3 and the MX FP8 formats; every
training recipe's arrays are the same), with the version it was made with and the base's. A machine
whose `_sums` are the base's can still sum the recipes' convolutions differently (an AMD EPYC guest with
AVX2 and no AVX-512: the fp8_current and mxfp8 convolution gradients): its overlay is keyed on the
longer fingerprint `_extended_version`, which adds the bfloat16 GEMMs of the convolution's three
products (`_conv_sums`), and is looked up first. Those proxies do not tell every machine apart: an AMD EPYC
guest with AVX-512 (AVX512-BF16 and VP2INTERSECT) has the AVX2 guest's `_conv_sums` and the base's bits, so an
overlay made with ``--overlay`` also records the CPU's vector instruction set (`_isa`, which XLA:CPU picks
its kernels by) and applies only on a CPU with the same. Where nothing matches, the test skips, naming both
versions. Regenerate with ``python -m tests.training.test_gemm_bits_pinned`` (the base) or ``...
--overlay`` (this machine's overlay on the base, keyed on `_extended_version`), and say why in the commit.
"""

from __future__ import annotations

import hashlib
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
from fpemu import Policy, emulate, init_training_state, scaled
from fpemu._training import TRAINING_RECIPES, training_recipe

DATA = pathlib.Path(__file__).parent.parent / "data" / "gemm_bits.npz"
KEY = jax.random.key(3)
DN = ("NHWC", "HWIO", "NHWC")


def _normal(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


PARAMS = {"k": _normal(0, 3, 3, 32, 32, scale=0.2), "w1": _normal(1, 128, 48, scale=0.1), "w2": _normal(2, 48, 16)}
X = _normal(3, 4, 6, 6, 32)


def loss(params, x):
    """A convolution (stride 2), then two dense layers; the second's input is a gelu."""
    with jax.named_scope("conv"):
        h = lax.conv_general_dilated(x, params["k"], (2, 2), "VALID", dimension_numbers=DN)
    h = h.reshape(h.shape[0], -1)
    with jax.named_scope("dense0"):
        h = jax.nn.gelu(h @ params["w1"])
    with jax.named_scope("dense1"):
        logits = h @ params["w2"]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[:, 0])


def _flat(prefix: str, tree) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {prefix + jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def recipe_arrays(name: str) -> dict[str, np.ndarray]:
    """Every pinned array of the training recipe ``name``."""
    policy = Policy(dot=name)
    key = KEY if policy.stochastic else None
    params = jax.tree_util.tree_map(jnp.asarray, PARAMS)
    x = jnp.asarray(X)
    grad = jax.value_and_grad(loss, argnums=(0, 1))
    out: dict[str, np.ndarray] = {}
    if training_recipe(name).stateful:
        state = init_training_state(loss, policy, params, x)
        step = emulate(loss, policy, key=key, state=True)
        outside = jax.jit(jax.value_and_grad(lambda p, x: step(state, p, x), argnums=(0, 1), has_aux=True))
        (value, outside_state), grads = outside(params, x)
        out |= _flat(f"{name}/outside/", (value, grads)) | _flat(f"{name}/outside_state/", outside_state)
        state = init_training_state(grad, policy, params, x)
        inside = jax.jit(emulate(grad, policy, key=key, state=True, with_stats=True))
        (value, stats), new_state = inside(state, params, x)
        out |= _flat(f"{name}/inside/", value) | _flat(f"{name}/stats/", stats) | _flat(f"{name}/state/", new_state)
        return out
    outside = jax.jit(jax.value_and_grad(emulate(loss, policy, key=key), argnums=(0, 1)))(params, x)
    inside, stats = jax.jit(emulate(grad, policy, key=key, with_stats=True))(params, x)
    return _flat(f"{name}/outside/", outside) | _flat(f"{name}/inside/", inside) | _flat(f"{name}/stats/", stats)


A = _normal(4, 16, 96)
B = _normal(5, 96, 24)


def matmul_arrays(recipe: str) -> dict[str, np.ndarray]:
    return {f"scaled.matmul/{recipe}": np.asarray(scaled.matmul(A, B, recipe))}


def _sums() -> str:
    """A fingerprint of the backend's summation order: the bits of a bfloat16 and a float32 dot and a
    convolution of this test's operands (their float32 sums depend on the order of the additions)."""
    h = lax.conv_general_dilated(jnp.asarray(X), jnp.asarray(PARAMS["k"]), (2, 2), "VALID", dimension_numbers=DN)
    h = h.reshape(h.shape[0], -1)
    w = jnp.asarray(PARAMS["w1"])
    bf16 = jnp.dot(h.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    f32 = jnp.dot(h, w, precision=lax.Precision.HIGHEST)
    return hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in (h, bf16, f32))).hexdigest()[:12]


def _conv_sums() -> str:
    """A fingerprint of the sums of the convolution's GEMMs as the recipes run them (`fpemu.conv_general_dilated`
    maps a convolution to batched dots of bfloat16 operands with float32 sums): the bits of such dots with the
    shapes of `loss`'s convolution, its input gradient and its kernel gradient (XLA:CPU picks a dot's kernel
    by its shapes and the CPU's instruction set)."""
    m, k, n = X.shape[0] * 2 * 2, 3 * 3 * X.shape[-1], PARAMS["k"].shape[-1]  # (4, 2, 2) outputs, 3x3x32 windows
    rng = np.random.default_rng(7)
    dims = (((2,), (1,)), ((0,), (0,)))  # (1, M, K) @ (1, K, N)
    products = []
    for rows, inner, cols in ((m, k, n), (m, n, k), (k, m, n)):  # the forward product, dgrad, wgrad
        a = jnp.asarray(rng.standard_normal((1, rows, inner)), jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((1, inner, cols)), jnp.bfloat16)
        products.append(
            lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
        )
    return hashlib.sha256(b"".join(np.asarray(p).tobytes() for p in products)).hexdigest()[:12]


def _version() -> str:
    return f"jax {jax.__version__} on {jax.default_backend()}, sums {_sums()}"


def _isa() -> str:
    """The widest x86 vector instruction set of this CPU that XLA:CPU's kernels use (``avx512``, ``avx2``), from
    Linux's /proc/cpuinfo; ``unknown`` elsewhere."""
    try:
        flags = set(pathlib.Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return next((isa for isa, flag in (("avx512", "avx512f"), ("avx2", "avx2")) if flag in flags), "unknown")


def _extended_version() -> str:
    """`_version` and `_conv_sums`: the key of an overlay made with ``--overlay``."""
    return f"{_version()}, conv sums {_conv_sums()}"


def _overlay_path(version: str) -> pathlib.Path:
    """The overlay of the machine whose `_version` is ``version``: ``gemm_bits.<sums>.npz`` beside `DATA`."""
    return DATA.with_name(f"gemm_bits.{version.rsplit(' ', 1)[-1]}.npz")


def _load(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return dict(data)


def _pinned() -> dict[str, np.ndarray]:
    """The pinned arrays for this JAX and machine: the base with this machine's overlay (keyed on
    `_extended_version`, or on `_version` as the earlier overlays are, and made on a CPU of this `_isa` where
    it says), else the base where it was made with this `_version`."""
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing: run python -m tests.training.test_gemm_bits_pinned")
    arrays = _load(DATA)
    made = str(arrays.pop("__version__"))
    here = _version()
    for version in (_extended_version(), here):
        overlay_path = _overlay_path(version)
        overlay = _load(overlay_path) if overlay_path.exists() else {}
        isa = str(overlay.pop("__isa__", _isa()))  # overlays made before it was recorded: any
        if (
            str(overlay.pop("__version__", "")) == version
            and str(overlay.pop("__base__", "")) == made
            and isa == _isa()
        ):
            assert set(overlay) <= set(arrays), sorted(set(overlay) - set(arrays))
            return arrays | overlay
    if made == here:
        return arrays
    pytest.skip(f"the pinned bits were made with {made}; this is {_extended_version()} (XLA's sums may differ)")


def _assert_same_bits(actual: dict[str, np.ndarray], pinned: dict[str, np.ndarray], prefix: str) -> None:
    expected = {k: v for k, v in pinned.items() if k.startswith(prefix)}
    assert sorted(actual) == sorted(expected)
    for k, a in actual.items():
        e = expected[k]
        assert _same_bits(a, e), (k, a.dtype, a.shape, e.dtype, e.shape)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """The same dtype, shape and bits (floats compared as their unsigned views, NaN included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = f"u{a.dtype.itemsize}" if a.dtype.kind == "f" else a.dtype
    return bool(np.array_equal(a.view(bits), b.view(bits)))


# Every recipe compiles a training step twice (about 40 s each on two cores): two run by default (a
# per-tensor and a block recipe), the rest with -m slow (fp8_delayed's histories are also checked bit for
# bit by tests/training/test_emulate_delayed_loops.py).
FAST = ("fp8_current", "mxfp8")


@pytest.mark.long
@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in TRAINING_RECIPES]
)
def test_training_recipe_bits_are_pinned(name):
    _assert_same_bits(recipe_arrays(name), _pinned(), f"{name}/")


@pytest.mark.long
@pytest.mark.parametrize("recipe", scaled.MATMUL_FORMATS)
def test_scaled_matmul_bits_are_pinned(recipe):
    _assert_same_bits(matmul_arrays(recipe), _pinned(), f"scaled.matmul/{recipe}")


def _write(overlay: bool) -> None:
    """Write the base (every array, this machine's version), or this machine's overlay: the arrays whose
    bits differ from the base's, with this machine's version and the base's."""
    arrays: dict[str, np.ndarray] = {}
    for name in TRAINING_RECIPES:
        arrays |= recipe_arrays(name)
    for recipe in scaled.MATMUL_FORMATS:
        arrays |= matmul_arrays(recipe)
    if overlay:
        base = _load(DATA)
        base_version = base.pop("__version__")
        assert set(arrays) == set(base), sorted(set(arrays) ^ set(base))
        arrays = {k: v for k, v in arrays.items() if not _same_bits(v, base[k])}
        arrays |= {"__base__": base_version, "__isa__": np.asarray(_isa())}
    version = _extended_version() if overlay else _version()
    path = _overlay_path(version) if overlay else DATA
    np.savez_compressed(path, __version__=np.asarray(version), **arrays)
    print(f"{path}: {len(arrays)} arrays, {version}, fpemu {fpemu.__version__}")


if __name__ == "__main__":
    import sys

    _write(overlay=sys.argv[1:] == ["--overlay"])
