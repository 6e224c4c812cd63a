"""The rule registry of `scalify`, and what rules share: the interpretation state and scale rounding.

A *scaled rule* (jax-scalify's "scaled translation") takes the equation's operands (`ScaledArray`
where scaled, arrays otherwise) and the equation's parameters as keywords, and returns the
result (a list for primitives with several results). Rules are registered per primitive name.
A *jaxpr rule* (calls, control flow, custom derivatives) takes the interpreter's tracked values
and the equation itself.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive

from fpemu._engine.rng import hash_index
from fpemu._jax.primitives import check_kind, names_of
from fpemu.scalify._arith import is_numpy
from fpemu.scalify._config import get_scalify_config
from fpemu.scalify._pow2 import Pow2RoundMode, pow2_round

__all__ = [
    "ScaledPrimitiveType",
    "find_registered_scaled_op",
    "register_public",
    "register_scaled_lax_op",
    "register_scaled_op",
]


class ScaledPrimitiveType(enum.IntEnum):
    """When `scalify` applies a primitive's scaled rule.

    ``NEVER``: no rule. ``FORWARD`` (the default): when at least one operand is a `ScaledArray`
    (otherwise the primitive runs unchanged). ``ALWAYS_SCALE``: always (e.g. ``set_scaling``).
    """

    NEVER = 0
    FORWARD = 1
    ALWAYS_SCALE = 2


_RULES: dict[str, tuple[Callable, ScaledPrimitiveType]] = {}
JAXPR_RULES: dict[str, Callable] = {}
KINDS: dict[str, str] = {}  # primitive name -> kind of its registered rule


def primitive_name(prim: Any) -> str:
    if isinstance(prim, str):
        return prim
    if isinstance(prim, Primitive) or hasattr(prim, "name"):
        return prim.name
    raise TypeError(f"expected a JAX primitive or a primitive name, got {type(prim).__name__}")


def register_scaled_op(
    prim: Any, scaled_func: Callable, scaled_type: ScaledPrimitiveType = ScaledPrimitiveType.FORWARD
) -> None:
    """Register ``scaled_func`` as the scaled rule of the primitive ``prim`` (a primitive or its name).

    ``scaled_func(*operands, **params)`` gets `ScaledArray` operands (unscaled floating-point
    operands are promoted: broadcast scalars and static zeros get their own scale, other arrays
    scale 1) and the equation's parameters as keywords; it returns a `ScaledArray` or an array
    (a list of them for primitives with several results).

    Raises:
      KeyError: the primitive already has a scaled rule.
    """
    name = primitive_name(prim)
    if name in _RULES or name in JAXPR_RULES:
        raise KeyError(f"a scaled translation is already registered for the JAX primitive {name!r}")
    if not callable(scaled_func):
        raise TypeError(f"scaled_func must be callable, got {type(scaled_func).__name__}")
    _RULES[name] = (scaled_func, ScaledPrimitiveType(scaled_type))


def register_scaled_lax_op(scaled_func: Callable) -> Callable:
    """Decorator: register ``scaled_<name>`` as the rule of ``jax.lax.<name>_p``
    (``scaled_mul`` -> ``lax.mul_p``). Returns the function."""
    name = scaled_func.__name__.removeprefix("scaled_")
    prim = getattr(lax, f"{name}_p", None)
    if not isinstance(prim, Primitive):
        raise AttributeError(f"no jax.lax primitive {name}_p matches {scaled_func.__name__!r}")
    register_scaled_op(prim, scaled_func)
    return scaled_func


def find_registered_scaled_op(prim: Any) -> tuple[Callable | None, ScaledPrimitiveType]:
    """``(scaled op, type)`` registered for ``prim`` (a primitive or its name), or ``(None,
    ScaledPrimitiveType.NEVER)``.

    The op takes jax-scalify's calling form (``scaled_dot_general(lhs, rhs, dimension_numbers)``,
    ``scaled_concatenate(operands, dimension)``) and also the equation's parameters as keywords. A
    primitive that `scalify` computes by the unscale fallback (``exp``, ``sin``, ``cos``...) gets the
    fallback as its op: operands unscaled, the primitive computed, float results with scale 1.
    """
    name = primitive_name(prim)
    rule = _RULES.get(name)
    if name in PUBLIC:
        return PUBLIC[name], rule[1] if rule is not None else ScaledPrimitiveType.FORWARD
    if rule is not None:
        return rule
    if name in FALLBACK:
        return fallback_op(prim), ScaledPrimitiveType.FORWARD
    return None, ScaledPrimitiveType.NEVER


def registered_rule(name: str) -> tuple[Callable | None, ScaledPrimitiveType]:
    """The rule `scalify` applies to the primitive ``name`` (the equation's calling form)."""
    return _RULES.get(name, (None, ScaledPrimitiveType.NEVER))


# Scaled ops in jax-scalify's calling form, where it differs from the rule's (`find_registered_scaled_op`).
PUBLIC: dict[str, Callable] = {}
# The primitives computed by the unscale fallback.
FALLBACK = frozenset(names_of("scalify", "unscale"))


def register_public(*names: str) -> Callable:
    """Decorator: ``fn`` is the scaled op `find_registered_scaled_op` returns for these primitives."""

    def decorate(fn: Callable) -> Callable:
        for name in names:
            PUBLIC[name] = fn
        return fn

    return decorate


_FALLBACK_OP: list[Callable] = []  # `fpemu.scalify._rules_select.fallback_op`, registered there


def register_fallback_op(factory: Callable) -> Callable:
    """Decorator: ``factory(prim)`` makes the scaled op of a primitive of the unscale fallback."""
    _FALLBACK_OP[:] = [factory]
    return factory


def fallback_op(prim: Any) -> Callable:
    """The unscale fallback of ``prim`` (a primitive or its name) as a scaled op (jax-scalify's
    ``scaled_exp``, ``scaled_cos``...)."""
    return _FALLBACK_OP[0](prim)


#: The kind of fpemu's own primitives (`fpemu.scalify.lax.set_scaling`...), which the catalogue of
#: JAX's primitives does not list.
SCALE_PRIMITIVE = "scale primitive"


def _check(names: tuple[str, ...], kind: str) -> None:
    if kind != SCALE_PRIMITIVE:
        for name in names:
            check_kind("scalify", name, kind)


def register_rule(*names: str, kind: str, scaled_type: ScaledPrimitiveType = ScaledPrimitiveType.FORWARD):
    """Decorator for fpemu's own rules: register for every name under ``kind``, the kind the primitive
    catalogue (`fpemu._jax.primitives`) gives it, and record the kind."""
    _check(names, kind)

    def decorate(fn: Callable) -> Callable:
        for name in names:
            register_scaled_op(name, fn, scaled_type)
            KINDS[name] = kind
        return fn

    return decorate


def register_jaxpr_rule(*names: str, kind: str):
    """As `register_rule`, for a rule that takes the equation (calls, control flow, placement)."""
    _check(names, kind)

    def decorate(fn: Callable) -> Callable:
        for name in names:
            if name in _RULES or name in JAXPR_RULES:
                raise KeyError(f"a scaled translation is already registered for the JAX primitive {name!r}")
            JAXPR_RULES[name] = fn
            KINDS[name] = kind
        return fn

    return decorate


# -- the interpretation state: stochastic scale rounding -------------------------------------------


@dataclasses.dataclass
class State:
    """What one `scalify` call shares: the uint32[2] seeds of stochastic rounding and a site counter."""

    seeds: Any
    sites: int = 0

    def next_site(self) -> int:
        self.sites += 1
        return self.sites


STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar("fpemu_scalify_state", default=None)


def default_seeds(seed: int) -> np.ndarray:
    return np.array([seed, 0x9E3779B9], np.uint32)


def _stochastic_key(value: Any) -> jax.Array:
    """A uint32[2] key for one stochastic rounding: the call's seeds, the site, the value's bits."""
    state = STATE.get()
    seeds = default_seeds(get_scalify_config().seed) if state is None else state.seeds
    site = 0 if state is None else state.next_site()
    bits = lax.bitcast_convert_type(jnp.asarray(value).astype(jnp.float32), jnp.uint32)
    bits = bits.reshape(-1)[0] if bits.ndim else bits
    site_word = jnp.uint32(site * 0x85EBCA6B % 2**32)
    seeds = jnp.asarray(seeds, jnp.uint32)
    return jnp.stack([hash_index(seeds, lax.bitwise_xor(bits, site_word)), hash_index(seeds, lax.add(bits, site_word))])


def round_scale(value: Any) -> Any:
    """A computed scale rounded as the current `ScalifyConfig` says (NumPy values stay NumPy,
    except under ``STOCHASTIC``)."""
    mode = get_scalify_config().rounding_mode
    if mode != Pow2RoundMode.STOCHASTIC:
        return pow2_round(value, mode)
    return pow2_round(value, mode, key=_stochastic_key(value))


def round_static(value: Any) -> Any:
    """A static factor (``sqrt(K)`` of a matmul) rounded: ``UP`` up, ``NONE`` not at all, ``DOWN``
    and ``STOCHASTIC`` down (a constant has no error to average out)."""
    mode = get_scalify_config().rounding_mode
    if mode == Pow2RoundMode.STOCHASTIC:
        mode = Pow2RoundMode.DOWN
    value = pow2_round(value, mode)
    return np.asarray(value) if is_numpy(value) else value
