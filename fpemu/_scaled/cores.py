"""The checked-once cores of scaled quantization: jitted computations on arguments already checked.

A `Config` holds the static options (a jit static argument). `quantize_ste` computes a
`fpemu.scaled.BlockArray`'s leaves, `qdq_jit` the fused quantize-dequantize and `split_core` the
same with the float32 per-tensor scale kept apart; each has its straight-through gradient.
`fpemu.scaled`'s public functions check their arguments (`fpemu/scaled/_quantize.py`'s `prepare`)
and call these; the training layer's operand quantizers, whose `Quantizer` was checked when it was
made, build their `Config` with `config` and call them directly. `scale_of_amax` is delayed
scaling's scale from an amax.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from fpemu._args import random_bits_arg
from fpemu._core.modes import Rounding, StochasticVariant
from fpemu._jax.elementwise import select
from fpemu._scaled import bits as _bits
from fpemu._scaled import core as _core
from fpemu._scaled import layout as _layout
from fpemu._scaled.bits import ABS, F32, INF, U32
from fpemu._scaled.block_format import BlockFormat, BlockFormatLike, block_format_arg
from fpemu._scaled.scale import float_encode_scale, pow2_exponent

__all__ = [
    "Config",
    "config",
    "core_options",
    "decode_scale_bits",
    "qdq_jit",
    "quantize_ste",
    "scale_of_amax",
    "split_core",
    "with_overrides",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Validated static options (hashable: a jit static argument); made by `config`."""

    block_format: BlockFormat
    axis: int | None  # non-negative
    rounding: Rounding
    random_bits: int | None
    stochastic_variant: StochasticVariant = "floor"  # of stochastic element rounding ("floor" otherwise)
    explicit_random: bool = False  # the random bits are given (`random=`), not drawn from a key
    tile_axis: int | None = None  # non-negative: groups are block x block tiles of (tile_axis, axis)

    def layout(self) -> _layout.Layout:
        return _layout.Layout(self.axis, self.block_format.block_size, self.tile_axis)


def config(
    block_format: BlockFormat,
    axis: int | None,
    rounding: Rounding,
    random_bits: int | None,
    tile_axis: int | None = None,
    *,
    stochastic_variant: StochasticVariant = "floor",
    explicit_random: bool = False,
) -> Config:
    """The `Config` of checked options (`fpemu.scaled`'s ``prepare`` checks them; a `Quantizer` was
    checked when it was made): non-negative axes, a rounding the block format allows, ``random_bits``
    of stochastic rounding (None: `fpemu._args.random_bits_arg`'s default; ignored otherwise)."""
    assert rounding in block_format.allowed_roundings, (rounding, block_format)
    bits = random_bits_arg(random_bits, True) if rounding == "stochastic" else None
    return Config(
        block_format=block_format, axis=axis, rounding=rounding, random_bits=bits,
        stochastic_variant=stochastic_variant, explicit_random=explicit_random, tile_axis=tile_axis,
    )  # fmt: skip


def with_overrides(block_format: BlockFormatLike, overrides: dict[str, Any]) -> BlockFormat:
    """``block_format`` (a name or the object) with the fields in ``overrides`` that are not None
    replaced, named for them (``"fp8_e4m3[margin=2]"``); `BlockFormat` checks the new values."""
    block_format = block_format_arg(block_format)
    changes = {k: v for k, v in overrides.items() if v is not None}
    if not changes:
        return block_format
    label = ",".join(f"{k}={v}" for k, v in changes.items())
    return dataclasses.replace(block_format, name=f"{block_format.name}[{label}]", **changes)


def core_options(stream: Any, scale: Any, cfg: Config) -> dict[str, Any]:
    """The keyword arguments of `_core`'s encode and quantize-dequantize for ``cfg``: its rounding, the
    given ``scale``, and the elements' random bits, ``random=`` or ``key=`` (``stream``)."""
    random = {"random": stream} if cfg.explicit_random else {"key": stream}
    options = dict(rounding=cfg.rounding, random_bits=cfg.random_bits, stochastic_variant=cfg.stochastic_variant)
    return {"key": None, **random, "scale": scale, **options}


