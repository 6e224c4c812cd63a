"""Rules of the plain primitives (no sub-jaxpr, no DotPolicy): ``rounded``, ``exact``, ``convert``, ``bound``.

The primitive names of each kind are listed in `fpemu._emulate.registry`; docs/emulate.md has the
table. Complex data is rounded by parts (`fpemu._emulate.rounding.round_to_format`).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import BIT_COPIES, EXACT, PRIMITIVES, ROUNDED, SIGN_CHANGES, register
from fpemu._emulate.rounding import component_dtype, is_complex, is_float, is_inexact


@register(*ROUNDED, kind="rounded")
def rounded(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind, then round every floating-point result to the policy's format for this primitive; an identity
    (`identity_operand`) of a value rounded to that format already is not rounded again."""
    kept = identity_operand(eqn, invals)
    if kept is None:
        return ctx.bind_and_round(eqn, invals)
    fmt = ctx.format_for()
    flush_safe = fmt is not None and survives_flush(fmt, eqn.outvars[0].aval.dtype)
    return ctx.bind_identity(eqn, invals, invals[kept], flush_safe)


def identity_operand(eqn: Any, invals: list) -> int | None:
    """The index of the input that ``eqn`` returns as it is, whatever its value (None if none): ``x ** 1``
    (``integer_pow``), ``x * 1``, ``1 * x``, ``x / 1``, ``x + 0``, ``0 + x`` and ``x - 0`` (``+0`` or ``-0``)
    of a real floating-point ``x``, the constant a literal of the program (not a traced or device array),
    and a ``reduce_sum`` over axes of size 1 (``0 + x``, or ``x`` where XLA makes it a reshape).
    Three values change, each into a value of every format that held the input: ``-0 + +0`` is ``+0``, a
    signalling NaN comes out quiet, and a backend that flushes subnormals (XLA:CPU) returns a subnormal as
    ±0 (`survives_flush`). Complex data is left out: ``(a + bj) * 1`` is NaN where ``b`` is infinite."""
    name = eqn.primitive.name
    if len(eqn.outvars) != 1 or not is_float(eqn.outvars[0].aval.dtype):
        return None
    if name == "integer_pow":
        return 0 if eqn.params["y"] == 1 else None
    if name == "reduce_sum":  # over axes of one element each (a gradient's sum over a broadcast's axis of size 1)
        shape = np.shape(invals[0])
        return 0 if all(shape[axis] == 1 for axis in eqn.params["axes"]) else None
    if len(invals) != 2:
        return None
    a, b = invals
    if name == "mul":
        return 0 if _constant_all(b, 1.0) else 1 if _constant_all(a, 1.0) else None
    if name == "div":
        return 0 if _constant_all(b, 1.0) else None
    if name == "add":
        return 0 if _constant_all(b, 0.0) else 1 if _constant_all(a, 0.0) else None
    if name == "sub":
        return 0 if _constant_all(b, 0.0) else None
    return None


def survives_flush(fmt: Format, dtype: Any) -> bool:
    """Whether every value of ``fmt`` held in ``dtype`` stays a value of it, rounded to it again, when the
    backend's arithmetic flushes ``dtype``'s subnormals to ±0 (XLA:CPU does): no value of ``fmt`` is a
    subnormal of ``dtype`` (E8M0's 2**-127 is one of float32), or ``fmt`` holds the zero of each sign."""
    if fmt.min_subnormal >= get_format(component_dtype(dtype)).min_normal:
        return True
    return fmt.has_zero and (fmt.has_negative_zero or not fmt.signed)


def _constant_all(value: Any, target: float) -> bool:
    """Whether ``value`` is a host constant (a Python or NumPy number or array) whose elements all equal
    ``target`` (``-0.0 == 0.0``)."""
    if not isinstance(value, (float, np.ndarray, np.generic)):
        return False
    array = np.asarray(value)
    return array.size > 0 and bool(np.all(array == target))


@register(*PRIMITIVES["bound"], kind="bound")
def bound(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged: no floating-point result (comparisons, integer and bit operations, PRNG keys,
    effects without results), so nothing to round."""
    return ctx.bind(eqn, invals)


@register(*(name for name in EXACT if name not in SIGN_CHANGES), kind="exact")
def exact(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged: the results are values of the inputs. Through data movement (`BIT_COPIES`) the
    interpreter also carries which values are known to be rounded already."""
    outvals = ctx.bind(eqn, invals)
    if eqn.primitive.name in BIT_COPIES:
        ctx.propagate_rounded(invals, outvals)
    return outvals


def leaves_format(primitive: str, dtype: Any, fmt: Format | None) -> bool:
    """Whether ``primitive`` (one of `SIGN_CHANGES`) applied to values of ``fmt`` held in ``dtype`` can
    return a value that is not one of ``fmt``: ``abs`` and ``sign`` of complex data (a new modulus, a
    new unit number); ``neg`` into a format without negative values, without -0 (fnuz, P3109, FP with
    no -0) or with an unpaired most negative value (OCP INT8, whose ``abs`` leaves it too). The sign of
    a real value (±1, ±0 or NaN) is a value of every format that holds that value."""
    if fmt is None or not is_inexact(dtype):
        return False
    if primitive == "neg":
        return not fmt.has_negative_zero
    if is_complex(dtype):
        return True
    return primitive == "abs" and fmt.twos_complement


@register(*SIGN_CHANGES, kind="exact")
def sign_change(ctx: Context, eqn: Any, invals: list) -> list:
    """Bind unchanged where the result is a value of the format (`leaves_format`), else bind and round."""
    if leaves_format(eqn.primitive.name, jnp.result_type(invals[0]), ctx.format_for()):
        return ctx.bind_and_round(eqn, invals)
    return ctx.bind(eqn, invals)


@register("convert_element_type", kind="convert")
def convert(ctx: Context, eqn: Any, invals: list) -> list:
    """Widening float casts are exact (no rounding). A narrowing float cast rounds once, from the wide
    value, to the policy's format when that format fits the narrow dtype (then the cast is exact), else
    the cast's own rounding is followed by the usual rounding. Casts from integers and bools create new
    values: their results are rounded. Complex dtypes count by their parts' dtype (float32 to complex64
    is exact; complex128 to complex64 or to float32, which keeps the real part, narrows)."""
    (x,) = invals
    new_dtype = eqn.params["new_dtype"]
    if not is_inexact(new_dtype):
        return ctx.bind(eqn, invals)
    if not is_inexact(x.dtype):
        return ctx.bind_and_round(eqn, invals)
    src, dst = get_format(component_dtype(x.dtype)), get_format(component_dtype(new_dtype))
    if fits(src, dst):
        return ctx.bind(eqn, invals)  # widening (or same type): exact
    fmt = ctx.format_for()
    if fmt is not None and fits(fmt, dst):
        return ctx.bind(eqn, [ctx.round_output(x, fmt=fmt)])  # one rounding, then an exact cast
    return ctx.bind_and_round(eqn, invals)
