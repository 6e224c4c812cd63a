"""`accumulate="hopper_fp8"` against what an H200's FP8 GEMM computed, bit for bit, and against the oracle.

tests/data/hopper_fp8.npz holds the results bench/hopper_fp8_probe.py recorded on an NVIDIA H200
(JAX 0.11.2, 2026-11-28) for the dot products of tests/hopper_fp8_cases.py: every designed result,
and of each random (1024, K) @ (K, 1024) product the top-left 32 x 32 results (CI compares them) and
the SHA-256 of the top-left 256 x 256 (the `slow` tests recompute all of them: 2.3 million dot
products). Which XLA GEMM ran each product, and so which model parameters reproduce it:

- cuBLAS (``__cublas$lt$matmul$f8``) with ``precision=DEFAULT`` (every designed set, and the random
  products from K = 512) uses fast accumulation: ``accumulate_every=None``;
- cuBLAS with ``precision=HIGHEST`` promotes to float32 every 128 products: ``accumulate_every=128``;
- at (1024, 4096) @ (4096, 1024) cuBLAS splits K in two halves, each summed as above, and adds them
  in float32;
- XLA's own Triton GEMM (its autotuner's choice for K = 64 to 256 at DEFAULT) follows the same
  fast-accumulation model; at K = 32, and at HIGHEST for K <= 64, it does not use the FP8 sum (its
  results are within a few float32 roundings of the exact sum) and is left out here.
"""

import hashlib
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.kernels import matmul_kernel
from fpemu.testing import dot_general_reference
from tests import hopper_fp8_cases as cases

# FPEMU_HOPPER_FP8_RESULTS: a new recording to compare instead (bench/gpu.sh sets it after its probe).
RECORDED = np.load(
    os.environ.get("FPEMU_HOPPER_FP8_RESULTS") or Path(__file__).resolve().parents[1] / "data" / "hopper_fp8.npz"
)
DTYPES = {"e4m3fn": cases.E4M3, "e5m2": cases.E5M2}
_ROWS = (((1,), (1,)), ((0,), (0,)))  # row r of a with row r of b: one dot product per row


def _same_bits(got, expected) -> int:
    """The number of results whose bits differ (NaN equal to NaN)."""
    got, expected = np.asarray(got, np.float32).reshape(-1), np.asarray(expected, np.float32).reshape(-1)
    nan = np.isnan(got) & np.isnan(expected)
    return int(np.sum((got.view(np.uint32) != expected.view(np.uint32)) & ~nan))


def _random_keys():
    """(key, accumulate_every, K split) of every recorded random product the model covers."""
    out = []
    for key in RECORDED.files:
        parts = key.split("/")
        if parts[0] != "random" or key.endswith("sha256"):
            continue
        k, highest = int(parts[4]), parts[-1] == "highest"
        if k == 32 or (highest and k <= 64):  # XLA's Triton GEMM without the FP8 sum (module docstring)
            continue
        out.append((key, 128 if highest else None, 2 if k == 4096 else 1))
    return sorted(out)


def _emulated(a: np.ndarray, b: np.ndarray, lhs: str, rhs: str, every, split: int) -> np.ndarray:
    """fpemu's model of the recorded product ``a @ b`` (float32 arrays of FP8 values): the K slices
    each summed by ``fpemu.matmul(accumulate="hopper_fp8")``, then added in float32, in order."""
    k = a.shape[1] // split
    parts = [
        np.asarray(fpemu.matmul(a[:, s * k : (s + 1) * k], b[s * k : (s + 1) * k], lhs=lhs, rhs=rhs,
                                accumulate="hopper_fp8", accumulate_every=every))
        for s in range(split)
    ]  # fmt: skip
    total = parts[0]
    for part in parts[1:]:
        total = total + part  # float32 addition, round to nearest even
    return total


