"""What the emulate tests count in a traced program: the calls of one named jitted function."""

from __future__ import annotations

from typing import Any


def named_calls(jaxpr: Any, name: str) -> int:
    """How many equations of ``jaxpr`` call the jitted function ``name`` (``_materialized``: a materialization;
    ``_quantize_ste``: a rounding), in its bodies too (not inside those calls)."""
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.params.get("name") == name:
            count += 1
            continue
        for value in eqn.params.values():
            for body in value if isinstance(value, (tuple, list)) else (value,):
                body = getattr(body, "jaxpr", body)  # a ClosedJaxpr's jaxpr
                if hasattr(body, "eqns"):
                    count += named_calls(body, name)
    return count
