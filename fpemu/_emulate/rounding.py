"""Rounding one array to a policy's format, in its own dtype: the operation every rule ends in.

`round_to_format` is `fpemu.quantize` with what emulate adds around it: a format at least as wide
as the dtype leaves the array alone, a rounding that is provably the identity emits nothing, float8
data is widened to float32 and back, and complex data has its real and imaginary parts rounded
separately. `counts` is the statistics of one rounding (a complex element counts as its two parts).
`round_literal_on_host` does the same once, on the host, for a literal of the program. `fold_key`
derives the key of each rounding site.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import DEFAULT_RANDOM_BITS, INPUT_DTYPES
from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._emulate import stats as _stats
from fpemu._emulate.policy import Policy
from fpemu._engine.rng import mix, mix_int
from fpemu._ops.backends import resolve_backend
from fpemu._ops.quantize import quantize, quantize_with_spec
from fpemu._ops.rounding_spec import rounding_spec_once, seeds_for


def is_float(dtype: Any) -> bool:
    """A real floating-point dtype (float8 to float64)."""
    return jnp.issubdtype(dtype, jnp.floating)


def is_complex(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.complexfloating)


@functools.lru_cache(maxsize=256)
def is_inexact(dtype: Any) -> bool:
    """A dtype whose values `round_to_format` rounds: real floating point, or complex (by parts)."""
    return jnp.issubdtype(dtype, jnp.inexact)


def component_dtype(dtype: Any) -> np.dtype:
    """The real dtype of a complex dtype's parts (complex64: float32); a real float dtype itself."""
    return np.dtype(jnp.finfo(dtype).dtype)


def is_identity(container: Format, fmt: Format, policy: Policy) -> bool:
    """Whether rounding every value of the ``container`` format (a dtype's) to ``fmt`` under
    ``policy`` returns it unchanged, bit for bit."""
    return _is_identity(container, fmt, policy.saturate, policy.subnormals)


@functools.lru_cache(maxsize=1024)
def _is_identity(container: Format, fmt: Format, saturate: bool | str, subnormals: bool) -> bool:
    if not fits(container, fmt):
        return False
    # saturate=True and "sat_finite" clamp infinities; False, "sat_propagate" and "ovf_inf" keep them
    if container.has_inf and (saturate in (True, "sat_finite") or not fmt.has_inf):
        return False
    return subnormals or not container.has_subnormals or container.min_subnormal >= fmt.min_normal


# What `round_to_format` does with a (real dtype, format) pair under a policy's saturate/subnormals.
_IDENTITY, _NARROWER, _MISMATCH, _ROUND = "identity", "narrower", "mismatch", "round"


@functools.lru_cache(maxsize=1024)
def _plan(dtype: np.dtype, fmt: Format, saturate: bool | str, subnormals: bool) -> str:
    container = get_format(dtype)
    if not fits(fmt, container):
        return _NARROWER if fits(container, fmt) else _MISMATCH
    return _IDENTITY if _is_identity(container, fmt, saturate, subnormals) else _ROUND


def _random_bits(policy: Policy) -> int:
    return DEFAULT_RANDOM_BITS if policy.random_bits is None else policy.random_bits


def round_to_format(
    x: jax.Array,
    fmt: Format,
    policy: Policy,
    rounding: str,
    key: Any,
    where: str | Callable[[], str],
    random: Callable[[Any, tuple[int, ...], int], Any] | None = None,
) -> jax.Array:
    """``x`` rounded to ``fmt`` under ``policy``, in ``x``'s dtype (``rounding`` and ``key`` given
    separately; ``where``, or what it returns, names the site in errors). A complex ``x`` has its real
    and imaginary parts rounded separately (the imaginary part with its own key), as two arrays of its
    part dtype. ``random`` (emulate's ``random=``) gives the bits of a stochastic rounding,
    ``random(site key, x's shape, policy.random_bits)``, instead of the bits the key gives.

    The same bits as `fpemu.quantize` with the policy's options; a JAX array of a dtype `fpemu.quantize`
    takes goes straight to its jitted rounding with the options checked once per (format, options)
    (`_spec`), not through the argument layer on every call.
    """
    dtype = component_dtype(x.dtype)
    plan = _plan(dtype, fmt, policy.saturate, policy.subnormals)
    if plan == _NARROWER or plan == _IDENTITY:
        return x  # the dtype is narrower than the format, or the rounding cannot change its values
    if plan == _MISMATCH:
        container = get_format(dtype)
        site = where if isinstance(where, str) else where()
        raise ValueError(
            f"fpemu.emulate: cannot round the {container.name} values of {site} to {fmt.name}: neither format "
            f"holds the other's values ({fmt.name}: {fmt.mantissa_bits} mantissa bits, max {fmt.max:g}; "
            f"{container.name}: {container.mantissa_bits} mantissa bits, max {container.max:g}). Compute in a dtype "
            "that holds the format (e.g. call the function with float32 arrays) or pick a format that fits."
        )
    if dtype != x.dtype:  # complex
        real = round_to_format(lax.real(x), fmt, policy, rounding, key, where, random)
        imag = round_to_format(lax.imag(x), fmt, policy, rounding, fold_key(key, 1), where, random)
        return lax.complex(real, imag)
    if dtype.name not in INPUT_DTYPES:  # float8 data: an exact round trip through float32
        return round_to_format(x.astype(jnp.float32), fmt, policy, rounding, key, where, random).astype(x.dtype)
    stochastic = rounding == "stochastic"
    if not isinstance(x, jax.Array) or (stochastic and (key is None or random is not None)):
        # host data (a NumPy constant: float64 is rounded from its own value), a missing key or the bits of
        # emulate's random= source: the public door
        options: dict[str, Any] = dict(
            saturate=policy.saturate,
            subnormals=policy.subnormals,
            rounding=rounding,
            exponent_ties=policy.exponent_ties,
        )
        if stochastic:
            options.update(random_bits=policy.random_bits, stochastic_variant=policy.stochastic_variant)
            if random is not None and key is not None:
                options.update(random=random(key, np.shape(x), _random_bits(policy)))
            else:
                options.update(key=key)
        return quantize(x, fmt, **options)
    spec = rounding_spec_once(
        fmt, rounding, policy.saturate, policy.subnormals, policy.random_bits, policy.stochastic_variant,
        policy.exponent_ties,
    )  # fmt: skip
    engine = resolve_backend("auto", jax.default_backend(), float64=dtype == np.float64)
    return quantize_with_spec(x, seeds_for(spec, key), spec, engine)


