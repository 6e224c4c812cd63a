"""The argument layer: every public entry point resolves and checks its inputs here, once.

Each function takes the value and the argument's name as the user wrote it (``"fmt"``, ``"lhs"``,
``"Policy.rounding"``) and either returns the resolved value or raises an error whose message names
that argument and lists the valid choices. Nothing here computes: the layers above get values they
can trust.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._core.format import Format, fits
from fpemu._core.modes import EXPONENT_TIES, P3109_SATURATIONS, ROUNDING_MODES, STOCHASTIC_VARIANTS
from fpemu._core.registry import get_format

#: The float dtypes that fpemu's rounding engine takes as input (and returns).
INPUT_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")

#: Random bits per element of stochastic rounding: the default and the valid range.
DEFAULT_RANDOM_BITS = 32
RANDOM_BITS_RANGE = (1, 32)


# -- names and choices ------------------------------------------------------------------------------


def choice_arg(value: Any, choices: Sequence[str], name: str) -> str:
    """``value`` if it is one of ``choices``; else a ValueError naming the closest and listing all."""
    if isinstance(value, str) and value in choices:
        return value
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6) if isinstance(value, str) else []
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; {hint}got {value!r}")


def names_arg(values: Any, choices: Sequence[str], name: str) -> tuple[str, ...]:
    """None (all of ``choices``), one name, or an iterable of names, each checked, in the given order."""
    if values is None:
        return tuple(choices)
    if isinstance(values, str):
        values = (values,)
    return tuple(choice_arg(v, choices, name) for v in values)


def rounding_arg(value: Any, name: str = "rounding", *, choices: Sequence[str] = ROUNDING_MODES) -> str:
    """A rounding-mode name (`fpemu.ROUNDING_MODES`, or the ``choices`` a caller accepts)."""
    return choice_arg(value, choices, name)


def bool_arg(value: Any, name: str) -> bool:
    """A Python or NumPy bool (not an int, not a string)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}")
    return bool(value)


