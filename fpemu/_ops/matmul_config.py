"""The options of an emulated dot, checked once: `matmul`, `dot_general`, `conv_general_dilated`, the kernel.

`MatmulOptions` holds the keyword options as the caller passed them; it is the one place
their names, types and defaults are written (every public signature repeats them for its users,
and tests/ops/test_matmul.py checks that the signatures agree). `matmul_call` checks one call, through
the argument layer (`fpemu._args`): the operands, the op's geometry, the options against the
operands' formats (`matmul_config`, which returns the static `MatmulConfig`) and the scales. The
fast path, the Pallas kernel and the sequential reference (`fpemu.testing.dot_general_reference`)
all start from it, so they agree on what a call means and on every error.

Random bits: the one ``key`` is split into four independent streams, in the order `KEY_LHS`,
`KEY_RHS`, `KEY_ACC`, `KEY_OUT` (`key_streams`), and the running sum's stream again into one key
per chunk (`chunk_key_words`). Instead of a key, ``random`` passes the bits themselves, one array
per stochastic rounding of the call (`random_streams`: ``"lhs"``, ``"rhs"``, ``"accumulate"``,
``"out"``), checked against the call's shapes by `matmul_call`. docs/matmul.md is the contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from fpemu import _args
from fpemu._core.format import Format, fits
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike, UnknownFormatError, get_format
from fpemu._engine import rng
from fpemu._ops.dot_policy import DOT_POLICY_FIELDS, DotPolicy
from fpemu._ops.geometry import Geometry
from fpemu._ops.tensor_core import ACCUMULATOR_MODELS, TensorCore, tensor_core

__all__ = [
    "KEY_ACC",
    "KEY_LHS",
    "KEY_OUT",
    "KEY_RHS",
    "MatmulCall",
    "MatmulConfig",
    "MatmulOptions",
    "chunk_key_words",
    "key_streams",
    "matmul_call",
    "matmul_config",
    "random_streams",
    "with_policy",
]

# The streams of the one `key` argument: jax.random.split(key, 4) in this order.
KEY_LHS, KEY_RHS, KEY_ACC, KEY_OUT = range(4)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulOptions:
    """The keyword options of every emulated dot, as passed; `dot_general`'s docstring says what each means."""

    # In the order of the public signatures.
    lhs: FormatLike | None = None  # the operands' formats (None: as they are)
    rhs: FormatLike | None = None
    accumulate: FormatLike | None = "fp32"  # the running sum's format (None: W), or an accumulator model
    out: FormatLike | None = None  # the output's format (None: no rounding)
    accumulate_every: int | None = None  # products per chunk
    rounding: Rounding = "nearest_even"  # of the operands and the output
    accumulate_rounding: Rounding | None = None  # of the running sum (None: nearest_even)
    saturate: Saturation = False  # every rounding
    stochastic_variant: StochasticVariant = "floor"  # every stochastic rounding
    exponent_ties: ExponentTies = "away"  # nearest-even ties in formats without mantissa bits
    key: jax.Array | None = None  # stochastic rounding
    random: Mapping[str, ArrayLike] | None = None  # or its bits: {"lhs", "rhs", "accumulate", "out"} -> bits
    # Per-tensor scales, and the result dtype (None: W).
    lhs_scale: ArrayLike | None = None
    rhs_scale: ArrayLike | None = None
    preferred_element_type: DTypeLike | None = None
    # The dot's numerics as one record, instead of lhs= ... accumulate_rounding= (`with_policy`).
    policy: DotPolicy | None = None


