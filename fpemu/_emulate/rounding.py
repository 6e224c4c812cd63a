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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import INPUT_DTYPES
from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._emulate import stats as _stats
from fpemu._emulate.policy import Policy
from fpemu._engine.rng import mix
from fpemu._ops.quantize import quantize


def is_float(dtype: Any) -> bool:
    """A real floating-point dtype (float8 to float64)."""
    return jnp.issubdtype(dtype, jnp.floating)


def is_complex(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.complexfloating)


def is_inexact(dtype: Any) -> bool:
    """A dtype whose values `round_to_format` rounds: real floating point, or complex (by parts)."""
    return jnp.issubdtype(dtype, jnp.inexact)


def component_dtype(dtype: Any) -> np.dtype:
    """The real dtype of a complex dtype's parts (complex64: float32); a real float dtype itself."""
    return np.dtype(jnp.finfo(dtype).dtype)


def is_identity(container: Format, fmt: Format, policy: Policy) -> bool:
    """Whether rounding every value of the ``container`` format (a dtype's) to ``fmt`` under
    ``policy`` returns it unchanged, bit for bit."""
    if not fits(container, fmt):
        return False
    # saturate=True and "sat_finite" clamp infinities; False, "sat_propagate" and "ovf_inf" keep them
    if container.has_inf and (policy.saturate in (True, "sat_finite") or not fmt.has_inf):
        return False
    return policy.subnormals or not container.has_subnormals or container.min_subnormal >= fmt.min_normal


def round_to_format(x: jax.Array, fmt: Format, policy: Policy, rounding: str, key: Any, where: str) -> jax.Array:
    """``x`` rounded to ``fmt`` under ``policy``, in ``x``'s dtype (``rounding`` and ``key`` given
    separately; ``where`` names the site in errors). A complex ``x`` has its real and imaginary parts
    rounded separately (the imaginary part with its own key), as two arrays of its part dtype."""
    dtype = component_dtype(x.dtype)
    container = get_format(dtype)
    if not fits(fmt, container):
        if fits(container, fmt):
            return x  # the dtype is narrower than the format: its values are values of the format
        raise ValueError(
            f"fpemu.emulate: cannot round the {container.name} values of {where} to {fmt.name}: neither format "
            f"holds the other's values ({fmt.name}: {fmt.mantissa_bits} mantissa bits, max {fmt.max:g}; "
            f"{container.name}: {container.mantissa_bits} mantissa bits, max {container.max:g}). Compute in a dtype "
            "that holds the format (e.g. call the function with float32 arrays) or pick a format that fits."
        )
    if is_identity(container, fmt, policy):
        return x
    if is_complex(x.dtype):
        real = round_to_format(lax.real(x), fmt, policy, rounding, key, where)
        imag = round_to_format(lax.imag(x), fmt, policy, rounding, fold_key(key, 1), where)
        return lax.complex(real, imag)
    options: dict[str, Any] = dict(
        saturate=policy.saturate, subnormals=policy.subnormals, rounding=rounding, exponent_ties=policy.exponent_ties
    )
    if rounding == "stochastic":
        options.update(key=key, random_bits=policy.random_bits, stochastic_variant=policy.stochastic_variant)
    if dtype.name in INPUT_DTYPES:  # float16, bfloat16, float32, float64: rounded from their own value
        return quantize(x, fmt, **options)
    return quantize(x.astype(jnp.float32), fmt, **options).astype(x.dtype)  # float8 data: exact round trip


def counts(x: jax.Array, y: jax.Array, fmt: Format) -> jax.Array:
    """The statistics vector (`fpemu._emulate.stats.FIELDS`) of the rounding ``x -> y`` into ``fmt``;
    for complex data, of its real and imaginary parts (each part counts as one element)."""
    if is_complex(x.dtype):
        x = jnp.concatenate([lax.real(x).ravel(), lax.imag(x).ravel()])
        y = jnp.concatenate([lax.real(y).ravel(), lax.imag(y).ravel()])
    return _stats.counts(x, y, fmt)


@functools.lru_cache(maxsize=4096)
def round_literal_on_host(dtype: str, data: bytes, shape: tuple, fmt: Format, policy: Policy) -> tuple:
    """A literal's rounded value (None if unchanged) and its counts, computed once on the host
    (nearest even when the policy is stochastic: a literal has no site key)."""
    value = np.frombuffer(data, dtype=jnp.dtype(dtype)).reshape(shape)
    rounding = "nearest_even" if policy.rounding == "stochastic" else policy.rounding
    with jax.ensure_compile_time_eval():
        x = jnp.asarray(value)
        rounded = round_to_format(x, fmt, policy, rounding, None, "a literal")
        out, vector = np.asarray(rounded), np.asarray(counts(x, rounded, fmt))
    return (None if out.tobytes() == value.tobytes() else out), vector


def fold_key(key: Any, *data: Any) -> Any:
    """A new uint32[2] key from ``key`` (uint32[2], or None) and integers (Python ints or traced
    scalars): two rounds of fpemu's counter hash, far cheaper to compile than ``jax.random.fold_in``.
    `fpemu.quantize` and `fpemu.dot_general` accept such legacy-style uint32 keys."""
    for d in data:
        if key is None:
            return None
        d = jnp.asarray(d).astype(jnp.uint32)
        h0 = mix(key[0] ^ mix(d + jnp.uint32(0x9E3779B9)))
        h1 = mix(key[1] + h0)
        key = jnp.stack([h0, h1])
    return key