def saturate_arg(value: Any, name: str = "saturate") -> bool | str:
    """``saturate``: a bool (fpemu's IEEE-style overflow, or clamp everything) or one of IEEE P3109's
    saturation modes (`fpemu._core.modes.P3109_SATURATIONS`)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value in P3109_SATURATIONS:
        return value
    close = difflib.get_close_matches(value, P3109_SATURATIONS, n=1, cutoff=0.6) if isinstance(value, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TypeError(
        f"{name} must be a bool (True or False) or one of IEEE P3109's saturation modes "
        f"{', '.join(map(repr, P3109_SATURATIONS))}; got {type(value).__name__} {value!r}{hint}"
    )


def int_arg(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A Python or NumPy int (not a bool) within ``[minimum, maximum]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        low = "" if minimum is None else f">= {minimum}"
        high = "" if maximum is None else f"<= {maximum}"
        raise ValueError(f"{name} must be an int {' and '.join(s for s in (low, high) if s)}, got {value}")
    return value


def axis_arg(value: Any, ndim: int, name: str = "axis", *, of: str) -> int:
    """An axis of an array of rank ``ndim`` (negative ones count from the end), made non-negative;
    ``of`` names the array in the error, e.g. ``"x of shape (4, 32)"``."""
    axis = int_arg(value, name)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range for {of} (valid: {-ndim}..{ndim - 1})")
    return axis % ndim


def axes_arg(value: Any, ndim: int, name: str = "axis", *, of: str) -> tuple[int, ...]:
    """Reduction axes of an array of rank ``ndim``: every axis for None, else an axis (`axis_arg`) or a
    tuple or list of distinct axes, made non-negative in the order given."""
    if value is None:
        return tuple(range(ndim))
    items = value if isinstance(value, (tuple, list)) else (value,)
    axes = tuple(axis_arg(a, ndim, name, of=of) for a in items)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name} must name each axis once, got {value!r}")
    return axes


# -- formats ----------------------------------------------------------------------------------------


def format_arg(value: Any, name: str = "fmt") -> Format:
    """A format: a registered name, a `Format`, or a float dtype; errors name the argument.

    ``None`` is refused (NumPy would read it as float64), and so is an array (a common slip: the
    operands passed by keyword).
    """
    if value is None:
        raise TypeError(f"{name} must be a format (a name such as 'e4m3fn', a fpemu.Format or a dtype), got None")
    if isinstance(value, (jax.Array, np.ndarray)) and value.ndim > 0:
        raise TypeError(
            f"{name} must be a format (a name such as 'e4m3fn', a fpemu.Format or a dtype), got an array of shape "
            f"{value.shape}"
        )
    try:
        return get_format(value)
    except ValueError as e:  # UnknownFormatError included: the same type, with the argument's name
        raise type(e)(f"{name}: {e}") from None
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None


def optional_format_arg(value: Any, name: str) -> Format | None:
    """`format_arg`, or None for None (an option that is off)."""
    return None if value is None else format_arg(value, name)


def check_fits(fmt: Format, container: Format, name: str = "x") -> None:
    """ValueError unless every value of ``fmt`` is exactly a value of ``container``."""
    if fits(fmt, container):
        return
    raise ValueError(
        f"format {fmt.name} has values that {container.name} cannot hold exactly "
        f"(max {fmt.max:g} vs {container.max:g}, smallest {fmt.min_subnormal:g} vs {container.min_subnormal:g}, "
        f"{fmt.mantissa_bits} vs {container.mantissa_bits} mantissa bits); pass {name} in a wider dtype, "
        "e.g. .astype(jnp.float32)"
        + (" (float64 needs jax.config.update('jax_enable_x64', True))" if container.name == "fp32" else "")
    )


# -- float inputs -----------------------------------------------------------------------------------


def input_format(dtype: Any, name: str = "x") -> Format:
    """The registry format of a float input dtype (`INPUT_DTYPES`); TypeError for anything else."""
    dtype = np.dtype(dtype)
    if dtype.name not in INPUT_DTYPES:
        kind = {
            "i": "integer",
            "u": "integer",
            "b": "bool",
            "c": "complex",
            "O": "object",
            "U": "string",
            "S": "bytes",
        }.get(dtype.kind, "non-IEEE")
        raise TypeError(
            f"{name} must be a float16, bfloat16, float32 or float64 array, got {kind} dtype {dtype.name}"
            + {
                "non-IEEE": " (convert low-precision arrays with .astype(jnp.float32) first)",
                "integer": f" (for integer values, convert first: {name}.astype(jnp.float32); to decode integer "
                "codes of a format, use fpemu.decode)",
                "bool": f" (convert first: {name}.astype(jnp.float32))",
            }.get(kind, "")
        )
    return get_format(dtype)


def is_host_float64(x: Any) -> bool:
    """Float64 data that JAX would silently round to float32 (x64 disabled): a Python float, a list or
    tuple of them, or a NumPy float64 array or scalar."""
    if jax.config.read("jax_enable_x64"):
        return False
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError):
            return False  # ragged or not numbers: `float_array` says why
    return isinstance(x, (np.ndarray, np.generic)) and np.dtype(x.dtype) == np.float64


def float_array(x: Any, name: str = "x") -> jax.Array:
    """``x`` as a JAX array of a float input dtype (`INPUT_DTYPES`); TypeError naming ``name`` otherwise.

    Python bools, ints and complex numbers, strings, None, object arrays and ragged lists are refused
    here, with the argument's name, rather than deep inside JAX.
    """
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, (bool, int, complex, np.bool_)) and not isinstance(x, float):
        raise TypeError(f"{name} must be a floating-point array, got {type(x).__name__} {x!r}")
    if isinstance(x, float):
        x = np.float64(x)
    if not isinstance(x, (np.ndarray, np.generic)):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as e:
            raise TypeError(f"{name} must be a floating-point array, got {type(x).__name__} ({e})") from None
    input_format(x.dtype, name)
    return jnp.asarray(x)


def float32_array(x: Any, name: str = "x") -> jax.Array:
    """``x`` as a float16, bfloat16 or float32 JAX array, for inputs computed on in float32 only.

    Host float64 data (a Python float, a list of them, NumPy float64) is taken where float32 holds
    every value exactly, NaN and infinities included; a value it would round, or a float64 JAX array,
    is a TypeError naming ``name``, as is anything `float_array` refuses.
    """
    if is_host_float64(x):
        exact = np.asarray(x, np.float64)
        with np.errstate(over="ignore"):
            narrow = exact.astype(np.float32)
        changed = (narrow != exact) & ~np.isnan(exact)
        if changed.any():
            value = exact[changed].flat[0].item()
            raise TypeError(
                f"{name} holds {value!r}, which is not a float32 value: give a float32 array (no silent rounding)"
            )
        x = narrow
    a = float_array(x, name)
    input_format(a.dtype, name)
    if a.dtype == np.float64:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got float64 (no silent rounding)")
    return a


# -- stochastic rounding: keys and random bits -------------------------------------------------------


def random_bits_arg(value: Any, stochastic: bool, name: str = "random_bits", rounding: Any = None) -> int:
    """Random bits per element: None (the default, 32) or an int in [1, 32], and only when stochastic."""
    if not stochastic:
        if value is not None:
            raise ValueError(f"{name} is only used with rounding='stochastic', not {rounding!r}")
        return DEFAULT_RANDOM_BITS
    if value is None:
        return DEFAULT_RANDOM_BITS
    low, high = RANDOM_BITS_RANGE
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be None or an int in [{low}, {high}], got {value!r}")
    return int(value)


def stochastic_variant_arg(value: Any, stochastic: bool, rounding: Any = None, name: str = "stochastic_variant") -> str:
    """A stochastic-rounding variant (`fpemu._core.modes.STOCHASTIC_VARIANTS`); other than the default
    ``"floor"`` only with stochastic rounding."""
    value = choice_arg(value, STOCHASTIC_VARIANTS, name)
    if value != "floor" and not stochastic:
        raise ValueError(f"{name} is only used with rounding='stochastic', not {rounding!r}")
    return value


def exponent_ties_arg(value: Any, name: str = "exponent_ties") -> str:
    """``"away"`` or ``"even"``: how nearest-even breaks ties in a format without mantissa bits."""
    return choice_arg(value, EXPONENT_TIES, name)


def key_or_random_arg(key: Any, random: Any, rounding: str) -> bool:
    """Stochastic rounding takes its bits from ``key`` or, explicitly, from ``random``: exactly one of
    them with ``rounding="stochastic"``, neither otherwise. Returns whether the bits are explicit
    (`random_arg` checks them once the input's shape is known)."""
    stochastic = rounding == "stochastic"
    if random is None:
        key_arg(key, stochastic, what=f"rounding={rounding!r}")
        return False
    if not stochastic:
        raise ValueError(f"random is only used with rounding='stochastic', not {rounding!r}")
    if key is not None:
        raise ValueError(
            "rounding='stochastic' takes key= (random bits drawn from it) or random= (the bits themselves), not both"
        )
    return True


def random_values_arg(
    value: Any, random_bits: int, shape: tuple[int, ...], name: str = "random", what: str = "the input's shape"
) -> jax.Array:
    """Explicit random bits of stochastic rounding: integers in ``[0, 2**random_bits)``, broadcastable to
    ``shape`` (``what`` names it in the error), as they are: a uint32 array of the given shape.

    Concrete values out of range are an error; traced ones (under ``jit``) are not checked.
    """
    if isinstance(value, (bool, np.bool_)) or (hasattr(value, "dtype") and np.dtype(value.dtype) == np.bool_):
        raise TypeError(f"{name} must be an integer array of random bits, got a bool")
    if isinstance(value, (int, np.integer)):
        value = np.asarray(value)
    if not isinstance(value, (jax.Array, np.ndarray)):
        value = np.asarray(value) if isinstance(value, (list, tuple)) else value
    if not isinstance(value, (jax.Array, np.ndarray)) or not np.issubdtype(np.dtype(value.dtype), np.integer):
        kind = f"dtype {value.dtype}" if hasattr(value, "dtype") else type(value).__name__
        raise TypeError(f"{name} must be an integer array of random bits (one per element), got {kind}")
    try:
        broadcast = np.broadcast_shapes(tuple(value.shape), tuple(shape))
    except ValueError:
        broadcast = None
    if broadcast != tuple(shape):
        raise ValueError(f"{name} of shape {tuple(value.shape)} does not broadcast to {what} {tuple(shape)}")
    if not isinstance(value, jax.core.Tracer) and value.size:
        low, high = int(np.min(value)), int(np.max(value))
        if low < 0 or high >= 1 << random_bits:
            raise ValueError(
                f"{name} must hold integers in [0, 2**{random_bits}) (random_bits={random_bits}), got "
                f"{low if low < 0 else high}"
            )
    if isinstance(value, np.ndarray):
        value = np.asarray(value, np.uint64).astype(np.uint32)  # in range: exact, whatever x64 says
    return jnp.asarray(value).astype(jnp.uint32)


def random_arg(
    value: Any, random_bits: int, shape: tuple[int, ...], name: str = "random", what: str = "the input's shape"
) -> jax.Array:
    """Explicit random bits of stochastic rounding (`random_values_arg`) as uint32 words with the bits
    at the top (the layout of the keyed path's bits).

    Concrete values out of range are an error; traced ones (under ``jit``) are not checked, and their
    low ``random_bits`` bits are used.
    """
    words = random_values_arg(value, random_bits, shape, name, what)
    return words << jnp.uint32(32 - random_bits) if random_bits < 32 else words


def random_streams_arg(value: Any, streams: Sequence[str], name: str = "random") -> dict[str, Any]:
    """Explicit random bits of an op with several stochastic roundings: a mapping from each of the
    call's ``streams`` (the names of the roundings that draw bits) to its bits, no name missing and
    none other; the bits themselves are checked where the shapes are known (`random_values_arg`)."""
    valid = ", ".join(map(repr, streams)) if streams else "none: no rounding of this call is stochastic"
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a dict from the call's stochastic roundings to their random bits (keys: {valid}), "
            f"got {type(value).__name__}"
        )
    unknown = [k for k in value if k not in streams]
    if unknown:
        raise ValueError(
            f"{name} has the key {unknown[0]!r}, which no stochastic rounding of this call uses; valid keys: {valid}"
        )
    missing = [k for k in streams if k not in value]
    if missing:
        raise ValueError(
            f"{name} lacks the key {missing[0]!r} (the random bits of that rounding); it needs the keys {valid}"
        )
    return {k: value[k] for k in streams}


