"""Explicit random bits in the emulated matmul (issue 15): ``random=`` instead of ``key=`` in
`fpemu.dot_general`, `fpemu.matmul` and `fpemu.conv_general_dilated`.

The keyed path must equal ``random=`` given the bits its streams draw, as docs/matmul.md documents
them: ``jax.random.split(key, 4)`` gives the lhs, rhs, running-sum and output streams, the running
sum's stream is split again into one key per chunk, and each stream's bits are
``fpemu.stochastic_bits(stream_key, shape)``. The bits are built here from that text alone (public
API), and arbitrary bits are checked against the exact sequential oracle.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._ops.geometry import conv_geometry, dot_geometry, matmul_geometry
from fpemu.testing import dot_general_reference

DIMS = (((1,), (0,)), ((), ()))
KEY = jax.random.key(11)
SR_ALL = dict(
    lhs="e4m3fn", rhs="e5m2", out="e4m3fn", accumulate="bf16", accumulate_every=3, rounding="stochastic",
    accumulate_rounding="stochastic",
)  # fmt: skip


def _bits(x) -> np.ndarray:
    """float32 bits, every NaN the one quiet NaN."""
    x = np.asarray(x, np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), x).view(np.uint32)


def _operands(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_a).astype(np.float32), rng.standard_normal(shape_b).astype(np.float32)


def _key_bits(key, a_shape, b_shape, out_shape, chunks, streams=("lhs", "rhs", "accumulate", "out")):
    """The bits of the key's streams, from docs/matmul.md: split(key, 4) = lhs, rhs, running sum, out;
    the running sum's stream split into one key per chunk."""
    lhs, rhs, acc, out = jax.random.split(key, 4)
    bits = {
        "lhs": lambda: fpemu.stochastic_bits(lhs, a_shape),
        "rhs": lambda: fpemu.stochastic_bits(rhs, b_shape),
        "out": lambda: fpemu.stochastic_bits(out, out_shape),
        "accumulate": lambda: jnp.stack([fpemu.stochastic_bits(k, out_shape) for k in jax.random.split(acc, chunks)]),
    }
    return {name: bits[name]() for name in streams}


@pytest.mark.long
def test_dot_general_with_operand_and_output_rounding_equals_the_key():
    """Batch and free dimensions, two contracting dimensions: the bits follow each array's own
    row-major order (the operands in their shapes, the output in the result's)."""
    dims = (((1, 3), (2, 0)), ((0,), (1,)))
    a, b = _operands((2, 3, 4, 2), (2, 2, 3, 5), seed=2)
    options = dict(lhs="e4m3fn", rhs="e2m1fn", out="bf16", rounding="stochastic")
    random = _key_bits(KEY, a.shape, b.shape, (2, 4, 5), 0, streams=("lhs", "rhs", "out"))
    keyed = fpemu.dot_general(a, b, dims, key=KEY, **options)
    explicit = fpemu.dot_general(a, b, dims, random=random, **options)
    assert explicit.shape == (2, 4, 5)
    np.testing.assert_array_equal(_bits(explicit), _bits(keyed))


@pytest.mark.long
def test_dot_general_with_a_stochastic_accumulator_equals_the_key():
    a, b = _operands((3, 10), (10, 4), seed=1)
    options = dict(accumulate="fp16", accumulate_every=4, accumulate_rounding="stochastic")
    random = _key_bits(KEY, a.shape, b.shape, (3, 4), 3, streams=("accumulate",))  # ceil(10 / 4) chunks
    keyed = fpemu.dot_general(a, b, DIMS, key=KEY, **options)
    np.testing.assert_array_equal(_bits(fpemu.dot_general(a, b, DIMS, random=random, **options)), _bits(keyed))


