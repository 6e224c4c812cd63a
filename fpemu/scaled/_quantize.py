"""The arguments of scaled quantization, and `quantize_dequantize`.

`prepare` checks the arguments (through `fpemu._args`) into a `Config`; the jitted computations
(`fpemu._scaled.cores`: `quantize_ste`, which `BlockArray.from_array` wraps, and `qdq_jit`) run on
it. `quantize_dequantize` is the fused simulation path.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from fpemu._args import INPUT_DTYPES, axis_arg, bool_arg, int_arg, random_values_arg, rounding_arg
from fpemu._core.format import Format
from fpemu._core.modes import Rounding, Saturation, StochasticVariant
from fpemu._ops.rounding_spec import rounding_spec
from fpemu._scaled import core as _core
from fpemu._scaled import layout as _layout
from fpemu._scaled.block_format import BlockFormat, BlockFormatLike
from fpemu._scaled.cores import Config, config, qdq_jit, with_overrides
from fpemu.deprecation import renamed_keyword

F32 = jnp.float32

#: The input dtypes of the scaled formats: fpemu's without float64 (the scaled arithmetic is float32,
#: and rounding a float64 input to float32 first would be a silent second rounding).
SCALED_INPUT_DTYPES: tuple[str, ...] = tuple(d for d in INPUT_DTYPES if d != "float64")


class _Default:
    def __repr__(self) -> str:
        return "<default: -1 for block block formats, None otherwise>"


DEFAULT_AXIS: Any = _Default()


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
    block_format: BlockFormatLike,
    axis: Any,
    rounding: Any,
    key: Any,
    random_bits: Any,
    pad: Any,
    overrides: dict[str, Any],
    *,
    stochastic_variant: Any = "floor",
    random: Any = None,
) -> tuple[jax.Array, Config]:
    """Check the arguments of `BlockArray.from_array` / `quantize_dequantize`; errors name the argument.

    ``random`` only says whether explicit random bits were passed (`prepare_random` checks them)."""
    block_format = with_overrides(block_format, overrides)
    x = _check_input(x)
    if axis is DEFAULT_AXIS:
        axis = -1 if block_format.block_size is not None else None
    if axis is None:
        if block_format.block_size is not None:
            raise ValueError(
                f"block format {block_format.name} has blocks of {block_format.block_size} along an axis: axis must be an int, not None"
            )
    else:
        axis = axis_arg(axis, x.ndim, of=f"x of shape {x.shape}")
    rounding = rounding_arg(rounding)
    if rounding not in block_format.allowed_roundings:  # a block format's restriction, with its reason
        why = (
            " (float-scale block formats multiply by a float32 encode scale; the directed modes would depend on "
            "how the backend flushes products below 2**-126)"
            if not block_format.is_pow2
            else ""
        )
        raise ValueError(
            f"rounding must be one of {', '.join(block_format.allowed_roundings)} for block format {block_format.name}, "
            f"got {rounding!r}{why}"
        )
    spec = rounding_spec(
        block_format.element, rounding, block_format.saturate, True, key, random_bits, random=random,
        stochastic_variant=stochastic_variant,
    )  # fmt: skip
    pad = bool_arg(pad, "pad")
    if axis is not None and block_format.block_size is not None and x.shape[axis] % block_format.block_size and not pad:
        raise ValueError(
            f"x.shape[{axis}]={x.shape[axis]} is not a multiple of block_size={block_format.block_size} "
            f"(block format {block_format.name}); pass pad=True to let the last block be shorter (as if padded with "
            "zeros, which do not change its amax), or pad/slice x yourself"
        )
    variant = cast(StochasticVariant, spec.stochastic_variant)
    return x, config(
        block_format, axis, rounding, spec.random_bits, stochastic_variant=variant, explicit_random=spec.explicit_random
    )


def prepare_random(key: Any, random: Any, x: jax.Array, cfg: Config) -> Any:
    """The source of the elements' random bits, passed to the jitted computation: ``key``, or the
    explicit bits ``random`` checked against ``x``'s shape (integers in ``[0, 2**random_bits)``)."""
    if not cfg.explicit_random:
        return key
    assert cfg.random_bits is not None  # explicit bits: stochastic rounding
    return random_values_arg(random, cfg.random_bits, tuple(x.shape))