def key_or_streams_arg(key: Any, random: Any, stochastic: bool, what: str) -> bool:
    """Stochastic rounding in an op with several roundings takes its bits from ``key`` or, explicitly,
    from ``random`` (`random_streams_arg`): exactly one of them when ``stochastic``, neither otherwise.
    Returns whether the bits are explicit."""
    if random is None:
        if stochastic and key is None:
            raise ValueError(f"{what} needs key=jax.random.key(...) (or the random bits themselves, random=)")
        key_arg(key, stochastic, "key", what=what)
        return False
    if not stochastic:
        raise ValueError(f"random is only used with stochastic rounding, not {what}")
    if key is not None:
        raise ValueError(f"{what} takes key= (random bits drawn from it) or random= (the bits themselves), not both")
    return True


def bit_source_arg(value: Any, stochastic: bool, has_key: bool, name: str = "random") -> Any:
    """A source of random bits, ``value(key, shape, random_bits) -> integers``, or None; only for
    stochastic rounding, and since a source derives each site's bits from that site's key, with a key."""
    if value is None:
        return None
    if not stochastic:
        raise ValueError(f"{name}= is only used with a stochastic policy (rounding='stochastic')")
    if not callable(value):
        raise TypeError(
            f"{name} must be a function (key, shape, random_bits) -> random bits, such as fpemu.stochastic_bits, "
            f"got {type(value).__name__}"
        )
    if not has_key:
        raise ValueError(f"{name} gives the bits of each rounding site from the site's key: pass key= as well")
    return value


