"""The rule table of `fpemu.emulate`: which primitive is handled how, by name.

The bottom of the emulate layer, over the primitive catalogue (`fpemu._jax.primitives`, the one
table of JAX's primitives that `emulate` and `scalify` both read): the names of each kind (so that
`fpemu.Policy` can check ``overrides`` without loading a rule), and ``RULES``, the table that the rule
modules fill with `register` when they are imported (`fpemu._emulate.transform` imports them all).
`register` refuses a rule under another kind than the catalogue's. A rule takes the interpreter's
context, the equation and its input values, and returns the output values (always a list).

Kinds (`fpemu._jax.primitives.EMULATE_KINDS`), listed in docs/emulate.md:

- ``rounded``: bind, then round every floating-point result to the policy's format for the
  primitive (its override, else ``default``).
- ``exact``: bind; no rounding. Data movement, selection and sign changes return values that are
  already among their inputs (or their negations), so values of a format stay values of it. Where
  that fails the rule rounds: ``abs`` and ``sign`` of complex data (a new modulus, a new unit
  number), and ``neg`` / ``abs`` into a format that lacks the result (`SIGN_CHANGES`).
- ``dot``/``conv``: `fpemu.dot_general` / `fpemu.conv_general_dilated` under the policy's
  `DotPolicy`; without one, the program's own dot on operands rounded to the format.
- ``convert``: ``convert_element_type``, which rounds only when it creates new values.
- ``inline``: ``closed_call``, ``eval_jaxpr``, ``composite``...: the body is interpreted in place.
- ``call``: nested ``jit``: ``jax.jit`` around the emulated body (cached), keeping jit boundaries.
- ``control``: ``cond``, ``while``, ``scan``, ``custom_jvp_call``, ``custom_vjp_call``,
  ``custom_linear_solve``, ``remat2`` (``jax.checkpoint``), ``shard_map``: rebuilt with the public
  combinator around an emulated body.
- ``bound``: no floating-point result (comparisons, integer and bit operations, PRNG keys, effects
  without results): bound unchanged.
- ``unsupported`` and ``kernel``: no rule.

A primitive without a rule (``unsupported``, ``kernel``, or one the catalogue does not list, such as a
user's own) whose outputs are all non-float and that has no sub-jaxpr is bound unchanged. Any other
raises ``NotImplementedError`` naming it, unless the policy says ``passthrough_unknown=True``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fpemu._jax.primitives import check_kind, names_of

# A rule: (context, equation, input values) -> output values. The context is
# `fpemu._emulate.interpreter.Context`, one layer up, hence ``Any`` here.
Rule = Callable[[Any, Any, list], list]

ROUNDED = names_of("emulate", "rounded")
EXACT = names_of("emulate", "exact")

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
    "stack", "split", "unstack", "tile", "select_n",
))  # fmt: skip

# kind -> the primitive names it handles, for the kinds that have rules (every name has exactly one kind)
PRIMITIVES: dict[str, tuple[str, ...]] = {
    kind: names_of("emulate", kind)
    for kind in ("rounded", "exact", "dot", "conv", "convert", "inline", "call", "control", "bound")
}
KINDS = tuple(PRIMITIVES)

#: Primitive names whose results `emulate` rounds: the valid keys of ``Policy.overrides``.
ROUNDED_PRIMITIVES: frozenset[str] = frozenset(names_of("emulate", "rounded", "dot", "conv", "convert"))


@dataclasses.dataclass(frozen=True)
class RuleEntry:
    rule: Rule
    kind: str


RULES: dict[str, RuleEntry] = {}


def register(*names: str, kind: str) -> Callable[[Rule], Rule]:
    """Register ``rule`` for the primitives ``names``, each listed under ``kind`` (decorator)."""
    if kind not in PRIMITIVES:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    for name in names:
        check_kind("emulate", name, kind)

    def decorate(rule: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"primitive {name!r} already has an emulate rule ({RULES[name].kind})")
            RULES[name] = RuleEntry(rule, kind)
        return rule

    return decorate