@pytest.mark.long
def test_explicit_bits_against_the_exact_reference():
    """Arbitrary bits (not from any key), some broadcast, through the fast path and the oracle."""
    a, b = _operands((3, 7), (7, 4), seed=3)
    rng = np.random.default_rng(4)
    random = {
        "lhs": rng.integers(0, 2**32, (3, 7), dtype=np.uint64),  # int64-sized values above 2**31
        "rhs": rng.integers(0, 2**32, (1, 4), dtype=np.uint32),  # broadcast along K
        "accumulate": rng.integers(0, 2**32, (3, 3, 4), dtype=np.uint32),
        "out": np.uint32(2**31),  # one word for every element
    }
    got = fpemu.dot_general(a, b, DIMS, random=random, **SR_ALL)
    expected = dot_general_reference(a, b, DIMS, random=random, **SR_ALL)
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_the_bits_decide_the_rounding():
    """All-zero bits never round an inexact value up, all-one bits always do (floor variant): the
    operand 1 + 3/8 ulp of e4m3fn goes to 1 and to 1.125."""
    a = np.full((1, 4), 1.0 + 2.0**-3 * 3 / 8, np.float32)
    b = np.eye(4, dtype=np.float32)
    for word, expected in ((0, 1.0), (2**32 - 1, 1.125)):
        y = fpemu.matmul(a, b, lhs="e4m3fn", rounding="stochastic", random={"lhs": np.uint32(word)})
        assert np.asarray(y).tolist() == [[expected] * 4]


@pytest.mark.long
def test_matmul_broadcast_batches_and_a_narrower_result_dtype():
    """`matmul` rounds the operands in their own shapes; a bfloat16 result is an output rounding."""
    a, b = _operands((2, 1, 3, 6), (4, 6, 2), seed=5)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", rounding="stochastic", preferred_element_type=jnp.bfloat16)
    random = _key_bits(KEY, a.shape, b.shape, (2, 4, 3, 2), 0, streams=("lhs", "rhs", "out"))
    keyed = fpemu.matmul(a, b, key=KEY, **options)
    explicit = fpemu.matmul(a, b, random=random, **options)
    assert explicit.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(explicit).view(np.uint16), np.asarray(keyed).view(np.uint16))


@pytest.mark.long
def test_under_jit_and_grad():
    """Traced bits (not range-checked) give the same result; the gradient is straight-through: the
    plain dot of the cotangent with the rhs rounded with its bits."""
    a, b = _operands((3, 5), (5, 2), seed=6)
    random = _key_bits(KEY, a.shape, b.shape, (3, 2), 2)
    f = jax.jit(lambda a, b, r: fpemu.matmul(a, b, random=r, **SR_ALL))
    np.testing.assert_array_equal(_bits(f(a, b, random)), _bits(fpemu.matmul(a, b, key=KEY, **SR_ALL)))
    g = jax.grad(lambda a: fpemu.matmul(a, b, random=random, **SR_ALL).sum())(jnp.asarray(a))
    b_q = np.asarray(fpemu.quantize(b, "e5m2", rounding="stochastic", random=random["rhs"]), np.float64)
    np.testing.assert_array_equal(_bits(g), _bits(np.ones((3, 2)) @ b_q.T))


@pytest.mark.long
def test_host_float64_operands_are_rounded_once_with_the_bits():
    a = np.array([[1.0 + 2.0**-40, 0.3, 2.7]])  # NumPy float64: rounded from its float64 value
    b = np.ones((3, 1), np.float32)
    random = _key_bits(KEY, a.shape, b.shape, (1, 1), 0, streams=("lhs",))
    options = dict(lhs="e4m3fn", rounding="stochastic")
    keyed = fpemu.matmul(a, b, key=KEY, **options)
    np.testing.assert_array_equal(_bits(fpemu.matmul(a, b, random=random, **options)), _bits(keyed))


