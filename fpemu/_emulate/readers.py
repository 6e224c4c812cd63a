"""Which equations of a jaxpr read a value: the values that one loop alone reads (`read_in_one_loop`).

`fpemu._emulate.interpreter.Context.cut_chain` leaves such a value uncut: a reduction or an exponential
reads its operand in one loop of its own, so XLA computes the value once without a cut.
"""

from __future__ import annotations

from typing import Any

from fpemu._jax.compat import Jaxpr, Literal

#: Primitives that read their operand in one loop of their own, whose result XLA does not compute again in each of
#: its readers (reductions; exponentials, logarithms and sigmoids, which XLA counts as expensive). A dot is not
#: one here: a recipe GEMM materializes the chain links it reads anyway, and reads a cut one as it is.
READ_IN_ONE_LOOP = frozenset((
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "exp", "exp2", "expm1", "log",
    "log1p", "tanh", "logistic",
))  # fmt: skip


def read_in_one_loop(jaxpr: Jaxpr) -> set[Any]:
    """The variables of ``jaxpr`` that exactly one of its equations reads, one of `READ_IN_ONE_LOOP`, once (not
    an output of the jaxpr, which its caller reads too)."""
    readers: dict[Any, list[Any]] = {}
    for eqn in jaxpr.eqns:
        for var in eqn.invars:
            if not isinstance(var, Literal):
                readers.setdefault(var, []).append(eqn)
    outputs = {var for var in jaxpr.outvars if not isinstance(var, Literal)}
    return {
        var
        for var, eqns in readers.items()
        if len(eqns) == 1 and eqns[0].primitive.name in READ_IN_ONE_LOOP and var not in outputs
        and sum(v is var for v in eqns[0].invars) == 1
    }  # fmt: skip