def _run(engine: Any, x: jax.Array, key: Any, scale: Any, cfg: Config, probe: Any = None) -> Any:
    """``engine`` (`_core`'s encode, quantize-dequantize or its split form) on float32 ``x`` under ``cfg``;
    ``probe``: the array whose first element every materialization's predicate reads (None: each its
    own), so that XLA computes one predicate for all of them (`fpemu._ops.fusion.materialize`)."""
    return engine(x.astype(F32), cfg.block_format, cfg.layout(), **core_options(key, scale, cfg), probe=probe)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def quantize_ste(x, key, scale, cfg: Config, probe=None):
    """(values, scale leaf, global scale leaf or None) of ``x``; the values' tangent is ``x``'s over
    the scale (see `BlockArray`). ``key``: the key, or the explicit bits (`prepare_random`)."""
    return _run(_core.encode, x, key, scale, cfg, probe)


@quantize_ste.defjvp
def _quantize_jvp(cfg, primals, tangents):
    x, key, scale, probe = primals
    x_dot = tangents[0]
    values, scale_leaf, global_leaf = quantize_ste(x, key, scale, cfg, probe)
    layout = cfg.layout()
    sg = _layout.expand(_core.grad_scale(scale_leaf, global_leaf, cfg.block_format), layout, x.shape)
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
def _qdq_ste(x, key, scale, cfg: Config, probe=None):
    return _run(_core.quantize_dequantize, x, key, scale, cfg, probe).astype(x.dtype)


@_qdq_ste.defjvp
def _qdq_jvp(cfg, primals, tangents):
    x, key, scale, probe = primals
    return _qdq_ste(x, key, scale, cfg, probe), tangents[0]  # straight through


#: ``qdq_jit(x, key, scale, cfg, probe=None)``: `fpemu.scaled.quantize_dequantize` on checked arguments,
#: in ``x``'s dtype, with the straight-through gradient (``probe``: `_run`'s).
qdq_jit = jax.jit(_qdq_ste, static_argnums=(3,))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _split_ste(x, key, scale, cfg: Config, probe=None):
    return _run(_core.quantize_dequantize_split, x, key, scale, cfg, probe)


@_split_ste.defjvp
def _split_jvp(cfg, primals, tangents):
    x, key, scale, probe = primals
    blocks, t = _split_ste(x, key, scale, cfg, probe)
    x_dot = tangents[0].astype(F32)
    if t is None:
        return (blocks, t), (x_dot, None)
    # straight through the product blocks * t; the barrier on the broadcast scale keeps XLA from turning
    # the division into a multiplication by the reciprocal (as `quantize_ste`'s), so that g * t / t = g
    per_element = lax.optimization_barrier(jnp.broadcast_to(t, x_dot.shape))
    return (blocks, t), (x_dot / per_element, jnp.zeros_like(t))


#: ``split_core(x, key, scale, cfg, probe=None)``: `fpemu.scaled.quantize_dequantize_split` on checked
#: arguments (a float32 ``x`` and a `Config`; ``probe``: `_run`'s).
split_core = jax.jit(_split_ste, static_argnums=(3,))


def decode_scale_bits(amax: jax.Array, block_format: BlockFormat) -> jax.Array:
    """Bits of the float32 decode scale of a group whose amax has the positive finite bits ``amax``:
    the block format's rule and margin (power of two, or ``fl(1 / enc)``), as current scaling computes it."""
    if block_format.is_pow2:
        k, _ = pow2_exponent(amax, block_format)
        return _bits.scale_pow2_bits(k)
    enc, _ = float_encode_scale(amax, block_format)
    return _bits.to_bits(lax.div(F32(1), enc))


def scale_of_amax(amax: jax.Array, block_format: BlockFormat) -> jax.Array:
    """`fpemu.scaled.scale_from_amax` on checked arguments: a float32 ``amax`` and a single-level
    block format (its margin applied). NaN for a NaN or infinite amax, 1 for 0, the sign ignored."""
    bits = lax.bitwise_and(_bits.to_bits(amax), U32(ABS))  # exact
    scale = select(lax.ge(bits, U32(INF)), U32(_bits.NAN), decode_scale_bits(bits, block_format))
    return _bits.from_bits(select(lax.eq(bits, U32(0)), _bits.to_bits(F32(1)), scale))