@pytest.mark.long
@pytest.mark.parametrize(
    "groups", ["none", pytest.param("feature", marks=pytest.mark.slow), pytest.param("batch", marks=pytest.mark.slow)]
)
def test_conv_takes_bits_in_the_result_layout(groups):
    """The key's running-sum bits are drawn over the im2col product, (group, batch x output position,
    output feature); ``random["accumulate"]`` is in the result's layout. Rearranging the key's bits
    (here, NumPy index arithmetic written from docs/matmul.md) gives the keyed result."""
    rng = np.random.default_rng(7)
    n, c, o, g = {"none": (2, 3, 4, 1), "feature": (2, 4, 6, 2), "batch": (4, 3, 6, 2)}[groups]
    x = rng.standard_normal((n, c, 5, 4)).astype(np.float32)  # NCHW
    w = rng.standard_normal((o, c // g if groups == "feature" else c, 2, 2)).astype(np.float32)  # OIHW
    conv_kw = dict(feature_group_count=g if groups == "feature" else 1, batch_group_count=g if groups == "batch" else 1)
    keyed = fpemu.conv_general_dilated(x, w, (1, 1), "VALID", key=KEY, **SR_ALL, **conv_kw)
    out_n, out_o, h, wd = keyed.shape
    k = w.shape[1] * 4
    chunks = -(-k // SR_ALL["accumulate_every"])
    lhs_key, rhs_key, acc_key, out_key = jax.random.split(KEY, 4)
    acc = []
    for chunk_key in jax.random.split(acc_key, chunks):  # (G, N * H * W, O / G) in the key's order
        product = np.asarray(fpemu.stochastic_bits(chunk_key, (g, out_n * h * wd, out_o // g)))
        acc.append(product.reshape(g, out_n, h, wd, out_o // g).transpose(1, 0, 4, 2, 3).reshape(keyed.shape))
    random = {
        "lhs": fpemu.stochastic_bits(lhs_key, x.shape),
        "rhs": fpemu.stochastic_bits(rhs_key, w.shape),
        "accumulate": np.stack(acc),
        "out": fpemu.stochastic_bits(out_key, keyed.shape),
    }
    explicit = fpemu.conv_general_dilated(x, w, (1, 1), "VALID", random=random, **SR_ALL, **conv_kw)
    np.testing.assert_array_equal(_bits(explicit), _bits(keyed))


_GEOMETRIES = [
    lambda: dot_geometry((2, 3, 4, 2), (2, 2, 3, 5), (((1, 3), (2, 0)), ((0,), (1,)))),
    lambda: dot_geometry((3,), (3,), (((0,), (0,)), ((), ()))),
    lambda: matmul_geometry((2, 1, 3, 6), (4, 6, 2)),
    lambda: matmul_geometry((6,), (6,)),
    lambda: matmul_geometry((3, 6), (6,)),
    lambda: conv_geometry((2, 4, 5, 4), (6, 2, 2, 2), (1, 1), "VALID", None, None, None, 2, 1),
    lambda: conv_geometry((4, 5, 3), (2, 3, 6), (2,), "SAME", None, (2,), ("NWC", "WIO", "NCW"), 1, 2),
]


@pytest.mark.parametrize("make", _GEOMETRIES, ids=lambda m: "")
def test_result_to3d_inverts_from3d(make):
    """The running sum's bits are moved into the product's layout by `result_to3d`: a bijection."""
    geometry = make()
    y = jnp.arange(int(np.prod(geometry.out_shape)), dtype=jnp.int32).reshape(geometry.out_shape)
    y3 = geometry.result_to3d(y)
    assert y3.ndim == 3
    np.testing.assert_array_equal(np.asarray(geometry.from3d(y3)), np.asarray(y))


# -- errors -----------------------------------------------------------------------------------------


A, B = _operands((2, 3), (3, 2), seed=8)
FULL = {"lhs": np.zeros((2, 3), np.uint32), "rhs": np.zeros((3, 2), np.uint32)}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(random=FULL, key=KEY), ValueError, "takes key= .* or random= .*, not both"),
        (dict(random=FULL, rounding="nearest_even"), ValueError, "random is only used with stochastic rounding"),
        (dict(), ValueError, r"needs key=jax.random.key\(...\) \(or the random bits themselves, random=\)"),
        (dict(random={"lhs": FULL["lhs"]}), ValueError, r"random lacks the key 'rhs'.*'lhs', 'rhs'"),
        (dict(random={**FULL, "out": FULL["lhs"]}), ValueError, r"random has the key 'out'.*valid keys: 'lhs', 'rhs'"),
        (dict(random={**FULL, "acc": FULL["lhs"]}), ValueError, r"'acc'.*valid keys: 'lhs', 'rhs'"),
        (dict(random=FULL["lhs"]), TypeError, r"random must be a dict .*keys: 'lhs', 'rhs'"),
        (
            dict(random={**FULL, "lhs": np.zeros((3, 2), np.uint32)}),
            ValueError,
            r"random\['lhs'\] of shape \(3, 2\) "
            r"does not broadcast to the shape of a \(2, 3\)",
        ),  # fmt: skip
        (dict(random={**FULL, "rhs": np.zeros((3, 2), np.float32)}), TypeError, r"random\['rhs'\] must be an integer"),
        (
            dict(random={**FULL, "rhs": np.full((3, 2), -1)}),
            ValueError,
            r"random\['rhs'\] must hold integers in "
            r"\[0, 2\*\*32\)",
        ),  # fmt: skip
        (dict(random={**FULL, "rhs": np.full((3, 2), 2**32)}), ValueError, r"\[0, 2\*\*32\).* got 4294967296"),
        (dict(random={**FULL, "rhs": True}), TypeError, "got a bool"),
    ],
)
def test_bad_random_names_the_argument_and_the_valid_keys(kwargs, error, match):
    options = {"lhs": "e4m3fn", "rhs": "e4m3fn", "rounding": "stochastic", **kwargs}
    with pytest.raises(error, match=match):
        fpemu.dot_general(A, B, DIMS, **options)


def test_the_accumulate_bits_need_the_chunks():
    with pytest.raises(ValueError, match=r"random\[.accumulate.\] of shape \(2, 3\) does not broadcast to "
                       r"\(number of chunks,\) \+ the result's shape \(3, 2, 2\)"):  # fmt: skip
        fpemu.matmul(A, B, accumulate="bf16", accumulate_rounding="stochastic", random={"accumulate": A.astype(int)})


def test_a_stochastic_call_that_rounds_nothing_takes_no_bits():
    """rounding="stochastic" with no format: no rounding draws bits, so the only valid mapping is {}."""
    got = fpemu.matmul(A, B, rounding="stochastic", random={})
    np.testing.assert_array_equal(_bits(got), _bits(fpemu.matmul(A, B)))
    with pytest.raises(ValueError, match="valid keys: none"):
        fpemu.matmul(A, B, rounding="stochastic", random={"lhs": 0})


def test_every_combination_of_streams_is_named():
    """The valid keys are exactly the call's stochastic roundings, in every combination: one more
    key, or one fewer, is an error that lists them (checked before anything runs)."""
    for lhs, rhs, out, acc in itertools.product([None, "e4m3fn"], repeat=4):
        options = dict(lhs=lhs, rhs=rhs, out=out, rounding="stochastic")
        if acc:
            options.update(accumulate="bf16", accumulate_rounding="stochastic")
        names = [n for n, f in (("lhs", lhs), ("rhs", rhs), ("accumulate", acc), ("out", out)) if f]
        valid = ", ".join(map(repr, names)) if names else "none"
        extra = next(n for n in ("lhs", "rhs", "accumulate", "out", "x") if n not in names)
        with pytest.raises(ValueError, match=f"has the key {extra!r}.*valid keys: {valid}"):
            fpemu.matmul(A, B, random={**{n: 0 for n in names}, extra: 0}, **options)
        if names:
            with pytest.raises(ValueError, match=f"lacks the key {names[-1]!r}.*needs the keys {valid}"):
                fpemu.matmul(A, B, random={n: 0 for n in names[:-1]}, **options)