def with_policy(options: MatmulOptions) -> MatmulOptions:
    """``options`` with ``policy``'s fields in place of the keywords it holds (`DOT_POLICY_FIELDS`).

    Raises:
      TypeError: ``policy`` is not a `DotPolicy`.
      ValueError: ``policy`` and one of the keywords it holds are both given (naming the keyword).
    """
    policy = options.policy
    if policy is None:
        return options
    if not isinstance(policy, DotPolicy):
        raise TypeError(f"policy must be a fpemu.DotPolicy or None, got {type(policy).__name__} {policy!r}")
    defaults = {field.name: field.default for field in dataclasses.fields(MatmulOptions)}
    # a keyword at its default gives way to the policy (the signatures cannot tell it from one not passed)
    both = [name for name in DOT_POLICY_FIELDS if getattr(options, name) != defaults[name]]
    if both:
        raise ValueError(
            f"pass the dot's numerics either as policy= or as keywords, not both: got policy={policy!r} and "
            + ", ".join(f"{name}={getattr(options, name)!r}" for name in both)
        )
    return dataclasses.replace(options, policy=None, **{name: getattr(policy, name) for name in DOT_POLICY_FIELDS})


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """Validated, static options of one emulated dot (hashable: a jit static argument)."""

    lhs: Format | None  # operand formats (None: the operand is used as it is, in W)
    rhs: Format | None
    accumulate: Format  # the running sum's format
    accumulate_every: int | None  # products per chunk; None: one dot, no intermediate rounding
    out: Format | None  # the output's format (None: no rounding beyond W and the result dtype)
    rounding: Rounding  # operands and output
    accumulate_rounding: Rounding  # the running sum
    saturate: Saturation
    stochastic_variant: StochasticVariant  # of every stochastic rounding ("floor" when none is stochastic)
    exponent_ties: ExponentTies
    work: str  # W: "float32" or "float64"
    result: str  # the result dtype
    bf16_operands: bool  # both operands hold bfloat16 values: the dots take bfloat16 operands
    direct: bool  # the accumulator is W itself: its additions are W additions (round to nearest even)
    explicit_random: bool = False  # stochastic bits passed as arrays (`random=`), not drawn from `key`
    tensor_core: TensorCore | None = None  # accumulate=<a model>: chunks summed as that hardware does

    @property
    def operands_stochastic(self) -> bool:
        return self.rounding == "stochastic"

    @property
    def accumulate_stochastic(self) -> bool:
        return self.accumulate_every is not None and self.accumulate_rounding == "stochastic"

    def rounding_options(self, rounding: Rounding | None = None) -> dict[str, Any]:
        """The keyword options of `fpemu.quantize` for one of the call's roundings, in ``rounding``
        (None: the operands' and output's ``rounding``)."""
        rounding = self.rounding if rounding is None else rounding
        variant = self.stochastic_variant if rounding == "stochastic" else "floor"
        return dict(
            rounding=rounding, saturate=self.saturate, stochastic_variant=variant, exponent_ties=self.exponent_ties
        )


def _check_work_fits(fmt: Format | None, work: Format, name: str) -> None:
    """An option's format against the working dtype W (`_args.check_fits` is about input arrays)."""
    if fmt is not None and not fits(fmt, work):
        hint = (
            " (float64 inputs, with jax.config.update('jax_enable_x64', True), compute in float64)"
            if work.name == "fp32"
            else ""
        )
        raise ValueError(f"{name}={fmt.name!r} has values that the working dtype {work.name} cannot hold exactly{hint}")


def _result_dtype(preferred_element_type: Any, work: Format) -> np.dtype:
    """The result dtype: W for None, else one of `_args.INPUT_DTYPES` (float64 under x64 only)."""
    if preferred_element_type is None:
        return np.dtype(work.dtype)
    try:
        result = np.dtype(preferred_element_type)
    except TypeError:
        raise TypeError(
            f"preferred_element_type must be a float dtype or None, got {preferred_element_type!r}"
        ) from None
    if result.name not in _args.INPUT_DTYPES:
        raise TypeError(
            f"preferred_element_type must be one of {', '.join(_args.INPUT_DTYPES)} or None, got {result.name}"
        )
    if result.name == "float64" and not jax.config.read("jax_enable_x64"):
        raise ValueError("preferred_element_type=float64 needs jax.config.update('jax_enable_x64', True)")
    return result


def _accumulate_format(value: Any) -> Format | None:
    """``accumulate=`` as a format (None stays None); an unknown name also lists the accumulator models."""
    try:
        return _args.optional_format_arg(value, "accumulate")
    except UnknownFormatError as err:
        raise UnknownFormatError(
            f"{err}; accumulate also takes an accumulator model: {', '.join(map(repr, ACCUMULATOR_MODELS))}"
        ) from None


