"""`DotPolicy`: the one public record of an emulated dot's numerics.

`fpemu.emulate` computes a ``dot_general``/``conv_general_dilated`` primitive as a `DotPolicy` says
(``Policy(dot=...)``), and `fpemu.dot_general`, `fpemu.matmul`, `fpemu.conv_general_dilated`,
`fpemu.kernels.matmul_kernel` and `fpemu.testing.dot_general_reference` take the same record as
``policy=`` (their keyword options ``lhs=``, ``rhs=``, ``accumulate=``... are a convenience for it).
`fpemu._ops.matmul_config` turns either form into the checked `MatmulConfig`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fpemu._args import format_arg, rounding_arg
from fpemu._core.format import Format
from fpemu._core.modes import Rounding
from fpemu._core.registry import FormatLike, UnknownFormatError
from fpemu._ops.tensor_core import ACCUMULATOR_MODELS

__all__ = ["DOT_POLICY_FIELDS", "DotPolicy", "format_name"]


def _format_field(value: Any, field: str, *, optional: bool = True) -> Format | None:
    """A format field (a name, a dtype or a `Format`; None if ``optional``) as a `Format`. An unknown
    name's error also says where a training recipe's name goes (``Policy(dot=name)``)."""
    if value is None and optional:
        return None
    try:
        return format_arg(value, field if value is None else f"{field}={value!r}")
    except UnknownFormatError as err:
        if isinstance(value, str):
            raise UnknownFormatError(
                f"{err}. A DotPolicy's fields are element formats; if {value!r} is a training or inference recipe "
                f"(scaled operands in the GEMMs: fpemu.TRAINING_RECIPES, fpemu.INFERENCE_RECIPES), use "
                f"fpemu.Policy(dot={value!r})"
            ) from None
        raise err from None


def format_name(fmt: Any) -> str:
    """How a repr shows a normalised format field (a `Format`, None, or an accumulator model's name)."""
    return "None" if fmt is None else repr(fmt if isinstance(fmt, str) else fmt.name)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DotPolicy:
    """The numerics of one emulated dot (or convolution): operand formats, accumulator, chunking, output.

    Operands are rounded to ``lhs`` / ``rhs``, products are exact, the running sum is kept in
    ``accumulate`` (rounded after every ``accumulate_every`` products along the contraction when set,
    in ``accumulate_rounding``: None is nearest_even; or an accumulator model such as ``"hopper_fp8"``),
    and the result is rounded to ``out``. ``None`` for ``lhs``/``rhs`` leaves that operand as it is.
    ``out=None``: under `fpemu.emulate`, the result is rounded like any other primitive result (the
    `Policy`'s override for the primitive, else its ``default``); in `fpemu.dot_general` and its
    siblings, it is not rounded. The operands' and output's rounding mode and saturation are the
    caller's: the `Policy`'s under `emulate`, the ``rounding=``/``saturate=``... keywords of
    `fpemu.dot_general`.

    Where it is used: ``fpemu.Policy(dot=DotPolicy(...))`` (and ``conv=``) under `fpemu.emulate`, and
    ``policy=`` of `fpemu.dot_general`, `fpemu.matmul`, `fpemu.conv_general_dilated`,
    `fpemu.kernels.matmul_kernel` and `fpemu.testing.dot_general_reference` (instead of their
    keywords ``lhs``, ``rhs``, ``accumulate``, ``out``, ``accumulate_every``, ``accumulate_rounding``).

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> fpemu.DotPolicy(lhs="e4m3fn", rhs="float8_e5m2").rhs.name
      'e5m2'
      >>> fpemu.DotPolicy(lhs="e4m3fn") == fpemu.DotPolicy(lhs="float8_e4m3fn")
      True
      >>> ones = jnp.ones((1, 4096), jnp.float32)
      >>> fpemu.matmul(ones, ones.T, policy=fpemu.DotPolicy(accumulate="bf16")).tolist()  # stagnates at 256
      [[256.0]]
    """

    lhs: FormatLike | None = None  # format of the left operand (None: as it is)
    rhs: FormatLike | None = None  # format of the right operand (None: as it is)
    accumulate: FormatLike = "fp32"  # format of the running sum, or an accumulator model ("hopper_fp8")
    out: FormatLike | None = None  # format of the result (None: see the docstring)
    accumulate_every: int | None = None  # round the running sum every this many products (None: only at the end)
    accumulate_rounding: Rounding | None = None  # rounding of the running sum (None: nearest_even)

    def __post_init__(self) -> None:
        for field in ("lhs", "rhs", "out"):
            object.__setattr__(self, field, _format_field(getattr(self, field), f"DotPolicy.{field}"))
        if not (isinstance(self.accumulate, str) and self.accumulate in ACCUMULATOR_MODELS):  # a model stays its name
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
            f"DotPolicy(lhs={format_name(self.lhs)}, rhs={format_name(self.rhs)}, "
            f"accumulate={format_name(self.accumulate)}, out={format_name(self.out)}, "
            f"accumulate_every={self.accumulate_every}, accumulate_rounding={self.accumulate_rounding!r})"
        )


#: The keyword options of `fpemu.dot_general` (and its siblings) that a `DotPolicy` holds.
DOT_POLICY_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(DotPolicy))
