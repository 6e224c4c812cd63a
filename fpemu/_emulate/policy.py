"""`Policy` and `DotPolicy`: what `fpemu.emulate` rounds, to which format, and how.

Both are frozen, keyword-only, hashable dataclasses (usable as ``jax.jit`` static arguments).
Every field is validated and normalised here, in ``__post_init__``: format names become
`fpemu.Format` objects (so ``"bf16"`` and ``"bfloat16"`` give equal policies), mappings become
sorted tuples of pairs. A bad field raises ``ValueError``/``TypeError`` quoting the field and the
valid choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np

from fpemu._args import bool_arg, format_arg, random_bits_arg, rounding_arg
from fpemu._core.format import Format
from fpemu._core.modes import Rounding
from fpemu._core.registry import FormatLike
from fpemu._emulate.registry import ROUNDED_PRIMITIVES


def _format_field(value: Any, field: str, *, optional: bool = True) -> Format | None:
    """A format field (a name, a dtype or a `Format`; None if ``optional``) as a `Format`. Errors
    quote the field and the value given: ``Policy.default='e9m9': unknown format ...``."""
    if value is None and optional:
        return None
    return format_arg(value, field if value is None else f"{field}={value!r}")


def _name(fmt: Any) -> str:
    """How a repr shows a normalised format field (a `Format` or None)."""
    return "None" if fmt is None else repr(fmt.name)


# Format fields are typed as what users may pass (`FormatLike`); __post_init__ normalises them to
# `Format` (or None), and readers cast to the normalised type. ``Policy.overrides`` becomes:
_Overrides = tuple[tuple[str, Format | None], ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DotPolicy:
    """How `fpemu.emulate` computes ``dot_general`` (or ``conv_general_dilated``) primitives.

    The primitive is computed by `fpemu.dot_general` / `fpemu.conv_general_dilated`: operands
    rounded to ``lhs`` / ``rhs``, exact products, a running sum in ``accumulate`` (rounded after
    every ``accumulate_every`` products along the contraction when set), the result rounded to
    ``out``. ``None`` for ``lhs``/``rhs`` leaves that operand as it is; ``out=None`` rounds the
    result like any other primitive result (the `Policy`'s override for the primitive, else its
    ``default``). The operands' and output's rounding mode and saturation come from the `Policy`;
    the running sum is rounded in ``accumulate_rounding`` (None: nearest_even).

    Example:
      >>> import fpemu
      >>> fpemu.DotPolicy(lhs="e4m3fn", rhs="float8_e5m2").rhs.name
      'e5m2'
      >>> fpemu.DotPolicy(lhs="e4m3fn") == fpemu.DotPolicy(lhs="float8_e4m3fn")
      True
    """

    lhs: FormatLike | None = None  # format of the left operand (None: as it is)
    rhs: FormatLike | None = None  # format of the right operand (None: as it is)
    accumulate: FormatLike = "fp32"  # format of the running sum
    out: FormatLike | None = None  # format of the result (None: the Policy's format for the primitive)
    accumulate_every: int | None = None  # round the running sum every this many products (None: only at the end)
    accumulate_rounding: Rounding | None = None  # rounding of the running sum (None: nearest_even)

    def __post_init__(self) -> None:
        for field in ("lhs", "rhs", "out"):
            object.__setattr__(self, field, _format_field(getattr(self, field), f"DotPolicy.{field}"))
        accumulate = _format_field(self.accumulate, "DotPolicy.accumulate", optional=False)
        object.__setattr__(self, "accumulate", accumulate)
        every = self.accumulate_every
        if every is not None and (not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 1):
            raise ValueError(f"DotPolicy.accumulate_every must be None or a positive int, got {every!r}")
        object.__setattr__(self, "accumulate_every", None if every is None else int(every))
        if self.accumulate_rounding is not None:
            rounding_arg(self.accumulate_rounding, "DotPolicy.accumulate_rounding")

    def __repr__(self) -> str:
        return (
            f"DotPolicy(lhs={_name(self.lhs)}, rhs={_name(self.rhs)}, accumulate={_name(self.accumulate)}, "
            f"out={_name(self.out)}, accumulate_every={self.accumulate_every}, "
            f"accumulate_rounding={self.accumulate_rounding!r})"
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """What `fpemu.emulate` rounds, to which format, and how.

    Fields come in three groups, as in qwix: *what to round to* (``default``, ``overrides``,
    ``dot``, ``conv``), *how to round* (``rounding``, ``saturate``, ``subnormals``,
    ``random_bits``) and *where* (``exclude``, ``round_inputs``, ``passthrough_unknown``).
    The full contract, with the table of primitives, is in docs/emulate.md.

    A plain format (``"bf16"``, a dtype or a `Format`) given to `fpemu.emulate` means
    ``Policy(default=fmt)``.

    Example:
      >>> import fpemu
      >>> p = fpemu.Policy(default="bf16", overrides={"exp": "fp32", "reduce_sum": "float32"})
      >>> p.default.name, [(name, fmt.name) for name, fmt in p.overrides]
      ('bf16', [('exp', 'fp32'), ('reduce_sum', 'fp32')])
      >>> p == fpemu.Policy(default="bfloat16", overrides=(("reduce_sum", "fp32"), ("exp", "fp32")))
      True
      >>> fpemu.Policy(rounding="nearest")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: Policy.rounding must be one of 'nearest_even', ...; did you mean 'nearest_even', 'nearest_away'? got 'nearest'
    """

    # -- what to round to (configs) -----------------------------------------------------------------
    default: FormatLike | None = None  # format of every floating-point result (None: leave results alone)
    overrides: Mapping[str, FormatLike | None] | tuple[tuple[str, Format | None], ...] = ()  # primitive -> format
    dot: DotPolicy | None = None  # dot_general: operand/accumulator/output formats (None: a rounded primitive)
    conv: DotPolicy | None = None  # conv_general_dilated (None: follow `dot`)
    # -- how to round -------------------------------------------------------------------------------
    rounding: Rounding = "nearest_even"
    saturate: bool = False  # clamp overflow (and infinities) to ±max
    subnormals: bool = True  # False: flush subnormal results to ±0
    random_bits: int | None = None  # random bits per element for rounding="stochastic" (None: 32)
    # -- where (keys) -------------------------------------------------------------------------------
    exclude: tuple[str, ...] = ()  # primitive names and named scopes left entirely alone
    round_inputs: bool = True  # round the function's floating-point arguments to `default` on entry
    passthrough_unknown: bool = False  # a primitive without a rule: bind it and round its results (else raise)

    def __post_init__(self) -> None:
        object.__setattr__(self, "default", _format_field(self.default, "Policy.default"))
        object.__setattr__(self, "overrides", self._overrides(self.overrides))
        for field in ("dot", "conv"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, DotPolicy):
                kind = type(value).__name__
                raise TypeError(f"Policy.{field} must be a fpemu.DotPolicy or None, got {kind} {value!r}")
        rounding_arg(self.rounding, "Policy.rounding")
        for field in ("saturate", "subnormals", "round_inputs", "passthrough_unknown"):
            object.__setattr__(self, field, bool_arg(getattr(self, field), f"Policy.{field}"))
        if self.random_bits is not None:  # None stays None: the default of fpemu.quantize
            bits = random_bits_arg(self.random_bits, self.rounding == "stochastic", "Policy.random_bits", self.rounding)
            object.__setattr__(self, "random_bits", bits)
        object.__setattr__(self, "exclude", self._exclude(self.exclude))
        if self.overrides and not self.passthrough_unknown:
            unknown = [name for name, _ in cast(_Overrides, self.overrides) if name not in ROUNDED_PRIMITIVES]
            if unknown:
                raise ValueError(
                    f"Policy.overrides: {', '.join(map(repr, unknown))} "
                    f"{'is not a primitive' if len(unknown) == 1 else 'are not primitives'} whose results emulate "
                    f"rounds; valid names: {', '.join(sorted(ROUNDED_PRIMITIVES))} (or set passthrough_unknown=True to "
                    "override a primitive fpemu has no rule for)"
                )

    @staticmethod
    def _overrides(value: Any) -> _Overrides:
        if isinstance(value, Mapping):
            items = list(value.items())
        else:
            try:
                items = [tuple(item) for item in value]
            except TypeError:
                raise TypeError(
                    f"Policy.overrides must be a mapping or pairs of (primitive name, format), got {value!r}"
                ) from None
        out: dict[str, Format | None] = {}
        for item in items:
            if len(item) != 2 or not isinstance(item[0], str):
                raise TypeError(f"Policy.overrides entries must be (primitive name, format) pairs, got {item!r}")
            name, fmt = item
            if name in out:
                raise ValueError(f"Policy.overrides names {name!r} twice")
            out[name] = _format_field(fmt, f"Policy.overrides[{name!r}]")
        return tuple(sorted(out.items()))

    @staticmethod
    def _exclude(value: Any) -> tuple[str, ...]:
        names: Iterable[Any] = (value,) if isinstance(value, str) else value
        try:
            names = tuple(names)
        except TypeError:
            raise TypeError(
                f"Policy.exclude must be a string or strings (primitive or scope names), got {value!r}"
            ) from None
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"Policy.exclude entries must be non-empty strings, got {name!r}")
        return tuple(dict.fromkeys(names))

    def format_for(self, primitive: str) -> Format | None:
        """The format the results of ``primitive`` are rounded to (the override, else ``default``).

        Example:
          >>> import fpemu
          >>> p = fpemu.Policy(default="e4m3fn", overrides={"exp": "bf16", "log": None})
          >>> p.format_for("exp").name, p.format_for("mul").name, p.format_for("log")
          ('bf16', 'e4m3fn', None)
        """
        for name, fmt in cast(_Overrides, self.overrides):
            if name == primitive:
                return fmt
        return cast("Format | None", self.default)

    @property
    def stochastic(self) -> bool:
        """Whether any rounding of this policy is stochastic (then `fpemu.emulate` needs a key)."""
        dots = (self.dot, self.conv)
        accumulators = [d.accumulate_rounding for d in dots if d is not None]
        return self.rounding == "stochastic" or "stochastic" in accumulators

    @property
    def conv_policy(self) -> DotPolicy | None:
        """The `DotPolicy` for convolutions: ``conv``, else ``dot``."""
        return self.conv if self.conv is not None else self.dot

    def __repr__(self) -> str:
        pairs = cast(_Overrides, self.overrides)
        overrides = "{" + ", ".join(f"{name!r}: {_name(fmt)}" for name, fmt in pairs) + "}"
        return (
            f"Policy(default={_name(self.default)}, overrides={overrides}, dot={self.dot!r}, conv={self.conv!r}, "
            f"rounding={self.rounding!r}, saturate={self.saturate}, subnormals={self.subnormals}, "
            f"random_bits={self.random_bits}, exclude={self.exclude!r}, round_inputs={self.round_inputs}, "
            f"passthrough_unknown={self.passthrough_unknown})"
        )


def as_policy(policy: Policy | FormatLike) -> Policy:
    """A `Policy` from a `Policy` or a plain format (name, dtype, `Format`: ``Policy(default=fmt)``)."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, DotPolicy):
        raise TypeError("emulate needs a fpemu.Policy; wrap the DotPolicy: fpemu.Policy(dot=fpemu.DotPolicy(...))")
    if policy is None:
        raise TypeError("policy must be a fpemu.Policy or a format (e.g. 'bf16'), got None")
    try:
        return Policy(default=policy)
    except (ValueError, TypeError) as err:
        raise type(err)(f"policy must be a fpemu.Policy or a format name/dtype/Format: {err}") from None