def matmul_config(a_fmt: Format, b_fmt: Format, options: MatmulOptions) -> MatmulConfig:
    """Check ``options`` for operands of these input formats; every error names the argument."""
    wide = jax.config.read("jax_enable_x64") and "fp64" in (a_fmt.name, b_fmt.name)
    work = get_format("fp64" if wide else "fp32")
    lhs = _args.optional_format_arg(options.lhs, "lhs")
    rhs = _args.optional_format_arg(options.rhs, "rhs")
    out = _args.optional_format_arg(options.out, "out")
    model = (
        options.accumulate if isinstance(options.accumulate, str) and options.accumulate in ACCUMULATOR_MODELS else None
    )
    acc = work if model else _accumulate_format(options.accumulate) or work
    for fmt, name in ((lhs, "lhs"), (rhs, "rhs"), (acc, "accumulate"), (out, "out")):
        _check_work_fits(fmt, work, name)
    rounding = cast(Rounding, _args.rounding_arg(options.rounding, "rounding"))
    acc_rounding = cast(
        Rounding,
        _args.rounding_arg(
            "nearest_even" if options.accumulate_rounding is None else options.accumulate_rounding,
            "accumulate_rounding",
        ),
    )
    saturate = cast(Saturation, _args.saturate_arg(options.saturate))
    stochastic = rounding == "stochastic" or acc_rounding == "stochastic"
    variant = cast(StochasticVariant, _args.stochastic_variant_arg(options.stochastic_variant, stochastic, rounding))
    ties = cast(ExponentTies, _args.exponent_ties_arg(options.exponent_ties))
    every = options.accumulate_every
    if every is not None:
        every = _args.int_arg(every, "accumulate_every", minimum=1)

    direct = acc.encoding == work.encoding
    if model and acc_rounding != "nearest_even":
        raise ValueError(
            f"accumulate_rounding={acc_rounding!r} with accumulate={model!r}: the tensor core's sum is its own "
            f"(truncated), and its promotion to {work.name} every accumulate_every products is a {work.name} "
            "addition, which rounds to nearest even"
        )
    if not direct and acc.mantissa_bits > work.mantissa_bits - 2:
        raise ValueError(
            f"accumulate={acc.name!r} has {acc.mantissa_bits} mantissa bits; the running sum is rounded exactly "
            f"only for formats of at most {work.mantissa_bits - 2} ({work.name} minus 2), or {work.name} itself"
        )
    if direct and acc_rounding != "nearest_even":
        raise ValueError(
            f"accumulate_rounding={acc_rounding!r} with accumulate={acc.name!r}: a {work.name} running sum is a "
            f"{work.name} addition, which rounds to nearest even; directed and stochastic accumulation need an "
            f"accumulate format of at most {work.mantissa_bits - 2} mantissa bits (e.g. 'bf16', 'fp16')"
        )
    if every is None and not direct:
        every = 1  # a narrow accumulator: the sequential model, rounded after every product

    result = _result_dtype(options.preferred_element_type, work)
    result_fmt = get_format(result)
    if out is None and not fits(work, result_fmt):
        out = result_fmt  # a narrower result dtype: its rounding is the output rounding, in `rounding`
    if out is not None and not fits(out, result_fmt):
        raise ValueError(f"out={out.name!r} has values that preferred_element_type={result.name} cannot hold exactly")

    what = (
        "stochastic rounding (rounding= or accumulate_rounding='stochastic')"
        if stochastic
        else f"rounding={rounding!r}, accumulate_rounding={acc_rounding!r}"
    )
    explicit = _args.key_or_streams_arg(options.key, options.random, stochastic, what)
    bf16 = get_format("bf16")
    lhs_values = lhs or (a_fmt if options.lhs_scale is None and a_fmt.name != "fp64" else work)
    rhs_values = rhs or (b_fmt if options.rhs_scale is None and b_fmt.name != "fp64" else work)
    tc = tensor_core(model, lhs_values, rhs_values, every, work) if model else None
    cfg = MatmulConfig(
        lhs=lhs,
        rhs=rhs,
        accumulate=acc,
        accumulate_every=every,
        out=out,
        rounding=rounding,
        accumulate_rounding=acc_rounding,
        saturate=saturate,
        stochastic_variant=variant,
        exponent_ties=ties,
        work=np.dtype(work.dtype).name,
        result=result.name,
        bf16_operands=work.name == "fp32" and fits(lhs_values, bf16) and fits(rhs_values, bf16),
        direct=direct,
        explicit_random=explicit,
        tensor_core=tc,
    )
    if explicit:
        _args.random_streams_arg(options.random, random_streams(cfg))
    return cfg


def random_streams(cfg: MatmulConfig) -> tuple[str, ...]:
    """The names of the call's stochastic roundings, the keys of its ``random=``: ``"lhs"`` and ``"rhs"``
    (operands with a format), ``"accumulate"`` (the running sum), ``"out"`` (the output, also a
    rounding to a narrower result dtype)."""
    streams = []
    if cfg.operands_stochastic:
        streams += [name for name, fmt in (("lhs", cfg.lhs), ("rhs", cfg.rhs)) if fmt is not None]
    if cfg.accumulate_stochastic:
        streams.append("accumulate")
    if cfg.operands_stochastic and cfg.out is not None:
        streams.append("out")
    return tuple(streams)


