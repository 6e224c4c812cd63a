"""The coverage table: how `scalify` treats each primitive (docs/scalify.md prints it)."""

from __future__ import annotations

from fpemu._jax.primitives import CATALOGUE
from fpemu.scalify import _control, _primitives, _rules, _rules_select  # noqa: F401  (fill the registry)
from fpemu.scalify._registry import _RULES, KINDS

__all__ = ["rule_table"]


def rule_table() -> dict[str, str]:
    """``{primitive name: kind}`` for every primitive `scalify` handles when an operand is scaled: JAX's
    primitives as the primitive catalogue (`fpemu._jax.primitives`) classifies them, fpemu's own scale
    primitives (``"scale primitive"``) and rules registered with ``register_scaled_op`` (``"user"``)."""
    table = {
        name: treatment.scalify
        for name, treatment in CATALOGUE.items()
        if treatment.scalify not in ("unsupported", "kernel")
    }
    table.update(KINDS)
    for name in _RULES:
        table.setdefault(name, "user")
    return dict(sorted(table.items()))
