"""The arguments and the jitted computations of scaled quantization, and `quantize_dequantize`.

`prepare` checks the arguments (through `fpemu._args`), `quantize_ste` computes a `ScaledArray`'s
leaves with its straight-through gradient (`ScaledArray.from_array` wraps them), and
`quantize_dequantize` is the fused simulation path.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from fpemu._args import INPUT_DTYPES, bool_arg, int_arg, rounding_arg
from fpemu._core.modes import Rounding
from fpemu._ops.quantize import rounding_spec
from fpemu.scaled import _core
from fpemu.scaled._recipes import Recipe, RecipeLike, get_recipe

F32 = jnp.float32

#: The input dtypes of the scaled formats: fpemu's without float64 (the scaled arithmetic is float32,
#: and rounding a float64 input to float32 first would be a silent second rounding).
SCALED_INPUT_DTYPES: tuple[str, ...] = tuple(d for d in INPUT_DTYPES if d != "float64")


class _Default:
    def __repr__(self) -> str:
        return "<default: -1 for block recipes, None otherwise>"


DEFAULT_AXIS: Any = _Default()


class Config(NamedTuple):
    """Validated static options (hashable: a jit static argument)."""

    recipe: Recipe
    axis: int | None  # non-negative
    rounding: Rounding
    random_bits: int | None


def _check_input(x: Any) -> jax.Array:
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        dtype = np.dtype(x.dtype)
        if dtype.name in SCALED_INPUT_DTYPES:
            return jnp.asarray(x)
        hint = " (convert it with .astype(np.float32) if that rounding is what you want)" if dtype.kind == "f" else ""
        raise TypeError(f"x must be a float16, bfloat16 or float32 array, got dtype {dtype.name}{hint}")
    raise TypeError(
        f"x must be a JAX or NumPy array of float16, bfloat16 or float32, got {type(x).__name__}; "
        "wrap lists with np.asarray(..., np.float32)"
    )


def prepare(
    x: Any,
    recipe: RecipeLike,
    axis: Any,
    rounding: Any,
    key: Any,
    random_bits: Any,
    pad: Any,
    overrides: dict[str, Any],
) -> tuple[jax.Array, Config]:
    """Check the arguments of `ScaledArray.from_array` / `quantize_dequantize`; errors name the argument."""
    recipe = get_recipe(recipe)
    changes = {k: v for k, v in overrides.items() if v is not None}
    if changes:
        label = ",".join(f"{k}={v}" for k, v in changes.items())
        recipe = dataclasses.replace(recipe, name=f"{recipe.name}[{label}]", **changes)
    x = _check_input(x)
    if axis is DEFAULT_AXIS:
        axis = -1 if recipe.block_size is not None else None
    if axis is None:
        if recipe.block_size is not None:
            raise ValueError(
                f"recipe {recipe.name} has blocks of {recipe.block_size} along an axis: axis must be an int, not None"
            )
    else:
        axis = int_arg(axis, "axis")
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"axis={axis} is out of range for x of shape {x.shape} (valid: {-x.ndim}..{x.ndim - 1})")
        axis %= x.ndim
    rounding = rounding_arg(rounding)
    if rounding not in recipe.allowed_roundings:  # a recipe's restriction, with its reason
        why = (
            " (float-scale recipes multiply by a float32 encode scale; the directed modes would depend on "
            "how the backend flushes products below 2**-126)"
            if not recipe.is_pow2
            else ""
        )
        raise ValueError(
            f"rounding must be one of {', '.join(recipe.allowed_roundings)} for recipe {recipe.name}, "
            f"got {rounding!r}{why}"
        )
    spec = rounding_spec(recipe.element, rounding, recipe.saturate, True, key, random_bits)
    pad = bool_arg(pad, "pad")
    if axis is not None and recipe.block_size is not None and x.shape[axis] % recipe.block_size and not pad:
        raise ValueError(
            f"x.shape[{axis}]={x.shape[axis]} is not a multiple of block_size={recipe.block_size} "
            f"(recipe {recipe.name}); pass pad=True to let the last block be shorter (as if padded with "
            "zeros, which do not change its amax), or pad/slice x yourself"
        )
    random_bits = spec.random_bits if rounding == "stochastic" else None
    return x, Config(recipe, axis, rounding, random_bits)


def prepare_scale(scale: ArrayLike | None, x: jax.Array, cfg: Config) -> jax.Array | None:
    """A given decode scale, as float32 broadcast to the group shape; checked where concrete."""
    if scale is None:
        return None
    recipe = cfg.recipe
    if recipe.scale_kind == "narrow":
        raise ValueError(
            f"scale= is not supported for recipe {recipe.name}: its block scales come from the data "
            "(a two-level recipe); use a single-level recipe"
        )
    layout = _core.Layout(cfg.axis, recipe.block_size)
    shape = _core.group_shape(x.shape, layout)
    s = jnp.asarray(scale)
    if s.dtype != F32:
        if not jnp.issubdtype(s.dtype, jnp.floating):
            raise TypeError(f"scale must be a float array, got dtype {s.dtype}")
        s = s.astype(F32)
    try:
        s = jnp.broadcast_to(s, shape)
    except ValueError:
        raise ValueError(f"scale of shape {s.shape} does not broadcast to the scale shape {shape}") from None
    if not isinstance(s, jax.core.Tracer) and s.size:
        v = np.asarray(s)
        if not (np.all(v >= 2.0**-126) and np.all(v <= 2.0**126)):
            raise ValueError("scale must hold positive normal float32 values in [2**-126, 2**126]")
        if recipe.is_pow2:
            if np.any(np.frexp(v)[0] != 0.5):
                raise ValueError(f"recipe {recipe.name} has power-of-two scales: scale must hold powers of two")
            lo, hi = recipe.scale_format.emin, recipe.scale_format.emax
            e = np.frexp(v)[1] - 1
            if e.min() < lo or e.max() > hi:
                raise ValueError(f"scale exponents must lie in [{lo}, {hi}] for {recipe.scale_format.name}")
    return s


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def quantize_ste(x, key, scale, cfg: Config):
    """(values, scale leaf, global scale leaf or None) of ``x``; the values' tangent is ``x``'s over
    the scale (see `ScaledArray`)."""
    layout = _core.Layout(cfg.axis, cfg.recipe.block_size)
    return _core.encode(
        x.astype(F32),
        cfg.recipe,
        layout,
        rounding=cfg.rounding,
        key=key,
        random_bits=cfg.random_bits,
        scale=scale,
    )


@quantize_ste.defjvp
def _quantize_jvp(cfg, primals, tangents):
    x, key, scale = primals
    x_dot = tangents[0]
    values, scale_leaf, global_leaf = quantize_ste(x, key, scale, cfg)
    layout = _core.Layout(cfg.axis, cfg.recipe.block_size)
    sg = _core.expand(_core.grad_scale(scale_leaf, global_leaf, cfg.recipe), layout, x.shape)
    # an optimization barrier keeps XLA from turning the division by a broadcast into an inexact
    # multiplication by the reciprocal: dequantize's tangent multiplies by the same sg, so that the
    # reverse-mode gradient of dequantize(quantize(x)) is exactly (g * sg) / sg = g for g = 1
    values_dot = x_dot.astype(F32) / lax.optimization_barrier(sg)
    return (values, scale_leaf, global_leaf), (
        values_dot,
        _core.zeros_tangent(scale_leaf),
        _core.zeros_tangent(global_leaf),
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _qdq_ste(x, key, scale, cfg: Config):
    layout = _core.Layout(cfg.axis, cfg.recipe.block_size)
    y = _core.quantize_dequantize(
        x.astype(F32),
        cfg.recipe,
        layout,
        rounding=cfg.rounding,
        key=key,
        random_bits=cfg.random_bits,
        scale=scale,
    )
    return y.astype(x.dtype)


@_qdq_ste.defjvp
def _qdq_jvp(cfg, primals, tangents):
    x, key, scale = primals
    return _qdq_ste(x, key, scale, cfg), tangents[0]  # straight through


qdq_jit = jax.jit(_qdq_ste, static_argnums=(3,))


def quantize_dequantize(
    x: jax.Array | np.ndarray,
    recipe: RecipeLike,
    *,
    axis: int | None = DEFAULT_AXIS,
    rounding: Rounding = "nearest_even",
    key: jax.Array | None = None,
    random_bits: int | None = None,
    scale: ArrayLike | None = None,
    pad: bool = False,
    scale_rule: str | None = None,
    block_size: int | None = None,
    margin: int | None = None,
    saturate: bool | None = None,
) -> jax.Array:
    """``ScaledArray.from_array(x, recipe, ...).dequantize()`` in one fused computation, in ``x``'s dtype.

    The simulation path: what a model computes with when its tensors are stored in the recipe's
    format. Same arguments, same special values and the same bits as `ScaledArray.from_array` then
    `ScaledArray.dequantize` (a group holding NaN or ±inf dequantizes to NaN in every element, an
    all-zero group to zeros). The gradient is the identity (straight-through estimator), exactly.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from fpemu import scaled
      >>> x = jnp.array([0.1, -0.35, 0.8, 2.0])
      >>> scaled.quantize_dequantize(x, "nvfp4", pad=True).tolist()   # E2M1 grid times 2/6
      [0.1666666716337204, -0.3333333432674408, 0.6666666865348816, 2.0]
      >>> jax.grad(lambda v: scaled.quantize_dequantize(v, "mxfp4", pad=True).sum())(x).tolist()
      [1.0, 1.0, 1.0, 1.0]
    """
    overrides = {"scale_rule": scale_rule, "block_size": block_size, "margin": margin, "saturate": saturate}
    x, cfg = prepare(x, recipe, axis, rounding, key, random_bits, pad, overrides)
    s = prepare_scale(scale, x, cfg)
    return qdq_jit(x, key, s, cfg)
