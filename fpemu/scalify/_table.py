"""The coverage table: how `scalify` treats each primitive (docs/scalify.md prints it)."""

from __future__ import annotations

from fpemu.scalify import _control, _primitives, _rules, _rules_select  # noqa: F401  (fill the registry)
from fpemu.scalify._registry import JAXPR_RULES, KINDS, find_registered_scaled_op

__all__ = ["rule_table"]

KIND_DOCS = {
    "rule": "a scale rule (its formula in the table of docs/scalify.md)",
    "same scale": "the data transformed, the scale unchanged",
    "max scale": "operands re-scaled to the largest scale",
    "data": "computed on the data: an unscaled result (a positive scale changes no order)",
    "unscaled values": "computed on the unscaled values: an unscaled result",
    "unscale": "fallback: unscale, compute, scale 1",
    "scale primitive": "fpemu.scalify.lax primitive",
    "inline": "body scalified in place",
    "call": "nested jit around the scalified body",
    "control": "combinator around the scalified body",
    "custom derivative": "scalified primal, original derivative rule (scalified)",
    "callback": "callback sees ScaledArrays",
}


def rule_table() -> dict[str, str]:
    """``{primitive name: kind}`` for every primitive `scalify` handles when an operand is scaled
    (kinds: ``KIND_DOCS``). User rules registered with ``register_scaled_op`` appear as ``"user"``."""
    table = dict(KINDS)
    for name in JAXPR_RULES:
        table.setdefault(name, "control")
    return dict(sorted(table.items()))


def has_rule(name: str) -> bool:
    return name in KINDS or find_registered_scaled_op(name)[0] is not None
