"""The checked options of one rounding (`RoundingSpec`) and the integer engine run on an array.

`rounding_spec` checks the options `fpemu.quantize`, `fpemu.encode` and the quantize kernel share,
once, into a hashable `RoundingSpec` (a jit static argument); `seeds_for` turns a key or explicit
random bits into the engine's random input; `round_bits` runs the engine (`fpemu._engine`) on an
array's bit patterns. The XLA path (`fpemu._ops.quantize`), the codecs and the Pallas kernel
(`fpemu._ops.quantize_pallas`) all start here.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu import _args
from fpemu._args import input_format
from fpemu._core.format import Format
from fpemu._engine import convert as _convert
from fpemu._engine import rng as _random
from fpemu._engine import stochastic as _stochastic


@dataclasses.dataclass(frozen=True)
class RoundingSpec:
    """Validated, static rounding options (hashable: a jit static argument)."""

    fmt: Format
    rounding: str = "nearest_even"
    saturate: bool | str = False
    subnormals: bool = True
    random_bits: int = _args.DEFAULT_RANDOM_BITS
    stochastic_variant: str = "floor"
    exponent_ties: str = "away"
    explicit_random: bool = False  # stochastic bits passed as an array (`random=`), not drawn from a key

    def engine_options(self) -> dict[str, Any]:
        """The keyword arguments of `fpemu._engine.convert.round_narrow` that this spec fixes."""
        return {
            "rounding": self.rounding,
            "saturate": self.saturate,
            "subnormals": self.subnormals,
            "random_bits": self.random_bits,
            "stochastic_variant": self.stochastic_variant,
            "exponent_ties": self.exponent_ties,
        }


def rounding_spec(
    fmt, rounding, saturate, subnormals, key, random_bits, *, random=None, stochastic_variant="floor",
    exponent_ties="away",
) -> RoundingSpec:  # fmt: skip
    """Check the options shared by quantize and encode (`fpemu._args`); errors name the argument.

    ``random`` only says whether explicit random bits were passed (they are checked against the
    input's shape by `fpemu._args.random_arg`): then ``key`` must be None.
    """
    fmt = _args.format_arg(fmt, "fmt")
    rounding = _args.rounding_arg(rounding)
    stochastic = rounding == "stochastic"
    explicit = _args.key_or_random_arg(key, random, rounding)
    random_bits = _args.random_bits_arg(random_bits, stochastic, rounding=rounding)
    variant = _args.stochastic_variant_arg(stochastic_variant, stochastic, rounding)
    ties = _args.exponent_ties_arg(exponent_ties)
    return RoundingSpec(
        fmt, rounding, _args.saturate_arg(saturate), _args.bool_arg(subnormals, "subnormals"), random_bits, variant,
        ties, explicit,
    )  # fmt: skip


# The seeds argument of deterministic roundings (unused): a host constant, so that an eager call does
# not dispatch a zeros op every time (that dispatch cost more than the jitted rounding itself).
NO_SEEDS = np.zeros((2,), np.uint32)
NO_SEEDS.flags.writeable = False

#: A stand-in key (the raw words of a key), so that the options of a stochastic rounding are checked
#: once (`rounding_spec`, `fpemu._ops.matmul.options_config`) while the keys come with each call.
SPEC_KEY: Any = np.zeros((2,), np.uint32)
SPEC_KEY.flags.writeable = False


@functools.lru_cache(maxsize=1024)
def rounding_spec_once(
    fmt: Format,
    rounding: str,
    saturate: bool | str,
    subnormals: bool = True,
    random_bits: int | None = None,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
    explicit: bool = False,
) -> RoundingSpec:
    """`rounding_spec` of options checked once per combination (cached), for fpemu's own layers, whose
    roundings repeat: a stochastic rounding's spec is made with the stand-in `SPEC_KEY`, or with
    explicit bits (``explicit``), and its key or bits come with each call (`fpemu._ops.quantize.round_checked`).
    ``random_bits`` and ``stochastic_variant`` count for stochastic rounding only."""
    stochastic = rounding == "stochastic"
    return rounding_spec(
        fmt, rounding, saturate, subnormals, SPEC_KEY if stochastic and not explicit else None,
        random_bits if stochastic else None, random=True if explicit else None,
        stochastic_variant=stochastic_variant if stochastic else "floor", exponent_ties=exponent_ties,
    )  # fmt: skip


def seeds_for(spec: RoundingSpec, key, random=None, shape: tuple[int, ...] = ()) -> Any:
    """The two uint32 words of ``key`` for stochastic rounding, else `NO_SEEDS`; with explicit random
    bits (``spec.explicit_random``), those bits checked against the input's ``shape``, as uint32 words."""
    if spec.explicit_random:
        return _args.random_arg(random, spec.random_bits, shape)
    if spec.rounding == "stochastic":
        return _random.seeds_from_key(key)
    return NO_SEEDS


def reduce_precision_is_exact(src: Format, spec: RoundingSpec) -> bool:
    """Where ``lax.reduce_precision`` gives exactly fpemu's result (proved by the exhaustive tests).

    It flushes the target's subnormals and rounds to nearest even only, so it is exact for float32
    input to an IEEE-layout format with float32's exponent range (bf16, tf32, fp32): those formats
    have no subnormals below float32's, and float32 has no more range to overflow into.
    """
    fmt = spec.fmt
    return (
        src.name == "fp32"
        and spec.rounding == "nearest_even"
        and not spec.saturate
        and spec.subnormals
        and fmt.specials == "ieee"
        and fmt.signed
        and fmt.has_zero
        and (fmt.exponent_bits, fmt.bias) == (src.exponent_bits, src.bias)
    )


def random_words(seeds: jax.Array, spec: RoundingSpec, shape: tuple[int, ...]) -> jax.Array:
    """The uint32 words whose top ``spec.random_bits`` bits stochastic rounding draws, one per element:
    the caller's explicit bits (already words, `seeds_for`), or the keyed hash of each element's index."""
    if spec.explicit_random:
        return jnp.broadcast_to(seeds, shape)
    return _random.random_uint32(seeds, shape)


def fast_stochastic(src: Format, spec: RoundingSpec) -> bool:
    """Whether ``spec`` rounds ``src`` input stochastically by `fpemu._engine.stochastic` (the same bits
    as the general engine, with fewer operations)."""
    return spec.rounding == "stochastic" and _stochastic.applies(
        src, spec.fmt, saturate=spec.saturate, subnormals=spec.subnormals, stochastic_variant=spec.stochastic_variant
    )


def round_bits(
    x: jax.Array, seeds: jax.Array, spec: RoundingSpec, output: Literal["src_bits", "dst_code"]
) -> jax.Array:
    """Round a float array with the integer engine: ``output="src_bits"`` gives the rounded values'
    bit patterns in ``x``'s format, ``"dst_code"`` the format's codes (random bits drawn from ``seeds``)."""
    src = input_format(x.dtype)
    bits = lax.bitcast_convert_type(x, jnp.dtype(src.code_dtype))
    if output == "src_bits" and fast_stochastic(src, spec):
        words = random_words(seeds, spec, x.shape)
        return _stochastic.round_stochastic(
            bits, spec.fmt, saturate=bool(spec.saturate), random=words, k=spec.random_bits
        )
    random = random_words(seeds, spec, x.shape) if spec.rounding == "stochastic" else None
    return _convert.round_narrow(bits, src=src, dst=spec.fmt, output=output, random=random, **spec.engine_options())


__all__ = [
    "NO_SEEDS",
    "SPEC_KEY",
    "RoundingSpec",
    "fast_stochastic",
    "random_words",
    "reduce_precision_is_exact",
    "round_bits",
    "rounding_spec",
    "rounding_spec_once",
    "seeds_for",
]