def counts(x: jax.Array, y: jax.Array, fmt: Format) -> jax.Array:
    """The statistics vector (`fpemu._emulate.stats.FIELDS`) of the rounding ``x -> y`` into ``fmt``;
    for complex data, of its real and imaginary parts (each part counts as one element)."""
    if is_complex(x.dtype):
        x = jnp.concatenate([lax.real(x).ravel(), lax.imag(x).ravel()])
        y = jnp.concatenate([lax.real(y).ravel(), lax.imag(y).ravel()])
    return _stats.counts(x, y, fmt)


@functools.lru_cache(maxsize=4096)
def round_literal_on_host(
    dtype: str, data: bytes, shape: tuple, fmt: Format, policy: Policy, with_counts: bool
) -> tuple:
    """A literal's rounded value (None if unchanged) and, ``with_counts``, its counts (else None),
    computed once on the host (nearest even when the policy is stochastic: a literal has no site key).

    The literal takes the value JAX gives it (a float64 literal is float32 while x64 is off), and is
    rounded by `_literal_program`, one compiled program per dtype, shape, format and policy. The counts
    are asked for only when they are kept: computing them eagerly compiles a handful of small XLA
    programs, which was most of the first trace of an emulated function (0.6 s)."""
    value = np.frombuffer(data, dtype=jnp.dtype(dtype)).reshape(shape)
    x = np.asarray(value, jax.dtypes.canonicalize_dtype(value.dtype))
    rounded, vector = _literal_program(x.dtype.name, shape, fmt, policy, with_counts)(x)
    out = np.asarray(rounded)
    return (None if out.tobytes() == value.tobytes() else out), (None if vector is None else np.asarray(vector))


@functools.lru_cache(maxsize=64)
def _literal_program(dtype: str, shape: tuple, fmt: Format, policy: Policy, with_counts: bool) -> Callable:
    """The compiled program that rounds a literal of ``dtype`` and ``shape`` (and counts, ``with_counts``).

    Compiled ahead of time, once per process: computed eagerly instead, under the trace that reads the
    literal, the rounding compiled again for each tracing context that JAX's caches tell apart (a
    program's top level, a nested `jit`, an abstract mesh), about 30 ms each time, on a first trace
    that took 0.13-0.18 s (bench/RESULTS_training.md, 2026-11-30, eleventh session)."""
    rounding = "nearest_even" if policy.rounding == "stochastic" else policy.rounding

    def program(x: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        rounded = round_to_format(x, fmt, policy, rounding, None, "a literal")
        return rounded, (counts(x, rounded, fmt) if with_counts else None)

    return jax.jit(program).lower(jax.ShapeDtypeStruct(shape, np.dtype(dtype))).compile()


_FOLD_TAG = 0x9E3779B9


def fold_key(key: Any, *data: Any) -> Any:
    """A new uint32[2] key from ``key`` (uint32[2], or None) and integers (Python ints or traced
    scalars): two rounds of fpemu's counter hash, far cheaper to compile than ``jax.random.fold_in``.
    `fpemu.quantize` and `fpemu.dot_general` accept such legacy-style uint32 keys.

    A Python int's own hash is computed on the host (`mix_int`, the same bits): a program folds a key
    at every rounding site and GEMM, and tracing those hashes took about 15% of an NVFP4 step's trace."""
    for d in data:
        if key is None:
            return None
        hashed: Any
        if isinstance(d, (int, np.integer)):
            hashed = mix_int(int(d) + _FOLD_TAG)
        else:
            hashed = mix(lax.add(jnp.asarray(d).astype(jnp.uint32), np.uint32(_FOLD_TAG)))
        h0 = mix(lax.bitwise_xor(key[0], hashed))
        h1 = mix(lax.add(key[1], h0))
        key = jnp.stack([h0, h1])
    return key


def fold_keys(key: Any, data: Sequence[int]) -> Any:
    """`fold_key` of ``key`` with each integer of ``data``, all in one: a uint32[len(data), 2] array whose row
    ``i`` is ``fold_key(key, data[i])`` (the same bits). ``key``: one uint32[2] key, or one per integer
    (uint32[len(data), 2], row ``i`` folded with ``data[i]``)."""
    hashed = np.array([mix_int(int(d) + _FOLD_TAG) for d in data], np.uint32)
    h0 = mix(lax.bitwise_xor(key[..., 0], hashed))
    h1 = mix(lax.add(key[..., 1], h0))
    return jnp.stack([h0, h1], axis=-1)
