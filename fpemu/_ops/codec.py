"""Bit codecs: `encode` values to a format's integer codes, `decode` codes to values, `pack`/`unpack`
sub-byte codes densely into bytes."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import check_fits, float_array, format_arg, input_format, int_arg, is_host_float64
from fpemu._core.format import Format
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import get_format
from fpemu._engine import convert as _convert
from fpemu._jax.elementwise import pad_zeros, select
from fpemu._ops.rounding_spec import RoundingSpec, round_bits, rounding_spec, seeds_for


@functools.partial(jax.jit, static_argnums=(2,))
def _encode_jit(x: jax.Array, seeds: jax.Array, spec: RoundingSpec) -> jax.Array:
    return round_bits(x, seeds, spec, "dst_code").astype(spec.fmt.code_dtype)


def encode(
    x: Any,
    fmt: Any,
    *,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    key: jax.Array | None = None,
    random_bits: int | None = None,
    random: Any = None,
    stochastic_variant: StochasticVariant = "floor",
    exponent_ties: ExponentTies = "away",
) -> jax.Array:
    """Round ``x`` to ``fmt`` (exactly as `quantize` does) and return the integer codes.

    Codes are unsigned integers of the smallest sufficient type (``fmt.code_dtype``: uint8 up to 8
    bits, then uint16, uint32, uint64), laid out as ``sign | exponent | mantissa`` in the low bits
    (two's-complement formats, OCP INT8: the integer's two's-complement bits, -2.0 is ``0x80``).
    For float32 input and default options this equals ``x.astype(ml_dtype).view(uint)`` bit for bit.

    Special values: NaN gives the format's canonical quiet NaN code with the input's sign (``fnuz``
    and P3109 formats have one NaN, ``0x80`` signed, ``0xff`` unsigned; E8M0's is ``0xff``). A format
    with no NaN code (FP6, FP4) cannot hold NaN: like ml_dtypes, encode gives the zero code with the
    sign bit inverted (+NaN -> -0, -NaN -> +0), so the NaN is lost; two's-complement formats give
    the zero code. Use `quantize` to keep NaN visible. Infinities, overflow, signed zeros, subnormals
    and unsigned formats follow `quantize`.

    Args:
      x: float16, bfloat16, float32 or float64 array (or a Python float).
      fmt: format name, `Format` or dtype; its values must fit ``x``'s dtype.
      rounding, saturate, subnormals, key, random_bits, random, stochastic_variant, exponent_ties: as
        for `quantize`.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.encode(jnp.array([1.0, -6.0, 7.0, 0.25]), "e2m1fn").tolist()
      [2, 15, 7, 0]
    """
    spec = rounding_spec(
        fmt, rounding, saturate, subnormals, key, random_bits, random=random, stochastic_variant=stochastic_variant,
        exponent_ties=exponent_ties,
    )  # fmt: skip
    if is_host_float64(x):
        check_fits(spec.fmt, get_format("fp32"), name="the float64 input (x64 is disabled)")
        seeds = seeds_for(spec, key, random, np.shape(x))
        with jax.enable_x64(True):
            return _encode_jit(jnp.asarray(x, jnp.float64), seeds, spec)
    x = float_array(x)
    check_fits(spec.fmt, input_format(x.dtype))
    return _encode_jit(x, seeds_for(spec, key, random, x.shape), spec)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _decode_jit(codes: jax.Array, fmt: Format, out: Format) -> jax.Array:
    code = codes.dtype.type
    invalid = (
        lax.ge(codes, code(fmt.num_codes)) if fmt.bits < codes.dtype.itemsize * 8 else jnp.zeros(codes.shape, bool)
    )
    if jnp.issubdtype(codes.dtype, jnp.signedinteger):
        invalid = lax.bitwise_or(invalid, lax.lt(codes, code(0)))
    bits = _convert.widen(codes.astype(fmt.code_dtype), src=fmt, dst=out)
    bits = select(invalid, bits.dtype.type(out.nan_code), bits)
    return lax.bitcast_convert_type(bits.astype(out.code_dtype), out.dtype)  # type: ignore[arg-type]  # an input format (float16..float64) always has a dtype


def _code_range_error(low: int, high: int, fmt: Format, name: str) -> ValueError | None:
    """The error for codes whose extremes are ``low`` and ``high``, or None if they are in range."""
    if low < 0 or high >= fmt.num_codes:
        return ValueError(f"{name} must lie in [0, {fmt.num_codes}) for {fmt.name}, got {low if low < 0 else high}")
    return None


def _check_code_range(codes: Any, fmt: Format, name: str) -> None:
    """Eagerly reject codes outside the format's code space (skipped under jit: see `_check_traced_range`)."""
    if isinstance(codes, jax.core.Tracer) or not codes.size:
        return
    error = _code_range_error(int(codes.min()), int(codes.max()), fmt, name)
    if error is not None:
        raise error


def _raise_out_of_range(high: Any, *, fmt: Format, name: str, signed_width: int) -> None:
    """The host side of `_check_traced_range`: ``high`` is the largest code read as an unsigned
    integer (a negative code reads as a value of at least ``2**(signed_width - 1)``); under vmap it
    may be batched."""
    high = int(np.max(high))
    if signed_width and high >= 1 << (signed_width - 1):
        high -= 1 << signed_width  # the negative code itself
    error = _code_range_error(min(high, 0), max(high, 0), fmt, name)
    if error is not None:
        raise type(error)(
            f"{error} (fpemu.pack under jax.jit: checked when the computation ran, so JAX reports this as a "
            f"JaxRuntimeError; clip the codes with jnp.clip(codes, 0, {fmt.num_codes - 1}) or encode them with "
            "fpemu.encode first, or call pack on concrete codes to get this error at the call)"
        )


def _check_traced_range(codes: jax.Array, fmt: Format, name: str) -> None:
    """Under jit, check the codes' range when the computation runs: a `jax.debug.callback` receives
    the largest code (read as unsigned, so that a negative code counts as a large one: one
    reduction) and raises the eager ValueError, which JAX reports as a ``jax.errors.JaxRuntimeError``
    (a RuntimeError whose message holds the ValueError's) when the result is computed. Nothing is
    added where the dtype cannot hold an out-of-range code."""
    if not isinstance(codes, jax.core.Tracer):
        return
    width = codes.dtype.itemsize * 8
    signed = jnp.issubdtype(codes.dtype, jnp.signedinteger)
    if not signed and width <= fmt.bits:
        return
    unsigned = codes if not signed else lax.bitcast_convert_type(codes, jnp.dtype(f"uint{width}"))
    high = jnp.max(unsigned, initial=jnp.zeros((), unsigned.dtype))
    check = functools.partial(_raise_out_of_range, fmt=fmt, name=name, signed_width=width if signed else 0)
    jax.debug.callback(check, high)


def _integer_codes(codes: Any, fmt: Format, name: str) -> jax.Array:
    """Integer codes as a JAX array, their range checked on the host first where they are concrete.

    The check runs before the conversion: with x64 disabled, JAX would truncate 64-bit integers (a
    code of 2**32 would become 0) and Python ints beyond 64 bits cannot be converted at all.
    """
    if not isinstance(codes, jax.Array):
        try:
            host = np.asarray(codes)
        except (ValueError, TypeError) as e:
            raise TypeError(f"{name} must be an integer array, got {type(codes).__name__} ({e})") from None
        if host.dtype == object and all(isinstance(c, int) and not isinstance(c, bool) for c in host.ravel()):
            _check_code_range(np.asarray([min(host.ravel()), max(host.ravel())], object), fmt, name)
        if not np.issubdtype(host.dtype, np.integer):
            raise TypeError(f"{name} must be an integer array, got dtype {host.dtype}")
        _check_code_range(host, fmt, name)
        codes = host
    codes = jnp.asarray(codes)
    if not jnp.issubdtype(codes.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {codes.dtype}")
    _check_code_range(codes, fmt, name)
    return codes


def decode(codes: Any, fmt: Any, dtype: Any = jnp.float32) -> jax.Array:
    """Map integer codes of ``fmt`` to their values, in ``dtype`` (float32 by default).

    Every code has a value: NaN codes give NaN (with the code's sign for ``ieee``/``fn`` formats),
    infinity codes give ±inf, ``-0`` gives -0. Codes outside the format's code space
    (``>= fmt.num_codes``) raise ValueError when the codes are concrete; under jit they decode to NaN.

    Args:
      codes: integer array (any integer dtype; values are codes, not bit-cast floats).
      fmt: format name, `Format` or dtype.
      dtype: float16, bfloat16, float32 or float64; it must hold every value of ``fmt``.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.decode(jnp.array([0x7e, 0x7f, 0x80, 0x01], jnp.uint8), "e4m3fn").tolist()
      [448.0, nan, -0.0, 0.001953125]
    """
    fmt = format_arg(fmt)
    if dtype is None:
        raise TypeError("dtype must be one of float16, bfloat16, float32, float64, got None")
    out = input_format(np.dtype(dtype), name="dtype")
    if out.name == "fp64" and not jax.config.read("jax_enable_x64"):
        raise ValueError(
            "dtype=float64 needs jax.config.update('jax_enable_x64', True) (JAX arrays are float32 without it)"
        )
    check_fits(fmt, out, name="dtype")
    codes = _integer_codes(codes, fmt, "codes")
    return _decode_jit(codes, fmt, out)


def _check_codes(codes: Any, fmt: Format, name: str) -> jax.Array:
    codes = _integer_codes(codes, fmt, name) if name == "codes" else jnp.asarray(codes)
    if not jnp.issubdtype(codes.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (packing runs along the last axis)")
    return codes


def _group(fmt: Format) -> tuple[int, int]:
    """(codes, bytes) per packing group: the smallest run of codes that fills whole bytes."""
    codes = 8 // math.gcd(fmt.bits, 8)
    return codes, codes * fmt.bits // 8


def pack(codes: Any, fmt: Any) -> jax.Array:
    """Pack codes densely into bytes along the last axis (uint8 result), as `numpy.packbits` packs bits.

    The layout is a little-endian bit stream: bit ``j`` of code ``i`` is stream bit
    ``i * fmt.bits + j``, and stream bit ``t`` is bit ``t % 8`` of byte ``t // 8``. So 4-bit
    formats store two codes per byte (code ``2i`` in the low nibble), 6-bit formats four codes per
    three bytes, 8-bit formats one per byte, and wider formats their little-endian bytes. A last
    axis that does not fill whole bytes (an odd number of 4-bit codes, ...) is padded with zero codes
    to the next packing group: ``unpack(packed, fmt, count=n)`` gives back exactly the ``n`` codes.

    Codes outside ``[0, fmt.num_codes)`` are never packed silently: concrete codes raise ValueError
    at the call; under `jax.jit` (traced codes) a `jax.debug.callback` checks the largest code (a
    negative one counting as large) when the computation runs and raises the same ValueError there,
    which JAX reports as a ``jax.errors.JaxRuntimeError`` naming ``codes``, the valid range and the
    offending code. The check costs one reduction over the codes; it is left out where the dtype
    cannot hold a bad code (uint8 codes of an 8-bit format).

    Raises:
      TypeError: if ``codes`` is not an integer array.
      ValueError: for a scalar, or codes outside ``[0, fmt.num_codes)`` (under jit: at run time).

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.pack(jnp.array([0x1, 0x2, 0xf, 0x0], jnp.uint8), "e2m1fn").tolist()
      [33, 15]
      >>> fpemu.pack(jnp.array([0x1, 0x2, 0xf], jnp.uint8), "e2m1fn").tolist()  # padded with a zero code
      [33, 15]
    """
    fmt = format_arg(fmt)
    codes = _check_codes(codes, fmt, "codes")  # the range of concrete codes is checked here
    _check_traced_range(codes, fmt, "codes")
    return pack_codes(codes, fmt)


def pack_codes(codes: jax.Array, fmt: Format) -> jax.Array:
    """`pack` for an integer array of at least one dimension whose codes are known to lie in
    ``[0, fmt.num_codes)`` (the output of `encode`): no checks, and bits above ``fmt.bits`` are dropped."""
    group, _ = _group(fmt)
    pad = -codes.shape[-1] % group
    if pad:
        codes = pad_zeros(codes, [(0, 0)] * (codes.ndim - 1) + [(0, pad)])
    n = codes.shape[-1]
    width = fmt.bits
    codes = codes.astype(fmt.code_dtype) & jnp.asarray((1 << width) - 1, fmt.code_dtype)
    if width == 4:  # the common FP4 case, without the bit-level detour
        pairs = codes.astype(jnp.uint8).reshape(*codes.shape[:-1], n // 2, 2)
        return pairs[..., 0] | (pairs[..., 1] << jnp.uint8(4))
    if width % 8 == 0:
        return lax.bitcast_convert_type(codes, jnp.uint8).reshape(*codes.shape[:-1], n * width // 8)
    stream = ((codes[..., None] >> _lanes(width, codes.dtype, codes.ndim + 1)) & 1).astype(jnp.uint8)
    stream = stream.reshape(*codes.shape[:-1], n * width // 8, 8)
    return jnp.sum(stream << _lanes(8, jnp.uint8, stream.ndim), axis=-1, dtype=jnp.uint8)


def unpack(packed: Any, fmt: Any, count: int | None = None) -> jax.Array:
    """Inverse of `pack`: bytes (uint8, last axis) to codes of ``fmt.code_dtype``.

    ``count`` (as in `numpy.unpackbits`) keeps the first ``count`` codes of the last axis, dropping
    the padding `pack` added; None keeps every code the bytes hold.

    Raises:
      TypeError: if ``packed`` is not uint8, or ``count`` is not an int.
      ValueError: if the last axis is not a whole number of packing groups (e.g. a multiple of 3
        bytes for 6-bit formats), or ``count`` is negative or more than the codes stored.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.unpack(jnp.array([33, 15], jnp.uint8), "e2m1fn").tolist()
      [1, 2, 15, 0]
      >>> fpemu.unpack(jnp.array([33, 15], jnp.uint8), "e2m1fn", count=3).tolist()
      [1, 2, 15]
    """
    fmt = format_arg(fmt)
    if getattr(packed, "dtype", None) is not None and np.dtype(packed.dtype) != np.uint8:  # before JAX narrows int64
        raise TypeError(f"packed must be a uint8 array (the output of fpemu.pack), got dtype {np.dtype(packed.dtype)}")
    packed = _check_codes(packed, fmt, "packed")
    if packed.dtype != jnp.uint8:
        raise TypeError(f"packed must be a uint8 array (the output of fpemu.pack), got dtype {packed.dtype}")
    group, nbytes = _group(fmt)
    m = packed.shape[-1]
    if m % nbytes:
        raise ValueError(
            f"packed.shape[-1]={m} must be a multiple of {nbytes} bytes for {fmt.bits}-bit {fmt.name} codes"
        )
    width, out = fmt.bits, jnp.dtype(fmt.code_dtype)
    n = m * 8 // width
    if count is not None:
        count = int_arg(count, "count", minimum=0, maximum=n)
    if width == 4:
        low, high = packed & jnp.uint8(0xF), packed >> jnp.uint8(4)
        codes = jnp.stack([low, high], axis=-1).reshape(*packed.shape[:-1], n)
    elif width == 8:
        codes = packed
    elif width % 8 == 0:
        codes = lax.bitcast_convert_type(packed.reshape(*packed.shape[:-1], n, width // 8), out)
    else:
        bits = ((packed[..., None] >> _lanes(8, jnp.uint8, packed.ndim + 1)) & 1).reshape(*packed.shape[:-1], n, width)
        codes = jnp.sum(bits.astype(out) << _lanes(width, out, bits.ndim), axis=-1, dtype=out)
    return codes if count is None or count == n else codes[..., :count]


def _lanes(width: int, dtype, ndim: int) -> jax.Array:
    """``0, 1, ..., width - 1`` along the last of ``ndim`` axes (explicit rank: no implicit promotion)."""
    return jnp.arange(width, dtype=dtype).reshape((1,) * (ndim - 1) + (width,))