def prepare_scale(scale: ArrayLike | None, x: jax.Array, cfg: Config) -> jax.Array | None:
    """A given decode scale, as float32 broadcast to the group shape; checked where concrete."""
    if scale is None:
        return None
    block_format = cfg.block_format
    if block_format.scale_kind == "narrow":
        raise ValueError(
            f"scale= is not supported for block format {block_format.name}: its block scales come from the data "
            "(a two-level block format); use a single-level block format"
        )
    layout = cfg.layout()
    shape = _layout.group_shape(x.shape, layout)
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
        if block_format.is_pow2:
            if np.any(np.frexp(v)[0] != 0.5):
                raise ValueError(
                    f"block format {block_format.name} has power-of-two scales: scale must hold powers of two"
                )
            lo, hi = block_format.scale_format.emin, block_format.scale_format.emax
            e = np.frexp(v)[1] - 1
            if e.min() < lo or e.max() > hi:
                raise ValueError(f"scale exponents must lie in [{lo}, {hi}] for {block_format.scale_format.name}")
    return s


# -- the arguments of BlockArray.from_codes / from_packed ----------------------------------------


def storage_codes(codes: ArrayLike, fmt: Format) -> ArrayLike:
    """``codes`` as `fpemu.decode` takes them: signed integers of a two's-complement element become its
    unsigned codes (out-of-range ones are refused when concrete, or made invalid codes, which decode to
    NaN); everything else is checked by `fpemu.decode`."""
    if not fmt.twos_complement:
        return codes
    c = codes if isinstance(codes, jax.Array) else np.asarray(codes)
    if not np.issubdtype(c.dtype, np.signedinteger):
        return codes
    half = fmt.num_codes // 2
    if not isinstance(c, jax.core.Tracer) and c.size:
        low, high = int(c.min()), int(c.max())
        if low < -half or high >= half:
            raise ValueError(
                f"codes given as signed integers hold the two's-complement integers k of {fmt.name} and must lie in "
                f"[{-half}, {half}), got {low if low < -half else high} (pass unsigned codes for raw bits)"
            )
    k = jnp.asarray(c).astype(jnp.int32)
    return jnp.where(k < -half, fmt.num_codes, jnp.where(k < 0, k + fmt.num_codes, k))


def storage_axis(axis: object, ndim: int, block_format: BlockFormat) -> int | None:
    """The axis of `from_codes`, non-negative (or None), checked as `from_array` checks it."""
    if axis is DEFAULT_AXIS:
        axis = -1 if block_format.block_size is not None and ndim else None
    if axis is None:
        if block_format.block_size is not None:
            raise ValueError(
                f"block format {block_format.name} has blocks of {block_format.block_size} along an axis: axis must be an int, not None"
            )
        return None
    return axis_arg(axis, ndim, of=f"codes of rank {ndim}")


