"""The NumPy oracle of a training recipe's quantized GEMM (`fpemu._training.quantized_dot_general`).

Written from the definitions in docs/training.md, sharing no code with the fast path: the operand
views (merged contraction axis, 2-D tiles) are NumPy index arithmetic; the Hadamard matrix is
``H[i, j] = (-1) ** popcount(i & j)`` and each transformed element is the exact rational sum of its
block, rounded once to float32 (the fast path's float32 butterflies agree whenever their partial
sums are exact); delayed scales are computed from the amax with the rule's formula; the scaled
quantization of a view is `fpemu.testing.scaled_reference.quantize` (itself an independent oracle), whose
float32 per-tensor scale (FP8's per-tensor float scale, NVFP4's global scale) is kept apart (the
elements, or the elements times their decoded block scales) and multiplies the product's float32
result once, ``fl(y * fl(t_lhs * t_rhs))``; the product is `fpemu.testing.dot_general_reference`
(exact products, the chunk sums rounded once).

What it shares with the fast path, on purpose, is the randomness: the key split
(``jax.random.split(key, 3)``: lhs, rhs, Hadamard) and the counter-based random bits
(`fpemu.stochastic_bits`), so that stochastic rounding can be compared bit for bit.

Example:
  >>> import numpy as np
  >>> from fpemu import training_recipe
  >>> x = np.array([[1.0, 2.0, 3.0, 100.0]], np.float32)
  >>> w = np.ones((4, 1), np.float32)
  >>> gemm = training_recipe("fp8_rowwise").forward           # scale 2**ceil(log2(100 / 448)) = 1/4
  >>> quantized_dot_general_reference(x, w, (((1,), (0,)), ((), ())), gemm)   # 400 -> 384 (a tie, even)
  array([[102.]], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, cast

import ml_dtypes
import numpy as np

from fpemu._core.format import Format
from fpemu._engine import rng
from fpemu._ops.quantize import stochastic_bits
from fpemu._training.quantizer import Quantizer
from fpemu._training.recipes import GemmRecipe
from fpemu.scaled import BlockFormat
from fpemu.testing import reference as element_reference
from fpemu.testing import scaled_reference
from fpemu.testing.matmul_reference import dot_general_reference

__all__ = ["hadamard_reference", "quantize_operand_reference", "quantized_dot_general_reference"]

F32 = np.float32
_TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)  # TE's get_wgrad_sign_vector()


def _array(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)):
        raise TypeError(f"operands must be float16, bfloat16 or float32, got {x.dtype}")
    return x


def _dims(dims: Sequence[int], ndim: int) -> tuple[int, ...]:
    return tuple(int(d) % ndim for d in dims)


# -- views ---------------------------------------------------------------------------------------------


def _merged(x: np.ndarray, dims: tuple[int, ...]) -> tuple[np.ndarray, int, Any]:
    """(x with its contracting dims merged into one axis, that axis, the inverse)."""
    shape = x.shape
    others = tuple(d for d in range(x.ndim) if d not in dims)
    k = math.prod(shape[d] for d in dims)
    if dims and dims == tuple(range(dims[0], dims[0] + len(dims))):
        first = dims[0]
        return x.reshape(shape[:first] + (k,) + shape[first + len(dims) :]), first, lambda y: y.reshape(shape)
    perm = others + dims
    moved_shape = tuple(shape[d] for d in perm)
    merged = np.transpose(x, perm).reshape(tuple(shape[d] for d in others) + (k,))
    return merged, len(others), lambda y: np.transpose(y.reshape(moved_shape), np.argsort(perm))


def _tiled(x: np.ndarray, dims: tuple[int, ...], b: int) -> tuple[np.ndarray, Any]:
    """(x's (rows, K) matrix cut into b x b tiles, (tile row, tile column, b*b), zero-padded; the inverse)."""
    others = tuple(d for d in range(x.ndim) if d not in dims)
    perm = others + dims
    rows, k = math.prod(x.shape[d] for d in others), math.prod(x.shape[d] for d in dims)
    m = np.transpose(x, perm).reshape(rows, k)
    r_idx, k_idx = np.indices((rows, k))
    where = (r_idx // b, k_idx // b, (r_idx % b) * b + k_idx % b)
    tiles = np.zeros((-(-rows // b), -(-k // b), b * b), x.dtype)
    tiles[where] = m

    def back(t: np.ndarray) -> np.ndarray:
        moved = t[where].reshape(tuple(x.shape[d] for d in perm))
        return np.transpose(moved, np.argsort(perm))

    return tiles, back


# -- one operand ---------------------------------------------------------------------------------------


def _recipe(q: Quantizer, margin: int) -> BlockFormat:
    block = {"block": q.block_size, "block_2d": (q.block_size or 0) ** 2}.get(q.scaling)
    return BlockFormat(
        name="reference",
        element=q.format,
        block_size=block,
        scale_format=q.scale_format,
        scale_rule=q.scale_rule or "float",
        global_scale=q.tensor_scale,
        saturate=q.saturate,
        margin=margin,
    )


def _delayed_scale(amax: Any, recipe: BlockFormat) -> float | None:
    """The decode scale from an amax (None for a NaN or infinite amax: everything is NaN)."""
    a = abs(float(F32(amax)))
    if not math.isfinite(a):
        return None
    if a == 0:
        return 1.0
    if recipe.scale_rule != "float":
        return math.ldexp(1.0, scaled_reference.exponent(a, recipe))
    with np.errstate(over="ignore"):
        enc = (F32(recipe.element.max) / F32(a)) * F32(2.0**-recipe.margin)
    enc = min(max(enc, F32(2.0**-126)), F32(2.0**126))
    return float(F32(1) / F32(enc))


def quantize_operand_reference(
    x: Any,
    contracting_dims: Sequence[int],
    q: Quantizer,
    *,
    key: Any = None,
    amax: Any = None,
    margin: int = 0,
    random: Any = None,
    split: bool = False,
) -> Any:
    """``quantize_operand``'s answer, from the definitions (docs/training.md), in ``x``'s dtype.

    ``random``: explicit random bits for stochastic rounding (unsigned ints in ``[0, 2**random_bits)``,
    the shape of the view the operand is rounded in); by default the fast path's,
    ``fpemu.stochastic_bits(key, view shape, random_bits)``.

    ``split``: return ``(blocks, t)`` instead, float32, ``t`` the float32 per-tensor scale of a
    `Quantizer.tensor_scaled` quantizer (else None, and ``blocks`` the answer), so that the answer is
    ``fl(blocks * t)`` (`fpemu.testing.scaled_reference.split`).
    """
    x = _array(x)
    dims = _dims(contracting_dims, x.ndim)
    stochastic = q.rounding == "stochastic"
    k_bits = q.random_bits or 32

    def bits(shape: tuple[int, ...]) -> np.ndarray | None:
        if not stochastic:
            return None
        if random is not None:
            return np.asarray(random, np.uint64)
        return np.asarray(stochastic_bits(key, shape, k_bits)).astype(np.uint64)

    def answer(result: Any, recipe: BlockFormat, axis: int | None, back: Any) -> Any:
        if not split:
            return back(result.dequantized).astype(x.dtype)
        blocks, t = scaled_reference.split(result, recipe, axis)
        return back(blocks), None if t is None else F32(t.ravel()[0])

    if q.scaling == "none":
        out = element_reference.round_array(
            x, q.format, rounding=q.rounding, saturate=q.saturate, random=bits(x.shape), random_bits=k_bits
        )
        out = np.asarray(out).astype(x.dtype)
        return (out.astype(F32), None) if split else out
    recipe = _recipe(q, margin)
    kw: dict[str, Any] = {"rounding": q.rounding, "random_bits": k_bits}
    if q.scaling in ("tensor", "delayed"):
        scale = None
        if q.scaling == "delayed":
            scale = _delayed_scale(amax, recipe)
            if scale is None:  # a NaN or infinite amax: NaN everywhere, the scale too
                nan = np.full(x.shape, np.nan, x.dtype)
                return (nan.astype(F32), F32(np.nan) if q.tensor_scaled else None) if split else nan
        result = scaled_reference.quantize(x, recipe, axis=None, random=bits(x.shape), scale=scale, **kw)
        return answer(result, recipe, None, lambda y: y)
    if q.scaling in ("row", "block"):
        view, axis, back = _merged(x, dims)
        result = scaled_reference.quantize(view, recipe, axis=axis, random=bits(view.shape), pad=True, **kw)
        return answer(result, recipe, axis, back)
    assert q.scaling == "block_2d" and q.block_size is not None
    view, back = _tiled(x, dims, q.block_size)
    result = scaled_reference.quantize(view, recipe, axis=-1, random=bits(view.shape), **kw)
    return answer(result, recipe, view.ndim - 1, back)


# -- the Hadamard transform ----------------------------------------------------------------------------


def _signs(key: Any, size: int) -> np.ndarray:
    if key is None:
        assert size == len(_TE_SIGNS), "without a key only Transformer Engine's 16 signs exist"
        return np.array(_TE_SIGNS, np.int64)
    top = np.asarray(stochastic_bits(key, (size,), 1)).astype(np.int64)
    return 1 - 2 * top


def hadamard_reference(x: Any, axis: int, size: int, key: Any) -> np.ndarray:
    """``hadamard``'s answer: per full block, ``fl32(fl32(sum_j H[i, j] d[j] v[j]) * float32(1/sqrt(size)))``
    with the sum exact; a shorter last block unchanged; in ``x``'s dtype."""
    x = _array(x)
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(size)] for i in range(size)], np.int64)
    d = _signs(key, size)
    norm = F32(1 / math.sqrt(size))
    moved = np.moveaxis(x.astype(np.float32), axis, -1)
    out = moved.copy()
    full = moved.shape[-1] // size * size
    coeffs = (h * d).astype(np.float64)  # row i: the signs of output i's terms
    for index in np.ndindex(moved.shape[:-1]):
        row = moved[index]
        for start in range(0, full, size):
            terms = coeffs * row[start : start + size].astype(np.float64)  # exact: a float32 value times ±1
            for i in range(size):
                out[index + (start + i,)] = F32(_sum_f32(terms[i]) * norm)  # exact sum, rounded once
    return np.moveaxis(out, -1, axis).astype(x.dtype)


# -- the GEMM ------------------------------------------------------------------------------------------


def _sum_f32(terms: np.ndarray) -> np.float32:
    """The exact sum of float64 terms (exact products of float32 values) rounded once to float32, nearest
    even; an exact zero is +0. Non-finite terms: their IEEE sum."""
    if not np.all(np.isfinite(terms)):
        total = 0.0
        for t in terms.tolist():
            total += t
        return F32(total)
    s = math.fsum(terms.tolist())  # the exact sum rounded once to float64
    if s == 0:
        return F32(0)
    with np.errstate(over="ignore"):  # beyond float32's range: inf (nearest even)
        r = F32(s)
        below = abs(float(r)) if abs(float(r)) <= abs(s) else float(np.nextafter(abs(r), F32(0)))  # <= |s|
    ulp = 2.0**-149 if below < 2.0**-126 else 2.0 ** (math.frexp(below)[1] - 24)  # float32's spacing at below
    if abs(s) == below + ulp / 2:  # a float32 tie (or the overflow threshold) in float64: decide it exactly
        exact = sum((Fraction(t) for t in terms.tolist()), Fraction(0))
        return F32(element_reference.round_scalar(exact, "fp32"))
    return r


def _exact_dot(a: np.ndarray, b: np.ndarray, dn: Any, every: int | None) -> np.ndarray:
    """float32 ``dot_general`` with exact products, chunks of ``every`` summed exactly and rounded once, the
    running sum (from +0) rounded once per chunk; without ``every``, the whole sum rounded once."""
    (lc, rc), (lb, rb) = dn
    lf = tuple(d for d in range(a.ndim) if d not in lc + lb)
    rf = tuple(d for d in range(b.ndim) if d not in rc + rb)
    batch = tuple(a.shape[d] for d in lb)
    n_b, k = math.prod(batch), math.prod(a.shape[d] for d in lc)
    m, n = math.prod(a.shape[d] for d in lf), math.prod(b.shape[d] for d in rf)
    a3 = np.transpose(a.astype(np.float64), lb + lf + lc).reshape(n_b, m, k)
    b3 = np.transpose(b.astype(np.float64), rb + rf + rc).reshape(n_b, n, k)
    out = np.zeros((n_b, m, n), np.float32)
    step = k if every is None else every
    for i, row, col in np.ndindex(n_b, m, n):
        products = a3[i, row] * b3[i, col]  # exact: float32 x float32 fits float64
        if every is None:
            out[i, row, col] = _sum_f32(products)
            continue
        acc = F32(0)
        for start in range(0, k, step):
            chunk = _sum_f32(products[start : start + step])
            acc = _sum_f32(np.array([acc, chunk], np.float64))
        out[i, row, col] = acc
    return out.reshape(batch + tuple(a.shape[d] for d in lf) + tuple(b.shape[d] for d in rf))


def quantized_dot_general_reference(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    gemm: GemmRecipe,
    *,
    key: Any = None,
    lhs_amax: Any = None,
    rhs_amax: Any = None,
    preferred_element_type: Any = None,
    margin: int = 0,
) -> np.ndarray:
    """``quantized_dot_general``'s answer: the definition step by step (see the module docstring).

    With a float32 accumulator the product is computed here (exact products; each chunk of
    ``accumulate_every`` products, or the whole contraction, summed exactly and rounded once to
    float32; the result rounded to ``preferred_element_type``, nearest even); with a narrower
    accumulator by `fpemu.testing.dot_general_reference`.
    """
    a, b = _array(lhs), _array(rhs)
    (lc, rc), (lb, rb) = dimension_numbers
    dn = ((_dims(lc, a.ndim), _dims(rc, b.ndim)), (_dims(lb, a.ndim), _dims(rb, b.ndim)))
    (lc, rc), _ = dn
    keys = [None, None, None] if key is None else list(rng.split(key, 3))
    if gemm.lhs is not None:
        a = a.astype(np.float32)
    if gemm.rhs is not None:
        b = b.astype(np.float32)
    if gemm.hadamard is not None:
        transformed = []
        for x, dims in ((a, lc), (b, rc)):
            view, axis, back = _merged(x.astype(np.float32), dims)
            transformed.append(back(hadamard_reference(view, axis, gemm.hadamard, keys[2])))
        a, b = transformed
    ta = tb = None
    if gemm.lhs is not None:
        a, ta = quantize_operand_reference(a, lc, gemm.lhs, key=keys[0], amax=lhs_amax, margin=margin, split=True)
    if gemm.rhs is not None:
        b, tb = quantize_operand_reference(b, rc, gemm.rhs, key=keys[1], amax=rhs_amax, margin=margin, split=True)
    scaled = ta is not None or tb is not None
    if cast(Format, gemm.accumulate).name != "fp32":
        out = dot_general_reference(
            a,
            b,
            dn,
            accumulate=gemm.accumulate,
            accumulate_every=gemm.accumulate_every,
            preferred_element_type=np.float32 if scaled else preferred_element_type,
        )
    else:
        out = _exact_dot(a.astype(np.float32), b.astype(np.float32), dn, gemm.accumulate_every)
    if scaled:  # the per-tensor scales' product, applied to the float32 result (an exact zero stays zero)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            alpha = F32(ta) if tb is None else F32(tb) if ta is None else F32(F32(ta) * F32(tb))
            out = np.where((out == 0) & np.isinf(alpha), out, (np.asarray(out, F32) * alpha).astype(F32))
    return out if preferred_element_type is None else np.asarray(out).astype(preferred_element_type)
