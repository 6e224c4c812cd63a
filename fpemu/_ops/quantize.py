"""`quantize`: round an array to a format, keep the exact result in the input's dtype.

The options are checked once into a `RoundingSpec` (`fpemu._ops.rounding_spec`); the engine runs
on the XLA path, or as the Pallas kernel (`fpemu._ops.quantize_pallas`, loaded only when
``backend="pallas"`` asks for it), as `fpemu._ops.backends` decides.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu import _args
from fpemu._args import check_fits, float_array, input_format, is_host_float64
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import get_format
from fpemu._engine import convert as _convert
from fpemu._engine import rng as _random
from fpemu._ops.backends import Backend, resolve_backend
from fpemu._ops.rounding_spec import (
    RoundingSpec,
    reduce_precision_is_exact,
    round_bits,
    rounding_spec,
    seeds_for,
)


def stochastic_bits(key: Any, shape: Any, random_bits: int | None = None) -> jax.Array:
    """The random bits that stochastic rounding draws from ``key`` for an input of ``shape``.

    Integers in ``[0, 2**random_bits)`` (uint32), one per element: the top ``random_bits`` bits of a
    counter-based hash of the key and the element's row-major index (docs/semantics.md). Passing them
    as ``random=`` gives exactly the keyed result: ``quantize(x, fmt, rounding="stochastic", key=key)``
    equals ``quantize(x, fmt, rounding="stochastic", random=stochastic_bits(key, x.shape))``, with the
    same ``random_bits``, in `quantize` and `encode` alike.

    Raises:
      TypeError, ValueError: for a ``key`` that is not one PRNG key, a ``random_bits`` outside 1..32,
        a ``shape`` that is not a tuple of non-negative ints.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> key, x = jax.random.key(0), jnp.linspace(1, 2, 5)
      >>> bits = stochastic_bits(key, x.shape, random_bits=4)
      >>> bool((quantize(x, "e2m1fn", rounding="stochastic", key=key, random_bits=4)
      ...       == quantize(x, "e2m1fn", rounding="stochastic", random=bits, random_bits=4)).all())
      True
    """
    key = _args.key_arg(key, True)
    k = _args.random_bits_arg(random_bits, True)
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    shape = tuple(_args.int_arg(n, "shape", minimum=0) for n in _args.tuple_arg(shape))
    words = _random.random_uint32(_random.seeds_from_key(key), shape)
    return words >> np.uint32(32 - k) if k < 32 else words


def _round_array(
    x: jax.Array, seeds: jax.Array, spec: RoundingSpec, integer_only: bool = False, engine: str = "xla"
) -> jax.Array:
    """Round with ``engine``: "xla", "pallas" (compiled) or "pallas_interpret" (Pallas interpret mode)."""
    if engine != "xla":
        from fpemu._ops.quantize_pallas import BlockSizes, quantize_pallas  # loads Pallas: on demand only

        interpret = engine == "pallas_interpret"
        block_sizes = BlockSizes.default("cpu" if interpret else jax.default_backend())
        return quantize_pallas(x, seeds, spec=spec, block_sizes=block_sizes, interpret=interpret)
    src = input_format(x.dtype)
    if not integer_only and reduce_precision_is_exact(src, spec):
        return lax.reduce_precision(x, exponent_bits=spec.fmt.exponent_bits, mantissa_bits=spec.fmt.mantissa_bits)
    out = round_bits(x, seeds, spec, "src_bits")
    return lax.bitcast_convert_type(out.astype(src.code_dtype), x.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _quantize_ste(x: jax.Array, seeds: jax.Array, spec: RoundingSpec, engine: str = "xla") -> jax.Array:
    return _round_array(x, seeds, spec, engine=engine)


@_quantize_ste.defjvp
def _quantize_ste_jvp(spec, engine, primals, tangents):
    x, seeds = primals
    x_dot, _ = tangents
    return _quantize_ste(x, seeds, spec, engine), x_dot  # straight-through: d quantize(x) / dx = 1


#: ``quantize_with_spec(x, seeds, spec, engine)``: ``x`` rounded as the checked `RoundingSpec` says,
#: jitted, with the straight-through gradient; no argument checks (`quantize` makes them first).
#: `fpemu.emulate`'s rounding sites call it with a spec they checked once per format and options.
quantize_with_spec = jax.jit(_quantize_ste, static_argnums=(2, 3))


def _quantize_host_float64(x, spec: RoundingSpec, seeds, engine: str = "xla") -> jax.Array:
    """NumPy float64 input with x64 off: round from float64 exactly, return float32 (JAX's float)."""
    fp32 = get_format("fp32")
    check_fits(spec.fmt, fp32, name="the float64 input (x64 is disabled, so the result is float32)")
    with jax.enable_x64(True):
        x64 = jnp.asarray(x, jnp.float64)
        y64 = quantize_with_spec(x64, seeds, spec, engine)
        bits64 = lax.bitcast_convert_type(y64, jnp.uint64)
        fp64 = get_format("fp64")
        bits32 = _convert.round_narrow(
            bits64, src=fp64, dst=fp32, rounding="toward_zero", saturate=False, subnormals=True, output="dst_code"
        ).astype(jnp.uint32)
    return lax.bitcast_convert_type(bits32, jnp.float32)


def quantize(
    x: Any,
    fmt: Any,
    *,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    key: jax.Array | None = None,
    random_bits: int | None = None,
    backend: Backend = "auto",
    random: Any = None,
    stochastic_variant: StochasticVariant = "floor",
    exponent_ties: ExponentTies = "away",
) -> jax.Array:
    """Round ``x`` to the format ``fmt`` and return the exact rounded values, in ``x``'s dtype.

    Special values first:

    - NaN stays NaN (also for formats with no NaN code, so that it stays visible); -0 stays -0
      where the format has -0, else becomes +0, and a negative value rounding to zero in such a
      format gives +0.
    - Overflow (``saturate=False``): the IEEE result for the mode: nearest, stochastic and the
      outward directed mode give infinity, toward_zero, to_odd and the inward directed mode give
      the largest finite value; "infinity" is NaN for formats with NaN but no infinity, and the
      largest finite value for formats with neither (ml_dtypes: e4m3fn 464 -> 448,
      464.00003 -> NaN; e2m1fn 7 -> 6).
    - ±infinity gives the format's infinity, else NaN, else ±max. ``saturate=True`` clamps every
      non-NaN input, infinities included, to [-max, max].
    - IEEE P3109's saturation modes: ``saturate="sat_finite"`` (as True), ``"sat_propagate"`` (finite
      overflow clamps, ±infinity stays infinite where the format has it) and ``"ovf_inf"`` (as False,
      except that to_odd overflows too). With them, unsigned formats follow P3109 for negative
      inputs: 0 (the lowest value), or NaN under ``"ovf_inf"`` unless the result is zero or the mode
      is toward_zero or toward_positive (docs/semantics.md has the table).
    - Subnormals are kept; ``subnormals=False`` flushes every nonzero result smaller than
      ``min_normal`` to zero of the same sign.
    - Unsigned formats (E8M0): negative inputs give NaN; E8M0 has no zero, so 0 gives NaN and
      positive values below its smallest value give that value.

    Rounding modes: ``nearest_even`` (default; ties away from zero for formats with no mantissa
    bits, as ml_dtypes does, or to the even exponent with ``exponent_ties="even"``, as IEEE P3109
    does), ``nearest_away``, ``toward_zero``, ``toward_positive``, ``toward_negative``, ``to_odd``
    (the neighbour with an odd code; never overflows, except under ``saturate="ovf_inf"``) and
    ``stochastic`` (needs ``key``, or the random bits themselves as ``random``). With k random bits
    ``r`` (``random_bits=k``, default 32) and ``f`` the discarded fraction of a step, it rounds away
    from zero iff ``T + r >= 2**k``, where ``T = 2**k f`` rounded to an integer by
    ``stochastic_variant``: ``"floor"`` (default: adds the k random bits to the k leading discarded
    bits), ``"nearest_even"``, ``"nearest_odd"`` or ``"nearest_away"`` (gfloat's
    StochasticFastest, Stochastic, StochasticOdd and StochasticFast). There is exactly one rounding
    from the input value.

    The gradient is the identity (straight-through estimator). Pure and jit/vmap/grad-compatible;
    a NumPy float64 input while ``jax_enable_x64`` is off is rounded from its float64 value (no
    silent float32 rounding first) and returned as float32.

    Backends: ``"xla"`` runs the integer engine as XLA ops (fused with neighbouring ops under
    ``jit``); ``"pallas"`` runs it as the `fpemu.kernels.quantize` kernel, on a GPU only, for
    float16, bfloat16 and float32 input, with a key or explicit ``random`` bits.
    Both give the same bits, stochastic rounding included (the random bits are a function of the
    key and the element's index). ``"auto"`` (default) picks the faster one measured on the
    platform: XLA on CPU, where Pallas only interprets, and on GPU too, where the XLA path ran at
    95% of an H200's copy bandwidth and the kernel at 89% (bench/RESULTS_gpu.md).

    Args:
      x: float16, bfloat16, float32 or float64 array (or a Python float).
      fmt: format name, `Format`, or dtype; its values must fit ``x``'s dtype.
      rounding: the rounding mode.
      saturate: ``False``, ``True`` (clamp overflow and infinities to ±max), or one of IEEE P3109's
        ``"sat_finite"``, ``"sat_propagate"``, ``"ovf_inf"``.
      subnormals: keep subnormal results (``False`` flushes them to zero).
      key: a JAX PRNG key, for (and only for) ``rounding="stochastic"``.
      random_bits: random bits per element for stochastic rounding, 1..32, or None (32).
      backend: ``"auto"``, ``"xla"`` or ``"pallas"``.
      random: instead of ``key``, the random bits of stochastic rounding: integers in
        ``[0, 2**random_bits)`` broadcastable to ``x``'s shape. ``key=key`` gives exactly the result
        of ``random=stochastic_bits(key, x.shape, random_bits)``, the bits it draws. Traced values
        are not range-checked: their low ``random_bits`` bits are used.
      stochastic_variant: how ``rounding="stochastic"`` compares its bits with the discarded fraction.
      exponent_ties: ``"away"`` (default) or ``"even"``: how ``nearest_even`` breaks ties in formats
        without mantissa bits (elsewhere it has no effect).

    Returns:
      An array of ``x``'s shape and dtype holding values of ``fmt`` (or NaN).

    Raises:
      TypeError: integer, bool or complex input; non-integer ``random``.
      ValueError: unknown format, mode, variant or backend, a format that ``x``'s dtype cannot hold
        (fp16 in a bfloat16 array), stochastic rounding without a key or random bits (or with both),
        random bits out of range or of a shape that does not broadcast to ``x``'s,
        ``backend="pallas"`` on a platform without compiled Pallas kernels (CPU) or with float64 input.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.quantize(jnp.array([1.0625, 1.0625001, 464.0, 500.0]), "e4m3fn").tolist()
      [1.0, 1.125, 448.0, nan]
      >>> fpemu.quantize(jnp.array([500.0, -jnp.inf]), "e4m3fn", saturate=True).tolist()
      [448.0, -448.0]
      >>> fpemu.quantize(jnp.array([1.0625, -1.0625]), "e4m3fn", rounding="toward_positive").tolist()
      [1.125, -1.0]
      >>> x = jnp.full(8, 277.0)  # e5m2 neighbours 256 and 320: f = 21/64; 3 random bits, one draw each
      >>> [int((fpemu.quantize(x, "e5m2", rounding="stochastic", random=jnp.arange(8), random_bits=3,
      ...                      stochastic_variant=v) == 320).sum()) for v in ("floor", "nearest_even")]
      [2, 3]
    """
    spec = rounding_spec(
        fmt, rounding, saturate, subnormals, key, random_bits, random=random, stochastic_variant=stochastic_variant,
        exponent_ties=exponent_ties,
    )  # fmt: skip
    if is_host_float64(x):
        engine = resolve_backend(backend, jax.default_backend(), float64=True)
        return _quantize_host_float64(x, spec, seeds_for(spec, key, random, np.shape(x)), engine)
    x = float_array(x)
    check_fits(spec.fmt, input_format(x.dtype))
    return round_checked(x, spec, key, random, backend)


def round_checked(
    x: jax.Array, spec: RoundingSpec, key: Any = None, random: Any = None, backend: Any = "auto"
) -> jax.Array:
    """`quantize` on checked arguments: a JAX float array ``x`` whose dtype holds ``spec``'s format
    (`check_fits`), and ``spec`` from `rounding_spec` (made with this ``key`` or ``random``, or a
    stand-in, `fpemu._ops.rounding_spec.SPEC_KEY`): the core that fpemu's own layers call."""
    engine = resolve_backend(backend, jax.default_backend(), float64=np.dtype(x.dtype) == np.float64)
    return quantize_with_spec(x, seeds_for(spec, key, random, x.shape), spec, engine)


__all__ = ["quantize", "quantize_with_spec", "round_checked", "stochastic_bits"]