def _is_typed_key(key: Any) -> bool:
    return isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


def key_arg(key: Any, stochastic: bool, name: str = "key", what: str = "rounding='stochastic'") -> Any:
    """The PRNG key of stochastic rounding: required when ``stochastic``, refused otherwise.

    A key is one typed key (``jax.random.key``) or one legacy ``uint32`` key array
    (``jax.random.PRNGKey``, shape ``(2,)`` or the implementation's key width).
    """
    if not stochastic:
        if key is not None:
            raise ValueError(f"{name} is only used with stochastic rounding, not {what}")
        return None
    if key is None:
        raise ValueError(f"{what} needs {name}=jax.random.key(...)")
    if _is_typed_key(key):
        if key.shape != ():
            raise ValueError(
                f"{name} must be a single PRNG key, got a key array of shape {key.shape}; vmap over keys instead"
            )
        return key
    widths = _legacy_key_widths()
    if isinstance(key, (jax.Array, np.ndarray)) and key.dtype == np.uint32 and key.ndim == 1:
        if key.shape[0] in widths:
            return key
        raise TypeError(
            f"{name} must be a single JAX PRNG key (jax.random.key(...) or jax.random.PRNGKey(...)); a legacy "
            f"uint32 key has shape {' or '.join(f'({w},)' for w in sorted(widths))}, got shape {key.shape}"
        )
    shape = f" of shape {key.shape}" if hasattr(key, "shape") else ""
    dtype = f" and dtype {key.dtype}" if hasattr(key, "dtype") else ""
    raise TypeError(
        f"{name} must be a single JAX PRNG key (jax.random.key(...) or jax.random.PRNGKey(...)), got "
        f"{type(key).__name__}{shape}{dtype}"
    )


# The lengths of a legacy uint32 key (jax.random.PRNGKey) under JAX's PRNG implementations: 2 words for
# threefry2x32 (the default), 4 for rbg and unsafe_rbg.
_LEGACY_KEY_WIDTHS = frozenset({2, 4})


def _legacy_key_widths() -> frozenset[int]:
    return _LEGACY_KEY_WIDTHS


def key_words(key: Any) -> jax.Array:
    """The uint32 words of a key (typed or legacy), any leading batch shape kept, words last."""
    if _is_typed_key(key):
        return jax.random.key_data(key)
    return jnp.asarray(key)


# -- collections ------------------------------------------------------------------------------------


def tuple_arg(values: Iterable[Any] | Any) -> tuple[Any, ...]:
    """One value or an iterable of values (a string counts as one value), as a tuple."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        return (values,)
    return tuple(values)