@pytest.mark.long
@pytest.mark.parametrize("name", ["align", "group", "swamp", "carry", "swamp/highest", "operand"])
def test_designed_dot_products_match_the_h200(name):
    """cuBLAS's FP8 GEMM on the designed sets: one large product and one small one (the 13 bits kept
    below the largest exponent, truncation toward zero for both signs), a cancelling pair and a
    small product anywhere (the groups of 32), the same without cancellation over K = 512 (the
    running sum's alignment, and at HIGHEST its promotion every 128), carries above the largest
    exponent (the sum's truncation to 14 bits). ``operand`` (zero and subnormal operands in the
    alignment) was added after the first run and is compared once a GPU run has recorded it."""
    if f"designed/{name}" not in RECORDED.files:
        pytest.skip(f"designed/{name} is not recorded yet: bench/gpu.sh records it on the next GPU run")
    maker = cases.DESIGNED[name.split("/")[0]]
    a, b = maker().arrays()
    every = 128 if name.endswith("highest") else None
    got = fpemu.dot_general(a, b, _ROWS, lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8", accumulate_every=every)
    expected = RECORDED[f"designed/{name}"]
    assert got.shape == expected.shape
    assert _same_bits(got, expected) == 0


@pytest.mark.long
@pytest.mark.parametrize(("key", "every", "split"), _random_keys(), ids=lambda v: str(v))
def test_random_dot_products_match_the_h200(key, every, split):
    """The top-left 32 x 32 results of each recorded random product, bit for bit."""
    _, lhs, rhs, kind, k = key.split("/")[:5]
    a, _ = cases.random_operands(kind, 1024, 1024, int(k), 1, DTYPES[lhs])
    _, b = cases.random_operands(kind, 1024, 1024, int(k), 2, DTYPES[rhs])
    expected = RECORDED[key]
    n = expected.shape[0]
    assert _same_bits(_emulated(a[:n], b[:, :n], lhs, rhs, every, split), expected) == 0


@pytest.mark.slow
@pytest.mark.parametrize(("key", "every", "split"), _random_keys(), ids=lambda v: str(v))
def test_random_dot_products_match_the_h200_on_every_recorded_result(key, every, split):
    """All 256 x 256 recorded results of each random product (their SHA-256)."""
    _, lhs, rhs, kind, k = key.split("/")[:5]
    a, _ = cases.random_operands(kind, 1024, 1024, int(k), 1, DTYPES[lhs])
    _, b = cases.random_operands(kind, 1024, 1024, int(k), 2, DTYPES[rhs])
    got = _emulated(a[:256], b[:, :256], lhs, rhs, every, split).astype(np.float32)
    assert hashlib.sha256(got.tobytes()).hexdigest() == str(RECORDED[key + "/block_sha256"])


def test_the_recorded_results_are_not_plain_float32_sums():
    """What makes the model necessary: where a small product lies 14 to 23 binades below a large one,
    float32 keeps it but the H200 returned the large product alone (13 bits kept below it); and
    promoting every 128 products (HIGHEST) changed the results of the K = 512 set."""
    rows = cases.align_cases()
    a, b = rows.arrays()
    recorded = RECORDED["designed/align"]
    float32 = np.sum(a.astype(np.float64) * b, axis=1).astype(np.float32)
    lost = [i for i, label in enumerate(rows.labels) if label[0] == "align" and 14 <= label[3] <= 23]
    assert len(lost) > 500
    assert (recorded[lost] == 2.0**16).all() and (float32[lost] != 2.0**16).all()
    assert _same_bits(RECORDED["designed/swamp/highest"], RECORDED["designed/swamp"]) > 10000


@pytest.mark.long
@pytest.mark.parametrize("every", [None, 32, 64])
@pytest.mark.parametrize(
    ("lhs", "rhs"), [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"), ("e4m3fn", "e5m2"), ("e5m2", "e5m2")]
)
def test_the_fast_path_is_the_exact_oracle(lhs, rhs, every):
    """`fpemu.matmul` against `fpemu.testing.dot_general_reference` (the model written out with
    Fractions, one output at a time) on ragged random FP8 operands of a wide range, with zeros,
    subnormals, NaN and infinities (e5m2 has them; e4m3fn turns inf into NaN)."""
    rng = np.random.default_rng([3, every or 0, len(lhs), len(rhs)])
    a = (rng.standard_normal((5, 77)) * 2.0 ** rng.integers(-12, 9, (5, 77))).astype(np.float32)
    b = (rng.standard_normal((77, 4)) * 2.0 ** rng.integers(-12, 9, (77, 4))).astype(np.float32)
    a[:, ::9] = 0.0
    a[0, 5], a[1, 6], b[7, 2], a[2, 8] = np.nan, np.inf, -np.inf, 2.0**-17  # b column 2 meets a row 1's +inf
    opts = dict(lhs=lhs, rhs=rhs, accumulate="hopper_fp8", accumulate_every=every)
    got = fpemu.matmul(a, b, **opts)
    expected = dot_general_reference(a, b, (((1,), (0,)), ((), ())), **opts)
    assert _same_bits(got, expected) == 0
    assert np.isnan(np.asarray(got)[0]).all()


def test_zero_sums_are_positive_zero():
    a = jnp.asarray([[1.0, -1.0, 0.0]])
    b = jnp.asarray([[3.0], [3.0], [-0.0]])
    got = np.asarray(fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8"))
    assert got[0, 0] == 0 and not np.signbit(got[0, 0])


@pytest.mark.long
def test_promotion_every_128_is_a_float32_sum_of_tensor_core_sums():
    """``accumulate_every=128``: each chunk of 128 summed by the tensor core from +0, the chunk sums
    added in float32 (what `test_designed_dot_products_match_the_h200[swamp/highest]` shows cuBLAS does)."""
    a, b = cases.random_operands("normal", 4, 4, 384, 7)
    opts = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8")
    chunks = [np.asarray(fpemu.matmul(a[:, c : c + 128], b[c : c + 128], **opts)) for c in (0, 128, 256)]
    expected = (chunks[0] + chunks[1]) + chunks[2]
    got = fpemu.matmul(a, b, accumulate_every=128, **opts)
    assert _same_bits(got, expected) == 0


def test_errors_name_the_argument_and_the_way_out():
    x = jnp.ones((2, 32), jnp.float32)
    with pytest.raises(ValueError, match=r"accumulate='hopper_fp8' models the FP8 tensor core.*lhs='e4m3fn'"):
        fpemu.matmul(x, x.T, accumulate="hopper_fp8")
    with pytest.raises(ValueError, match=r"the rhs operand holds bf16 values"):
        fpemu.matmul(x, x.T, lhs="e4m3fn", rhs="bf16", accumulate="hopper_fp8")
    with pytest.raises(ValueError, match=r"accumulate_every=48 .* multiple of 32"):
        fpemu.matmul(x, x.T, lhs="e5m2", rhs="e5m2", accumulate="hopper_fp8", accumulate_every=48)
    with pytest.raises(ValueError, match=r"accumulate_rounding='toward_zero' with accumulate='hopper_fp8'"):
        fpemu.matmul(x, x.T, lhs="e5m2", rhs="e5m2", accumulate="hopper_fp8", accumulate_rounding="toward_zero")
    with pytest.raises(ValueError, match=r"unknown format 'hopper'.*accumulator model: 'hopper_fp8'"):
        fpemu.matmul(x, x.T, accumulate="hopper")
    with pytest.raises(ValueError, match=r"matmul_kernel does not model a tensor core's own sum; use fpemu.matmul"):
        matmul_kernel(x, x.T, lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8", interpret=True)


def test_x64_float64_operands_are_refused(x64):
    x = jnp.ones((2, 32), jnp.float64)
    with pytest.raises(ValueError, match="computes in float32"):
        fpemu.matmul(x, x.T, lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8")


@pytest.mark.long
def test_jit_and_grad():
    """Under jit the same bits; the gradient is straight-through (the product's), as for every accumulator."""
    a, b = cases.random_operands("normal", 3, 2, 64, 11)
    f = lambda x, y: fpemu.matmul(x, y, lhs="e4m3fn", rhs="e4m3fn", accumulate="hopper_fp8")
    assert _same_bits(jax.jit(f)(a, b), f(a, b)) == 0
    grad = jax.grad(lambda x: f(x, b).sum())(jnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(grad), np.broadcast_to(b.sum(axis=1), a.shape))
