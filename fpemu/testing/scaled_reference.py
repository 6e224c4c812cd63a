"""A slow, obviously-correct NumPy reference for every block format, written from the formulas.

This is the oracle the fast path (`fpemu.scaled.BlockArray.from_array`) is tested against, so it shares no
code with it: groups are found with NumPy index arithmetic, power-of-two scale exponents are
computed with exact rational arithmetic (`fractions.Fraction`) straight from the rule's formula
(``floor(log2(amax)) - emax``, ``ceil(log2(amax / M))``, ...), scaled elements are exact float64
values ``x * 2**-k``, and the element rounding is `fpemu.testing.reference` (the exact rounding
oracle, itself independent of the fast path). Float-scale block formats are defined as sequences of
float32 operations; here they are NumPy float32 operations, which are IEEE (nearest even,
subnormals kept, overflow to inf). It reads only format facts from the registry and the fields of
a `BlockFormat`.

The semantics (docs/scaling.md), per group of elements sharing a scale:

- A group holding NaN or ±inf (current scaling): NaN scale, elements 0, dequantized NaN.
- The elements are rounded with the block format's ``saturate``, a bool or one of IEEE P3109's modes,
  by the element oracle (`fpemu.testing.reference`): that is where the modes differ (finite
  overflow after an amax-derived scale, and ±inf elements under a given ``scale``).
- Power-of-two rules, ``amax`` the largest magnitude, ``M``/``emax`` the element's largest value and
  its exponent, ``p`` its precision: ``ocp``: ``floor(log2(amax)) - emax``; ``ceil``:
  ``ceil(log2(amax / M))``; ``even``: ``floor(log2(r)) - emax`` with ``r`` = amax rounded to ``p``
  significant bits, ties away; ``ceil_log2``: ``ceil(log2(amax)) - emax``. Then ``+ margin``,
  clamped to the scale format's exponent range. An all-zero group: the smallest E8M0 exponent
  (-127), or 0 for float32 scales. Elements: ``round(x * 2**-k)``, dequantized ``q * 2**k`` rounded
  to float32.
- ``float`` with float32 scales: ``enc = clip(fl(M / amax) * 2**-margin, 2**-126, 2**126)`` (1 for an
  all-zero group), decode scale ``fl(1 / enc)``, elements ``round(fl(x * enc))``, dequantized
  ``fl(q * s)``.
- ``float`` with a narrow scale format (NVFP4): see `fpemu.scaled.BlockFormat` and docs/scaling.md; the
  sequence below follows Transformer Engine's NVFP4 reference quantizer step by step.

Example:
  >>> import numpy as np
  >>> from fpemu.testing import scaled_reference
  >>> r = scaled_reference.quantize(np.array([[0.3, -1.7, 5.0, 12.0]], np.float32), "mxfp4", pad=True)
  >>> r.scale.tolist(), r.values.tolist(), r.dequantized.tolist()
  ([[128]], [[0.0, -1.0, 2.0, 6.0]], [[0.0, -2.0, 4.0, 12.0]])
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from fpemu._core.modes import Rounding, Saturation
from fpemu.deprecation import renamed_keyword
from fpemu.scaled import BlockFormat, get_block_format
from fpemu.testing import reference as elem_ref

__all__ = ["Result", "assert_equal", "exponent", "quantize", "split"]

F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)


class Result(NamedTuple):
    """The reference's answer: element values (float32), the scale leaf as `BlockArray` stores it
    (uint8 codes, or float32), the global scale (float32, or None) and the dequantized array (in
    the input's dtype)."""

    values: np.ndarray
    scale: np.ndarray
    global_scale: np.ndarray | None
    dequantized: np.ndarray


# -- exact helpers ---------------------------------------------------------------------------------


def _floor_log2(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def _ceil_log2(a: Fraction) -> int:
    e = _floor_log2(a)
    return e if Fraction(2) ** e == a else e + 1


def _round_half_up_to_precision(a: Fraction, p: int) -> Fraction:
    """a > 0 rounded to p significant bits, ties away from zero."""
    quantum = Fraction(2) ** (_floor_log2(a) - (p - 1))
    return math.floor(a / quantum + Fraction(1, 2)) * quantum


@renamed_keyword("recipe", "block_format", "fpemu.testing.scaled_reference.exponent")
def exponent(amax: float, block_format: Any) -> int:
    """The power-of-two scale exponent ``k`` of a group with largest magnitude ``amax`` (> 0, finite),
    from the rule's formula, with the margin and the scale format's clamp.

    Example:
      >>> exponent(12.0, "mxfp4"), exponent(12.0, get_block_format("mxfp4").__class__(
      ...     name="c", element="e2m1fn", block_size=32, scale_format="e8m0fnu", scale_rule="ceil"))
      (1, 1)
    """
    block_format = get_block_format(block_format)
    a = Fraction(amax)
    e = block_format.element
    rule = block_format.scale_rule
    if rule == "ocp":
        k = _floor_log2(a) - e.emax
    elif rule == "ceil":
        k = _ceil_log2(a / Fraction(e.max))
    elif rule == "even":
        p = e.emax - e.min_subnormal_exponent + 1 if e.exponent_bits == 0 else e.precision  # int8: 7 bits in [1, 2)
        k = _floor_log2(_round_half_up_to_precision(a, p)) - e.emax
    elif rule == "ceil_log2":
        k = _ceil_log2(a) - e.emax
    else:
        raise ValueError(f"{rule!r} is not a power-of-two rule")
    k += block_format.margin
    return min(max(k, block_format.scale_format.emin), block_format.scale_format.emax)


def _amax(values: np.ndarray) -> float:
    """The largest magnitude of a group (0 for an empty one), exactly."""
    return float(np.max(np.abs(values.astype(np.float64)), initial=0.0))


def _no_negative_zero(q: np.ndarray, fmt) -> np.ndarray:
    """Two's-complement elements (MXINT8): there is no -0, and the block formats saturate symmetrically to
    ±max (the most negative value, -2.0, is never produced)."""
    return np.where(q == 0, 0.0, np.maximum(q, -fmt.max)) if fmt.twos_complement else q


def _zero_exponent(block_format: BlockFormat) -> int:
    return block_format.scale_format.emin if block_format.scale_format.mantissa_bits == 0 else 0


def _is_fp32(fmt) -> bool:
    return (fmt.exponent_bits, fmt.mantissa_bits) == (8, 23)


# -- groups ----------------------------------------------------------------------------------------


def _groups(shape: tuple[int, ...], axis: int | None, block: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """(group id of every element, shape of the scale array)."""
    if axis is None:
        return np.zeros(shape, np.int64), (1,) * len(shape)
    n = shape[axis]
    count = 1 if block is None else -(-n // block)
    gshape = shape[:axis] + (count,) + shape[axis + 1 :]
    coords = list(np.indices(shape, sparse=False)) if shape else []
    coords[axis] = np.zeros(shape, np.int64) if block is None else coords[axis] // block
    gid = np.ravel_multi_index(tuple(coords), gshape) if np.prod(gshape) else np.zeros(shape, np.int64)
    return np.asarray(gid, np.int64), gshape


def _round(
    values: np.ndarray,
    fmt,
    rounding: Rounding,
    saturate: Saturation,
    random: np.ndarray | None,
    random_bits: int,
    stochastic_variant: str = "floor",
):
    """Exact rounding of float64 values (exact scaled inputs) into fmt, vectorised where exact."""
    out = np.empty(values.shape, np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        as32 = values.astype(np.float32)
    exact32 = (as32.astype(np.float64) == values) | np.isnan(values)
    for mask, data in ((exact32, as32), (~exact32, values)):
        if mask.any():
            r = None if random is None else random[mask]
            out[mask] = elem_ref.round_array(
                data[mask],
                fmt,
                rounding=rounding,
                saturate=saturate,
                random=r,
                random_bits=random_bits,
                stochastic_variant=stochastic_variant,
            )
    return out


# -- the reference ---------------------------------------------------------------------------------


@renamed_keyword("recipe", "block_format", "fpemu.testing.scaled_reference.quantize")
def quantize(
    x: Any,
    block_format: Any,
    *,
    axis: Any = "default",
    rounding: Rounding = "nearest_even",
    random: Any = None,
    random_bits: int = 32,
    scale: Any = None,
    pad: bool = False,
    stochastic_variant: str = "floor",
) -> Result:
    """Quantize ``x`` (float16, bfloat16 or float32) with ``block_format``; see the module docstring.

    Args:
      x: the input array.
      block_format: a block format's name (`fpemu.scaled.block_formats`) or a `fpemu.scaled.BlockFormat`;
        ``recipe=`` is its deprecated name.
      axis: as in `fpemu.scaled.BlockArray.from_array` ("default": -1 for block formats with a block size, else None).
      rounding: the element rounding mode.
      random: for ``rounding="stochastic"``: unsigned integers broadcastable to ``x``'s shape, already
        reduced to ``random_bits`` bits (the fast path's are the top bits of ``fpemu``'s per-element
        hash: ``fpemu.stochastic_bits(key, x.shape, random_bits)``).
      random_bits: the number of random bits.
      scale: decode scales to use instead of the amax rule (single-level block formats), broadcastable
        to the scale shape.
      pad: allow a last block shorter than the block size.
      stochastic_variant: how stochastic rounding compares its random bits with the discarded
        fraction (`fpemu.testing.reference.round_array`'s option).
    """
    block_format = get_block_format(block_format)
    x = np.asarray(x)
    if x.dtype not in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)):
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    x32 = x.astype(np.float32)
    if isinstance(axis, str):
        axis = -1 if block_format.block_size else None
    if axis is not None:
        axis %= x.ndim
    block = block_format.block_size
    if axis is not None and block and x.shape[axis] % block and not pad:
        raise ValueError("block size does not divide the axis (pass pad=True)")
    gid, gshape = _groups(x.shape, axis, block)
    ngroups = int(np.prod(gshape))
    flat_gid = gid.ravel()
    flat = x32.ravel()
    rand = None if random is None else np.broadcast_to(np.asarray(random), x.shape).ravel().astype(np.uint64)
    order = np.argsort(flat_gid, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(flat_gid, minlength=ngroups))[:-1]) if ngroups else []
    given = None if scale is None else np.broadcast_to(np.asarray(scale, np.float32), gshape).ravel()
    nan_group = np.zeros(ngroups, bool)
    if given is None:
        for g, idx in enumerate(members):
            nan_group[g] = not np.all(np.isfinite(flat[idx]))
    e, s_fmt = block_format.element, block_format.scale_format
    kw = {
        "rounding": rounding,
        "saturate": block_format.saturate,
        "random_bits": random_bits,
        "stochastic_variant": stochastic_variant,
    }
    global_leaf = None

    if block_format.scale_rule != "float":  # power-of-two scales
        k = np.zeros(ngroups, np.int64)
        for g, idx in enumerate(members):
            if given is not None:
                mant, ex = math.frexp(float(given[g]))
                assert mant == 0.5, "power-of-two block formats need power-of-two scales"
                k[g] = ex - 1
            elif nan_group[g]:
                k[g] = 0
            else:
                amax_g = _amax(flat[idx])
                k[g] = exponent(amax_g, block_format) if amax_g > 0 else _zero_exponent(block_format)
        ke = k[flat_gid]
        with np.errstate(invalid="ignore"):  # NaN inputs stay NaN
            scaled = np.ldexp(flat.astype(np.float64), -ke)  # exact in float64
        q = _no_negative_zero(_round(scaled, e, random=rand, **kw), e)
        with np.errstate(over="ignore"):
            deq = np.ldexp(q, ke).astype(np.float32)  # exact product, rounded once to float32
        if s_fmt.mantissa_bits == 0:
            scale_leaf = np.where(nan_group, s_fmt.nan_code, k + s_fmt.bias).astype(np.uint8)
        else:
            scale_leaf = np.where(nan_group, np.nan, np.ldexp(1.0, k)).astype(np.float32)
    elif _is_fp32(s_fmt):  # float scales: Transformer Engine's current scaling
        enc = np.ones(ngroups, np.float32)
        dec = np.ones(ngroups, np.float32)
        big = F32(np.finfo(np.float32).max)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            for g, idx in enumerate(members):
                if given is not None:
                    dec[g] = given[g]
                    enc[g] = F32(1) / F32(given[g])
                    continue
                if nan_group[g]:
                    dec[g] = np.nan
                    continue
                amax = F32(_amax(flat[idx]))
                if amax == 0:
                    continue  # scale 1
                m = (F32(e.max) / amax) * F32(2.0**-block_format.margin)
                m = min(max(m, F32(2.0**-126)), F32(2.0**126))
                assert m <= big
                enc[g] = m
                dec[g] = F32(1) / m
            y = (flat * enc[flat_gid]).astype(np.float32)
        q = _no_negative_zero(elem_ref.round_array(y, e, random=rand, **kw), e)
        with np.errstate(over="ignore", invalid="ignore"):
            deq = (q.astype(np.float32) * dec[flat_gid]).astype(np.float32)
        scale_leaf = dec
    else:  # narrow block scales under a float32 tensor scale (NVFP4)
        # the tensor amax: over the blocks whose amax is finite (a NaN/inf block reads as NaN anyway)
        finite = flat[~nan_group[flat_gid]] if flat.size else flat
        amax_t = F32(np.max(np.abs(finite))) if finite.size else F32(0)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if block_format.global_scale:
                s_enc = F32(F32(s_fmt.max) * F32(e.max)) / amax_t  # amax 0: inf
                s_enc = min(s_enc, F32(2.0**126))
                g_dec = F32(1) / s_enc
            else:
                s_enc = g_dec = F32(1)
            mult = s_enc * (F32(1) / F32(e.max))
            d = np.zeros(ngroups, np.float32)
            enc = np.zeros(ngroups, np.float32)
            for g, idx in enumerate(members):
                amax_b = F32(0 if nan_group[g] else _amax(flat[idx]))
                raw = min(F32(amax_b * mult), F32(s_fmt.max))
                d[g] = elem_ref.round_array(np.array([raw], np.float32), s_fmt, saturate=True)[0]
                enc[g] = min(F32(1) / F32(d[g] * g_dec), F32(_FLT_MAX))
            y = (flat * enc[flat_gid]).astype(np.float32)
        q = _no_negative_zero(elem_ref.round_array(y, e, random=rand, **kw), e)
        with np.errstate(over="ignore", invalid="ignore"):
            deq = ((q.astype(np.float32) * d[flat_gid]).astype(np.float32) * g_dec).astype(np.float32)
        codes = elem_ref.encode_array(d, s_fmt)
        scale_leaf = np.where(nan_group, s_fmt.nan_code, codes).astype(s_fmt.code_dtype)
        if block_format.global_scale:
            global_leaf = np.full((1,) * x.ndim, g_dec, np.float32)

    q = np.where(nan_group[flat_gid], 0.0, q)
    deq = np.where(nan_group[flat_gid], np.float32(np.nan), deq)
    values = q.astype(np.float32).reshape(x.shape)
    deq = deq.astype(np.float32).reshape(x.shape).astype(x.dtype)
    return Result(values, np.asarray(scale_leaf).reshape(gshape), global_leaf, deq)


@renamed_keyword("recipe", "block_format", "fpemu.testing.scaled_reference.split")
def split(result: Result, block_format: Any, axis: Any = "default") -> tuple[np.ndarray, np.ndarray | None]:
    """`fpemu.scaled.quantize_dequantize_split`'s answer from `quantize`'s ``result`` (same ``block_format``
    and ``axis``): ``(blocks, tensor scale)`` in float32, the scale of shape ``(1,) * ndim``.

    With `BlockFormat.has_tensor_scale`: a two-level block format's blocks are the element values times their
    decoded block scales (exact products; NaN where the scale is NaN), the tensor scale its global
    scale; a per-tensor float scale's blocks are the element values (all NaN with a NaN scale).
    Otherwise ``(dequantized, None)``.
    """
    block_format = get_block_format(block_format)
    values = result.values
    if isinstance(axis, str):
        axis = -1 if block_format.block_size else None
    if axis is not None:
        axis %= values.ndim
    if not block_format.has_tensor_scale(axis):
        return result.dequantized.astype(np.float32), None
    if block_format.global_scale:
        assert result.global_scale is not None
        gid, _ = _groups(values.shape, axis, block_format.block_size)
        decode = np.vectorize(lambda c: elem_ref.decode_scalar(int(c), block_format.scale_format), otypes=[np.float32])
        d = decode(result.scale).ravel()[gid]
        with np.errstate(invalid="ignore"):
            blocks = (values.astype(np.float64) * d).astype(np.float32)
        return blocks, result.global_scale.astype(np.float32)
    t = np.asarray(result.scale, np.float32).reshape((1,) * values.ndim)
    return np.where(np.isnan(t), np.float32(np.nan), values).astype(np.float32), t


# -- comparing -------------------------------------------------------------------------------------


def _bits_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two arrays of one dtype, any NaN equal to any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "ui":
        return bool(np.array_equal(a, b))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    nan_a, nan_b = np.isnan(a32), np.isnan(b32)
    same_nan = np.array_equal(nan_a, nan_b)
    return bool(same_nan and np.array_equal(a32[~nan_a].view(np.uint32), b32[~nan_b].view(np.uint32)))


def assert_equal(actual: Any, expected: Any, err_msg: str = "") -> None:
    """Assert bit-for-bit equality (NaN equals NaN, -0 differs from +0).

    ``actual`` may be a `fpemu.scaled.BlockArray` and ``expected`` a `Result`: then the element
    values, the scale leaf, the global scale and the dequantized array are compared. Otherwise both
    are arrays.

    Raises:
      AssertionError: naming the parts that differ and the first differing element.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
    if isinstance(expected, Result):
        parts: list[tuple[str, Any, Any]] = [
            ("values", actual.values, expected.values),
            ("scale", actual.scale, expected.scale),
        ]
        if expected.global_scale is not None or actual.global_scale is not None:
            parts.append(("global_scale", actual.global_scale, expected.global_scale))
        parts.append(("dequantized", actual.dequantize(), expected.dequantized))
    else:
        parts = [("array", actual, expected)]
    bad = []
    for name, a, b in parts:
        if a is None or b is None or not _bits_equal(a, b):
            detail = ""
            if a is not None and b is not None:
                a, b = np.asarray(a), np.asarray(b)
                if a.shape == b.shape and a.dtype == b.dtype:
                    diff = np.argwhere(
                        ~((a == b) | (np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))))
                        | (np.signbit(a.astype(np.float32)) != np.signbit(b.astype(np.float32)))
                    )
                    if diff.size:
                        i = tuple(diff[0])
                        detail = f" (first at {i}: {a[i]!r} vs {b[i]!r})"
                else:
                    detail = f" ({a.dtype}{a.shape} vs {b.dtype}{b.shape})"
            bad.append(f"{name}{detail}")
    if bad:
        raise AssertionError(f"{err_msg}{': ' if err_msg else ''}differ from the reference: {', '.join(bad)}")