def shape_arg(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape must be a tuple of ints, got {type(shape).__name__} {shape!r}")
    return tuple(int_arg(n, f"shape[{i}]", minimum=0) for i, n in enumerate(shape))


def _concrete(a: Any) -> np.ndarray | None:
    return None if isinstance(a, jax.core.Tracer) else np.asarray(a)


def scale_leaf_arg(scale: ArrayLike, block_format: BlockFormat, shape: tuple[int, ...]) -> jax.Array:
    """The scale leaf of `from_codes`: the scale format's storage type, exactly ``shape``."""
    if scale is None:
        raise TypeError(f"scale must be the scale leaf of shape {shape}, got None")
    s = scale if isinstance(scale, jax.Array) else np.asarray(scale)
    if s.ndim == 0 and all(n == 1 for n in shape):
        s = s.reshape(shape)
    if tuple(s.shape) != shape:
        raise ValueError(
            f"scale must have shape {shape} (one scale per group of block format {block_format.name}: the codes' shape with the "
            f"axis holding the number of groups), got {tuple(s.shape)}"
        )
    s_fmt = block_format.scale_format
    if block_format.scale_kind != "fp32":  # E8M0 / E4M3 codes
        if not np.issubdtype(s.dtype, np.integer):
            raise TypeError(
                f"scale of block format {block_format.name} must hold uint8 {s_fmt.name} codes (fpemu.encode(s, {s_fmt.name!r})), "
                f"got dtype {np.dtype(s.dtype).name}"
            )
        host = _concrete(s)
        if host is not None and host.size and (int(host.min()) < 0 or int(host.max()) >= s_fmt.num_codes):
            bad = int(host.min()) if int(host.min()) < 0 else int(host.max())
            raise ValueError(f"scale codes must lie in [0, {s_fmt.num_codes}) for {s_fmt.name}, got {bad}")
        s = jnp.asarray(s)
        if np.dtype(s.dtype) != s_fmt.code_dtype:  # under jit: out-of-range codes become the NaN scale
            invalid = (s < 0) | (s >= s_fmt.num_codes)
            s = jnp.where(invalid, _core.nan_scale_leaf(block_format, (), s_fmt.code_dtype), s.astype(s_fmt.code_dtype))
        return s
    if not np.issubdtype(s.dtype, np.floating):
        raise TypeError(
            f"scale of block format {block_format.name} must hold float32 decode scales, got dtype {np.dtype(s.dtype).name}"
        )
    host = _concrete(s)
    if np.dtype(s.dtype) == np.float64:
        if host is None:
            raise TypeError(
                f"scale of block format {block_format.name} must be float32 (a traced float64 cannot be checked)"
            )
        if not np.array_equal(host.astype(np.float32).astype(np.float64), host, equal_nan=True):
            raise ValueError(
                f"scale must hold float32 values; the float64 scale of block format {block_format.name} is not exact"
            )
    s32 = jnp.asarray(s).astype(F32)
    host = _concrete(s32)
    if host is not None:
        ok = np.isnan(host) | ((host > 0) & np.isfinite(host))
        if block_format.is_pow2:
            ok &= np.isnan(host) | ((np.frexp(host)[0] == 0.5) & (host >= 2.0**-126))
        if not ok.all():
            need = "NaN or positive normal powers of two" if block_format.is_pow2 else "NaN or positive and finite"
            raise ValueError(
                f"scale values of block format {block_format.name} must be {need}, got {float(host[~ok].ravel()[0])!r}"
            )
    return s32


def global_scale_arg(global_scale: ArrayLike | None, block_format: BlockFormat, ndim: int) -> jax.Array | None:
    if not block_format.global_scale:
        if global_scale is not None:
            raise ValueError(f"block format {block_format.name} has no tensor scale: global_scale must be None")
        return None
    if global_scale is None:
        raise ValueError(
            f"block format {block_format.name} has a float32 tensor scale: pass global_scale (BlockArray.global_scale)"
        )
    g = global_scale if isinstance(global_scale, jax.Array) else np.asarray(global_scale)
    if not np.issubdtype(g.dtype, np.floating) or np.dtype(g.dtype) == np.float64 and _concrete(g) is None:
        raise TypeError(f"global_scale must be a float32 array, got dtype {np.dtype(g.dtype).name}")
    if g.ndim == 0:
        g = g.reshape((1,) * ndim)
    if tuple(g.shape) != (1,) * ndim:
        raise ValueError(f"global_scale must have shape {(1,) * ndim} (one per tensor), got {tuple(g.shape)}")
    g32 = jnp.asarray(g).astype(F32)
    host = _concrete(g32)
    if host is not None and not (np.all(host > 0) and np.all(np.isfinite(host))):
        raise ValueError(f"global_scale must be positive and finite, got {float(host.ravel()[0])!r}")
    if host is not None and np.dtype(g.dtype) == np.float64 and not np.array_equal(host, np.asarray(g)):
        raise ValueError("global_scale must hold a float32 value; the float64 value given is not exact")
    return g32


@renamed_keyword("recipe", "block_format", "fpemu.scaled.quantize_dequantize")
def quantize_dequantize(
    x: jax.Array | np.ndarray,
    block_format: BlockFormatLike,
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
    saturate: Saturation | None = None,
    stochastic_variant: StochasticVariant = "floor",
    random: ArrayLike | None = None,
    tile_axis: int | None = None,
) -> jax.Array:
    """``BlockArray.from_array(x, block_format, ...).dequantize()`` in one fused computation, in ``x``'s dtype.

    The simulation path: what a model computes with when its tensors are stored in the block format's
    format. Same arguments, same special values and the same bits as `BlockArray.from_array` then
    `BlockArray.dequantize` (a group holding NaN or ±inf dequantizes to NaN in every element, an
    all-zero group to zeros). The gradient is the identity (straight-through estimator), exactly.
    ``stochastic_variant`` is `fpemu.quantize`'s, for ``rounding="stochastic"`` of the elements;
    ``random`` (instead of ``key``) gives the elements' random bits, as `BlockArray.from_array` takes them.
    ``tile_axis`` (here only, not in `BlockArray`) makes each group a square tile: ``block_size``
    elements along ``axis`` times ``block_size`` along ``tile_axis`` (NVFP4's 16 x 16 weight blocks),
    one scale per tile, the last tiles shorter with ``pad=True``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from fpemu import scaled
      >>> x = jnp.array([0.1, -0.35, 0.8, 2.0])
      >>> scaled.quantize_dequantize(x, "nvfp4", pad=True).tolist()   # E2M1 grid times 2/6
      [0.1666666716337204, -0.3333333432674408, 0.6666666865348816, 2.0]
      >>> jax.grad(lambda v: scaled.quantize_dequantize(v, "mxfp4", pad=True).sum())(x).tolist()
      [1.0, 1.0, 1.0, 1.0]
      >>> v = jnp.full((32,), 1.1875)  # scale 2**-2: 4.75 lies 3/8 of a step above 4 on the E2M1 grid
      >>> [sorted(set(scaled.quantize_dequantize(v, "mxfp4", rounding="stochastic", key=jax.random.key(0),
      ...         random_bits=1, stochastic_variant=variant).tolist())) for variant in ("floor", "nearest_even")]
      [[1.0], [1.0, 1.5]]
    """
    return checked_call(qdq_jit, x, block_format, locals())


def _tile_axis_arg(tile_axis: Any, x: jax.Array, cfg: Config, pad: bool) -> int:
    """``tile_axis`` checked against ``x`` and the block format, non-negative."""
    block = cfg.block_format.block_size
    if block is None or cfg.axis is None:
        raise ValueError(
            f"tile_axis is for block formats with blocks along an axis (square tiles of block_size), not {cfg.block_format.name}"
        )
    t = axis_arg(tile_axis, x.ndim, "tile_axis", of=f"x of shape {x.shape}")
    if t == cfg.axis:
        raise ValueError(f"tile_axis={tile_axis} must be an axis of x other than axis={cfg.axis} (the tiles' sides)")
    if x.shape[t] % block and not pad:
        raise ValueError(
            f"x.shape[{t}]={x.shape[t]} (tile_axis) is not a multiple of block_size={block} (block format "
            f"{cfg.block_format.name}); pass pad=True to let the last tiles be shorter (as if padded with zeros)"
        )
    return t


def arguments_of_quantize_dequantize(x: Any, block_format: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Every argument of `quantize_dequantize` by name, for a function that takes the same ones as
    ``**options`` (`quantize_dequantize_split`): one signature, whose defaults fill the rest. An unknown
    keyword is a TypeError that names it."""
    bound = _SIGNATURE.bind(x, block_format, **options)
    bound.apply_defaults()
    return dict(bound.arguments)


def checked_call(jitted: Any, x: Any, block_format: BlockFormatLike, arguments: dict[str, Any]) -> Any:
    """``jitted(x, random source, scale, Config)`` with the arguments of `quantize_dequantize`
    (``arguments``: all of them by name) checked by `prepare`, `prepare_random` and `prepare_scale`."""
    a = arguments
    overrides = {k: a[k] for k in ("scale_rule", "block_size", "margin", "saturate")}
    x, cfg = prepare(
        x, block_format, a["axis"], a["rounding"], a["key"], a["random_bits"], a["pad"], overrides,
        stochastic_variant=a["stochastic_variant"], random=a["random"],
    )  # fmt: skip
    if a["tile_axis"] is not None:
        cfg = dataclasses.replace(cfg, tile_axis=_tile_axis_arg(a["tile_axis"], x, cfg, a["pad"]))
    return jitted(x, prepare_random(a["key"], a["random"], x, cfg), prepare_scale(a["scale"], x, cfg), cfg)


_SIGNATURE = inspect.signature(quantize_dequantize)