# -- one call ---------------------------------------------------------------------------------------


def _operand(x: Any, name: str) -> tuple[Any, Format]:
    """(the operand, its input format); host float64 arrays stay NumPy (quantize rounds them from float64)."""
    if _args.is_host_float64(x):
        return np.asarray(x, np.float64), get_format("fp64")
    x = _args.float_array(x, name)
    return x, _args.input_format(x.dtype, name=name)


def _scale(scale: Any, name: str, work: np.dtype) -> jax.Array | None:
    """A per-tensor scale as a W scalar (None stays None)."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.ndarray, np.generic, jax.Array)):
        raise TypeError(f"{name} must be a float scalar (a per-tensor scale), got {type(scale).__name__}")
    if not isinstance(scale, (int, float)):
        if np.ndim(scale) != 0:
            raise ValueError(f"{name} must be a scalar (one per-tensor scale), got shape {np.shape(scale)}")
        if not jnp.issubdtype(scale.dtype, jnp.floating):
            raise TypeError(f"{name} must be a float scalar, got dtype {scale.dtype}")
    return jnp.asarray(scale).astype(work) if isinstance(scale, jax.Array) else jnp.asarray(np.asarray(scale, work))


@dataclasses.dataclass(frozen=True)
class MatmulCall:
    """One checked call: its operands, geometry and static config, and its scales and key."""

    a: Any  # a JAX array, or a NumPy float64 array (host float64 while x64 is disabled)
    b: Any
    geometry: Geometry
    cfg: MatmulConfig
    lhs_scale: jax.Array | None  # W scalars
    rhs_scale: jax.Array | None
    key: Any
    random: dict[str, jax.Array] | None = None  # explicit bits (uint32, in the shapes given): `matmul_call`


def matmul_call(
    a: Any, b: Any, geometry: Callable[[Sequence[int], Sequence[int]], Geometry], options: MatmulOptions
) -> MatmulCall:
    """Check one call, in this order: the policy against the keywords (`with_policy`), the operands,
    their shapes (``geometry(a_shape, b_shape)`` returns the op's geometry or raises), the options,
    the scales."""
    options = with_policy(options)
    a, a_fmt = _operand(a, "a")
    b, b_fmt = _operand(b, "b")
    shapes = geometry(tuple(np.shape(a)), tuple(np.shape(b)))
    cfg = matmul_config(a_fmt, b_fmt, options)
    work = np.dtype(cfg.work)
    lhs_scale = _scale(options.lhs_scale, "lhs_scale", work)
    rhs_scale = _scale(options.rhs_scale, "rhs_scale", work)
    random = _random_bits(options.random, cfg, shapes, np.shape(a), np.shape(b)) if cfg.explicit_random else None
    return MatmulCall(a, b, shapes, cfg, lhs_scale, rhs_scale, options.key, random)


def _random_bits(
    random: Any, cfg: MatmulConfig, geometry: Geometry, a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> dict[str, jax.Array]:
    """Each stream's bits checked against the shape it rounds: the operands', the result's, and for
    the running sum (number of chunks,) + the result's."""
    every = cfg.accumulate_every or 1
    shapes = {
        "lhs": (a_shape, "the shape of a"),
        "rhs": (b_shape, "the shape of b"),
        "out": (geometry.out_shape, "the result's shape"),
        "accumulate": (
            (-(-geometry.contraction // every),) + geometry.out_shape,
            "(number of chunks,) + the result's shape",
        ),
    }
    return {
        name: _args.random_values_arg(bits, 32, shapes[name][0], f"random[{name!r}]", shapes[name][1])
        for name, bits in _args.random_streams_arg(random, random_streams(cfg)).items()
    }


# -- random bits ------------------------------------------------------------------------------------


def key_streams(key: Any) -> tuple[Any, Any, Any, Any]:
    """The four streams of ``key`` (index them with `KEY_LHS` ... `KEY_OUT`); four Nones for None."""
    if key is None:
        return (None, None, None, None)
    keys = rng.split(key, 4)
    return (keys[KEY_LHS], keys[KEY_RHS], keys[KEY_ACC], keys[KEY_OUT])


def chunk_key_words(key: Any, chunks: int) -> jax.Array:
    """The raw uint32 words of ``jax.random.split(key, chunks)``: one row per chunk of the running sum."""
    return _args.key_words(rng.split(key, chunks)).astype(jnp.uint32)
