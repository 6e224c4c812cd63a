"""What the emulate tests look for in a traced program: the bodies of an equation, and the calls of one named
jitted function."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def bodies(eqn: Any) -> Iterator[Any]:
    """The jaxprs in ``eqn``'s parameters (a ``jit``'s, a ``cond``'s branches, a ``scan``'s body...)."""
    for value in eqn.params.values():
        for body in value if isinstance(value, (tuple, list)) else (value,):
            body = getattr(body, "jaxpr", body)  # a ClosedJaxpr's jaxpr
            if hasattr(body, "eqns"):
                yield body


def named_calls(jaxpr: Any, name: str) -> int:
    """How many equations of ``jaxpr`` call the jitted function ``name`` (``_materialized``: a materialization;
    ``_quantize_ste``: a rounding), in its bodies too (not inside those calls)."""
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.params.get("name") == name:
            count += 1
        else:
            count += sum(named_calls(body, name) for body in bodies(eqn))
    return count
