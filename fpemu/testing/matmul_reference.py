"""`dot_general_reference`: the slow, sequential, exact oracle of `fpemu.dot_general` (docs/matmul.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import jax
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike, get_format
from fpemu._engine import rng
from fpemu._ops.dot_policy import DotPolicy
from fpemu._ops.geometry import DotGeometry, dot_geometry
from fpemu._ops.matmul_config import (
    KEY_ACC,
    KEY_LHS,
    KEY_OUT,
    KEY_RHS,
    MatmulOptions,
    chunk_key_words,
    key_streams,
    matmul_call,
)
from fpemu._ops.tensor_core import GROUP, TensorCore
from fpemu.testing import reference

__all__ = ["dot_general_reference"]


def _bits(key, shape) -> np.ndarray:
    """The random bits of every element of an array of ``shape`` rounded with ``key`` (the fast path's)."""
    return np.asarray(rng.random_uint32(rng.seeds_from_key(key), shape))


def _exact_sum(terms: list[tuple[float, float]]) -> Fraction | float:
    if all(math.isfinite(x) and math.isfinite(y) for x, y in terms):
        return sum((Fraction(x) * Fraction(y) for x, y in terms), Fraction(0))
    total = 0.0
    for x, y in terms:
        total += x * y  # Python floats: inf * 0 is nan, without warnings
    return total


def _add(x: float, y: float) -> Fraction | float:
    if math.isfinite(x) and math.isfinite(y):
        return Fraction(x) + Fraction(y)
    return x + y


def _tensor_core_sum(terms: list[tuple[float, float]], model: TensorCore) -> Fraction | float:
    """The tensor core's sum of ``terms`` from +0, literally (docs/matmul.md, "Hopper FP8 accumulation"):
    groups of 32 products; each term and the running sum truncated toward zero to a multiple of
    ``2**(emax - 13)``, ``emax`` the largest exponent-field sum or the running sum's exponent; the
    exact sum truncated toward zero to 14 significant bits. Non-finite values add as IEEE floats."""

    def exponent(x: float, emin: int) -> int:
        return max(math.frexp(x)[1] - 1, emin)

    acc: Fraction | float = Fraction(0)
    for g in range(0, len(terms), GROUP):
        group = terms[g : g + GROUP]
        products = [x * y for x, y in group]  # Python floats: exact for FP8 values; inf * 0 is nan
        if not all(math.isfinite(p) for p in products) or not math.isfinite(acc):
            special = float(acc) if not math.isfinite(acc) else 0.0
            for p in products:
                special += p if not math.isfinite(p) else 0.0
            acc = special
            continue
        exponents = [
            exponent(x, model.lhs_emin) + exponent(y, model.rhs_emin) for (x, y), p in zip(group, products) if p
        ]
        if acc:
            exponents.append(math.frexp(float(acc))[1] - 1)
        if not exponents:
            continue
        quantum = Fraction(2) ** (max(exponents) - 13)
        total = sum((int(Fraction(p) / quantum) for p in products), 0) + int(acc / quantum)  # int(): toward zero
        value = total * quantum
        if value:
            step = Fraction(2) ** (math.frexp(float(value))[1] - 1 - 13)
            value = int(value / step) * step
        acc = value
    return acc


def dot_general_reference(
    a: ArrayLike,
    b: ArrayLike,
    dimension_numbers: lax.DotDimensionNumbers,
    *,
    lhs: FormatLike | None = None,
    rhs: FormatLike | None = None,
    accumulate: FormatLike | None = "fp32",
    out: FormatLike | None = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: Saturation = False,
    stochastic_variant: StochasticVariant = "floor",
    exponent_ties: ExponentTies = "away",
    key: jax.Array | None = None,
    random: Mapping[str, ArrayLike] | None = None,
    lhs_scale: ArrayLike | None = None,
    rhs_scale: ArrayLike | None = None,
    preferred_element_type: DTypeLike | None = None,
    policy: DotPolicy | None = None,
) -> np.ndarray:
    """The slow, sequential, exact oracle for `fpemu.dot_general`: every output element, step by step.

    It follows docs/matmul.md literally, one output element at a time, with exact rational
    arithmetic (`fractions.Fraction`) for products and sums and `fpemu.testing.reference.round_scalar`
    for every rounding. It shares no arithmetic with `fpemu.dot_general`: what is common is the
    checked call (the same argument checks, errors and resolved configuration: W, the formats, the
    chunk size) and the random bits (the same counter-based generator and key split). Where the
    model leaves freedom to the backend (the float32 summation order inside a chunk), it takes the
    chunk's exact sum rounded once to W, so it equals `fpemu.dot_general` bit for bit whenever the
    chunk sums are exact in W, and bounds it otherwise. Explicit random bits (``random=``) are used
    as given, broadcast to the shape of what each rounds. Arithmetic in W (``a / lhs_scale``,
    ``acc * scale``) uses NumPy, which keeps subnormals where XLA:CPU flushes them.

    Takes the arguments of `fpemu.dot_general` and returns a NumPy array of the same shape and
    dtype. About 20 µs per product: for small shapes only.

    Example:
      >>> import numpy as np
      >>> from fpemu.testing import dot_general_reference
      >>> ones = np.ones((1, 32), np.float32)
      >>> dot_general_reference(ones, ones.T, (((1,), (0,)), ((), ())), accumulate="e4m3fn").tolist()
      [[16.0]]
    """
    options = MatmulOptions(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate,
        stochastic_variant=stochastic_variant, exponent_ties=exponent_ties, key=key, random=random,
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type, policy=policy,
    )  # fmt: skip
    call = matmul_call(a, b, lambda sa, sb: dot_geometry(sa, sb, dimension_numbers), options)
    cfg, g = call.cfg, call.geometry
    assert isinstance(g, DotGeometry)
    a_np, b_np = np.asarray(call.a), np.asarray(call.b)
    work = np.dtype(cfg.work)
    work_fmt = get_format(work)
    every = cfg.accumulate_every
    keys = key_streams(key)
    explicit = {name: np.asarray(bits) for name, bits in (call.random or {}).items()}  # checked uint32 bits

    def stream_bits(name: str, stream_key, shape: tuple[int, ...]) -> np.ndarray:
        """The bits of one rounding: the explicit ones, broadcast, or those the stream's key draws."""
        if cfg.explicit_random:
            return np.broadcast_to(explicit[name], shape)
        return _bits(stream_key, shape)

    def rounded_operand(x: np.ndarray, fmt, scale, stream: tuple[str, object]) -> np.ndarray:
        with np.errstate(all="ignore"):
            if scale is not None:
                values = x.astype(work) / np.asarray(scale).astype(work)
            elif fmt is None:
                values = x.astype(work)
            else:
                values = x  # rounded once, from its own value
        if fmt is None:
            return values.astype(np.float64)
        random = stream_bits(*stream, x.shape) if cfg.rounding == "stochastic" else None
        q = np.empty(x.shape, np.float64)
        for index in np.ndindex(x.shape):
            r = int(random[index]) if random is not None else None
            q[index] = reference.round_scalar(values[index], fmt, random=r, **cfg.rounding_options())
        return q

    qa = rounded_operand(a_np, cfg.lhs, lhs_scale, ("lhs", keys[KEY_LHS]))
    qb = rounded_operand(b_np, cfg.rhs, rhs_scale, ("rhs", keys[KEY_RHS]))

    out_shape = g.out_shape
    contract_shape = tuple(a_np.shape[d] for d in g.lhs_contract)
    size = math.prod(contract_shape)
    chunk = every if every is not None else max(size, 1)
    chunks = -(-size // chunk)
    acc_bits = None
    if cfg.accumulate_stochastic and cfg.explicit_random:
        acc_bits = list(np.broadcast_to(explicit["accumulate"], (chunks, *out_shape)))
    elif cfg.accumulate_stochastic:
        words = chunk_key_words(keys[KEY_ACC], chunks)
        acc_bits = [_bits(words[j], out_shape) for j in range(chunks)]
    out_bits = None
    if cfg.out is not None and cfg.rounding == "stochastic":
        out_bits = stream_bits("out", keys[KEY_OUT], out_shape)
    scale = None
    with np.errstate(all="ignore"):
        if lhs_scale is not None and rhs_scale is not None:
            scale = np.asarray(lhs_scale).astype(work) * np.asarray(rhs_scale).astype(work)
        elif lhs_scale is not None or rhs_scale is not None:
            scale = np.asarray(lhs_scale if lhs_scale is not None else rhs_scale).astype(work)

    result_values = np.empty(out_shape, np.float64)
    nb, nl = len(g.lhs_batch), len(g.lhs_free)
    for out_index in np.ndindex(out_shape):
        batch, l_free, r_free = out_index[:nb], out_index[nb : nb + nl], out_index[nb + nl :]
        terms = []
        for c_index in np.ndindex(contract_shape):  # row-major over the contracting dimensions, in order
            li, ri = [0] * a_np.ndim, [0] * b_np.ndim
            placement = (
                (g.lhs_batch, batch, li), (g.lhs_free, l_free, li), (g.lhs_contract, c_index, li),
                (g.rhs_batch, batch, ri), (g.rhs_free, r_free, ri), (g.rhs_contract, c_index, ri),
            )  # fmt: skip
            for dims, values, target in placement:
                for d, v in zip(dims, values):
                    target[d] = v
            terms.append((float(qa[tuple(li)]), float(qb[tuple(ri)])))
        acc = 0.0
        for j in range(chunks):
            if cfg.tensor_core is not None:  # that hardware's sum (exact in W: 14 significant bits)
                chunk_sum = reference.round_scalar(
                    _tensor_core_sum(terms[j * chunk : (j + 1) * chunk], cfg.tensor_core), work_fmt
                )
            else:
                chunk_sum = reference.round_scalar(_exact_sum(terms[j * chunk : (j + 1) * chunk]), work_fmt)
            if every is None:
                acc = chunk_sum
            elif acc_bits is not None:
                odd = reference.round_scalar(_add(acc, chunk_sum), work_fmt, "to_odd")
                acc = reference.round_scalar(
                    odd, cfg.accumulate, random=int(acc_bits[j][out_index]), **cfg.rounding_options("stochastic")
                )
            else:
                acc = reference.round_scalar(
                    _add(acc, chunk_sum), cfg.accumulate, **cfg.rounding_options(cfg.accumulate_rounding)
                )
        if every is None and chunks == 0:
            acc = 0.0
        with np.errstate(all="ignore"):
            y = float(work.type(acc) * scale) if scale is not None else acc
        if scale is not None and acc == 0 and np.isinf(scale):  # 0 * inf: the true product is zero
            y = float(work.type(acc))
        if cfg.out is not None:
            r = int(out_bits[out_index]) if out_bits is not None else None
            y = reference.round_scalar(y, cfg.out, random=r, **cfg.rounding_options())
        result_values[out_index] = y
    return result_values.astype(cfg.result)
