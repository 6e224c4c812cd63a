"""The rule table of `fpemu.emulate`: which primitive is handled how, by name.

The bottom of the emulate layer: no fpemu import. It holds the kinds of rule, the static list of
primitive names of each kind (so that `fpemu.Policy` can check ``overrides`` without loading a
rule), and ``RULES``, the table that the rule modules fill with `register` when they are imported
(`fpemu._emulate.transform` imports them all). A rule takes the interpreter's context, the equation
and its input values, and returns the output values (always a list).

Kinds, listed in docs/emulate.md:

- ``rounded``: bind, then round every floating-point result to the policy's format for the
  primitive (its override, else ``default``).
- ``exact``: bind; no rounding. Data movement, selection and sign changes return values that are
  already among their inputs (or their negations), so values of a format stay values of it. Where
  that fails the rule rounds: ``abs`` and ``sign`` of complex data (a new modulus, a new unit
  number), and ``neg`` / ``abs`` into a format that lacks the result (`SIGN_CHANGES`).
- ``dot``/``conv``: `fpemu.dot_general` / `fpemu.conv_general_dilated` under the policy's
  `DotPolicy`; without one, the program's own dot on operands rounded to the format.
- ``convert``: ``convert_element_type``, which rounds only when it creates new values.
- ``inline``: ``closed_call``/``core_call``: the body is interpreted in place.
- ``call``: nested ``jit``: ``jax.jit`` around the emulated body (cached), keeping jit boundaries.
- ``control``: ``cond``, ``while``, ``scan``, ``custom_jvp_call``, ``custom_vjp_call``,
  ``custom_linear_solve``, ``remat2`` (``jax.checkpoint``), ``shard_map``: rebuilt with the public
  combinator around an emulated body.

A primitive without a rule whose outputs are all non-float and that has no sub-jaxpr (comparisons,
integer and bit operations, PRNG key operations, callbacks without results) is bound unchanged.
Any other primitive without a rule raises ``NotImplementedError`` naming it, unless the policy says
``passthrough_unknown=True``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

# A rule: (context, equation, input values) -> output values. The context is
# `fpemu._emulate.interpreter.Context`, one layer up, hence ``Any`` here.
Rule = Callable[[Any, Any, list], list]

ROUNDED = (
    # arithmetic
    "add", "add_any", "sub", "mul", "div", "rem", "pow", "integer_pow", "square", "sqrt", "rsqrt", "cbrt",
    "nextafter", "floor", "ceil", "round",
    # transcendental and special functions
    "exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma", "digamma",
    "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma", "zeta", "bessel_i0e",
    "bessel_i1e", "regularized_incomplete_beta",
    # reductions and scans: the result is rounded, partial sums are not (docs/emulate.md)
    "reduce_sum", "reduce_prod", "reduce", "cumsum", "cumprod", "cumlogsumexp", "reduce_window_sum",
    "reduce_window", "select_and_scatter_add", "scatter-add", "scatter-sub", "scatter-mul", "ragged_dot_general",
    # collectives that add
    "psum", "psum_invariant", "reduce_scatter",
    # new values from non-float data, reinterpretation, precision changes
    "iota", "bitcast_convert_type", "reduce_precision", "rng_uniform", "random_gamma", "real", "imag",
    # linear algebra: computed at the dtype's precision, results rounded
    "cholesky", "cholesky_update", "triangular_solve", "eigh", "eig", "svd", "qr", "householder_product",
    "geqrf", "geqp3", "ormqr", "lu", "schur", "hessenberg", "tridiagonal", "tridiagonal_solve",
    "symmetric_product", "fft",
    # host callbacks: the host function is not emulated, its results are rounded
    "pure_callback", "io_callback",
)  # fmt: skip

EXACT = (
    # sign and selection: the result is an input or its negation (the first three: see SIGN_CHANGES)
    "neg", "abs", "sign", "max", "min", "clamp", "select_n", "reduce_max", "reduce_min", "argmax", "argmin",
    "cummax", "cummin", "sort", "top_k", "approx_top_k", "reduce_window_max", "reduce_window_min",
    "select_and_gather_add", "scatter", "scatter-min", "scatter-max", "pmax", "pmin",
    # data movement
    "reshape", "broadcast_in_dim", "transpose", "squeeze", "slice", "dynamic_slice", "dynamic_update_slice",
    "gather", "concatenate", "stack", "pad", "rev", "split", "copy", "empty", "zeros_like", "complex", "conj",
    "all_gather", "all_gather_invariant", "all_to_all", "ppermute", "pbroadcast", "pvary",
    # identities and annotations
    "stop_gradient", "name", "optimization_barrier", "sharding_constraint", "device_put", "reshard",
    "layout_constraint",
)  # fmt: skip

#: The exact primitives whose results can leave the format: ``abs`` and ``sign`` of complex data compute
#: new values, and negation leaves a format without negative values, without -0 or with an unpaired
#: two's-complement minimum. Their rule rounds in those cases (`fpemu._emulate.rules_plain`).
SIGN_CHANGES = ("neg", "abs", "sign")

#: The exact primitives whose floating-point results are bit copies of floating-point inputs (data movement
#: and selection by a non-float predicate): their results are values of every format their inputs are values
#: of, on every backend (no arithmetic, so no flush of subnormals). The interpreter carries that knowledge
#: through them, so that an operand already rounded is not rounded again (`Context.round_operand`).
BIT_COPIES = frozenset((
    "reshape", "broadcast_in_dim", "transpose", "squeeze", "slice", "dynamic_slice", "rev", "copy", "concatenate",
    "stack", "split", "select_n",
))  # fmt: skip

CONTROL = (
    "cond", "while", "scan", "custom_jvp_call", "custom_vjp_call", "custom_linear_solve", "remat2", "checkpoint",
    "shard_map",
)  # fmt: skip

# kind -> the primitive names it handles (every name has exactly one kind)
PRIMITIVES: dict[str, tuple[str, ...]] = {
    "rounded": ROUNDED,
    "exact": EXACT,
    "dot": ("dot_general",),
    "conv": ("conv_general_dilated",),
    "convert": ("convert_element_type",),
    "inline": ("closed_call", "core_call"),
    "call": ("jit", "pjit"),
    "control": CONTROL,
}
KINDS = tuple(PRIMITIVES)

#: Primitive names whose results `emulate` rounds: the valid keys of ``Policy.overrides``.
ROUNDED_PRIMITIVES: frozenset[str] = frozenset(
    name for kind in ("rounded", "dot", "conv", "convert") for name in PRIMITIVES[kind]
)


@dataclasses.dataclass(frozen=True)
class RuleEntry:
    rule: Rule
    kind: str


RULES: dict[str, RuleEntry] = {}


def register(*names: str, kind: str) -> Callable[[Rule], Rule]:
    """Register ``rule`` for the primitives ``names``, each listed under ``kind`` (decorator)."""
    if kind not in PRIMITIVES:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    unlisted = [name for name in names if name not in PRIMITIVES[kind]]
    if unlisted:
        raise ValueError(f"primitives {unlisted} are not listed under the kind {kind!r} in PRIMITIVES")

    def decorate(rule: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"primitive {name!r} already has an emulate rule ({RULES[name].kind})")
            RULES[name] = RuleEntry(rule, kind)
        return rule

    return decorate
