"""The `Format` descriptor: the raw encoding facts of a floating-point format, and what follows from them.

A `Format` holds only what the bit layout says (exponent and mantissa widths, bias, signedness, where
zero, infinity and NaN live). Every number a user asks for (max, min_normal, eps, the NaN code, ...)
is derived here, exactly, so that there is one source of truth for each format.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, get_args

import numpy as np

Specials = Literal["ieee", "fn", "fnuz", "none", "p3109"]
SPECIALS: tuple[str, ...] = get_args(Specials)

_MAX_BITS = 64
_MAX_MANTISSA_BITS = 52  # values must be exact Python floats (float64): 53 significant bits at most
_F64_MAX_EXPONENT = 1023
_F64_MIN_SUBNORMAL_EXPONENT = -1074

# The NumPy / ml_dtypes dtype of each encoding that has one, filled by the registry (`bind_dtype`),
# which owns the table of built-in formats and their dtypes.
_DTYPE_BY_ENCODING: dict[tuple, np.dtype] = {}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Format:
    """A binary floating-point format, described by its encoding.

    A code is ``sign | exponent field E | mantissa field M`` (the sign bit only when ``signed``).
    With ``has_zero`` (the usual case), ``E == 0`` encodes zero and the subnormals
    ``M * 2**(1 - bias - mantissa_bits)`` and ``E >= 1`` encodes ``(1 + M / 2**mantissa_bits) * 2**(E - bias)``.
    Without ``has_zero`` (E8M0), every ``E`` is normal: ``(1 + M / 2**mantissa_bits) * 2**(E - bias)``.
    With no exponent field (``exponent_bits=0``: IEEE P3109 signed formats with P = K, OCP INT8)
    every value is a subnormal, ``M * 2**(1 - bias - mantissa_bits)``: a fixed-point format.

    ``specials`` says which codes are not finite numbers (K is ``bits``):

    - ``"ieee"``: the all-ones exponent holds ±infinity (``M == 0``) and NaN (``M != 0``), as in IEEE 754.
    - ``"fn"``: finite; only the all-ones magnitude code (all-ones exponent and mantissa) of each sign
      is NaN (OCP E4M3, E8M0's ``0xff``, and the unsigned finite P3109 formats' ``2**K - 1``).
    - ``"fnuz"``: finite, no negative zero; the negative-zero code ``0x80...`` is the only NaN (the
      signed finite P3109 formats).
    - ``"none"``: every code is a finite number (FP6, FP4, OCP INT8).
    - ``"p3109"``: the extended domain of IEEE P3109: infinity at the top magnitude code, one NaN.
      Signed: NaN is the negative-zero code ``2**(K-1)`` (0x80), ±infinity the all-ones magnitude
      codes (0x7F, 0xFF). Unsigned: +infinity is ``2**K - 2``, NaN ``2**K - 1``.

    ``twos_complement=True`` (OCP INT8, the MXINT8 element) stores signed codes as two's-complement
    integers: code ``c`` holds ``int(c) - 2**K`` quanta when its top bit is set. It needs a signed
    format with no exponent field and no special values; the most negative value, ``-2**(K-1)``
    quanta (code ``0x80``), has no positive twin, so ``min == -(max + quantum)``.

    Args:
      name: The registry name (lower case by convention).
      exponent_bits: Width of the exponent field: 0 (every value a subnormal; needs ``has_zero``) or more.
      mantissa_bits: Width of the stored mantissa field, 0 to 52.
      bias: Exponent bias; defaults to the IEEE bias ``2**(exponent_bits - 1) - 1``.
      signed: Whether codes have a sign bit. Unsigned formats need a NaN code (``"ieee"``, ``"fn"`` or
        ``"p3109"``), since negative inputs have nowhere else to go.
      specials: The special-value layout, one of ``"ieee"``, ``"fn"``, ``"fnuz"``, ``"none"``, ``"p3109"``.
      has_zero: ``False`` for E8M0-style formats, in which the zero exponent field is a normal
        binade (no zero, no subnormals). Only unsigned formats may drop zero.
      twos_complement: Codes are two's-complement integers (OCP INT8); see above.

    Raises:
      ValueError: naming the field, for a layout that cannot exist or cannot be computed exactly
        (no exponent bits, more than 64 bits, more than 52 mantissa bits, a NaN layout the bit budget
        cannot hold, no positive finite value, a range beyond float64).

    Example:
      >>> fmt = Format(name="e6m9", exponent_bits=6, mantissa_bits=9)
      >>> fmt.bias, fmt.max, fmt.min_normal, fmt.eps
      (31, 4290772992.0, 9.313225746154785e-10, 0.001953125)
      >>> Format(name="e4m3fn_like", exponent_bits=4, mantissa_bits=3, specials="fn").max
      448.0
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int = None  # type: ignore[assignment]  # resolved to the IEEE bias in __post_init__
    signed: bool = True
    specials: Specials = "ieee"
    has_zero: bool = True
    twos_complement: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for field in ("exponent_bits", "mantissa_bits"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ValueError(f"{field} must be an int, got {value!r}")
            object.__setattr__(self, field, int(value))
        if self.bias is None:
            object.__setattr__(self, "bias", 2 ** (self.exponent_bits - 1) - 1 if self.exponent_bits >= 1 else 0)
        elif not isinstance(self.bias, (int, np.integer)) or isinstance(self.bias, bool):
            raise ValueError(f"bias must be an int or None, got {self.bias!r}")
        object.__setattr__(self, "bias", int(self.bias))
        for field in ("signed", "has_zero", "twos_complement"):
            if not isinstance(getattr(self, field), (bool, np.bool_)):
                raise ValueError(f"{field} must be a bool, got {getattr(self, field)!r}")
            object.__setattr__(self, field, bool(getattr(self, field)))
        self._validate()

    def _validate(self) -> None:
        name = f"format {self.name!r}: "
        if self.exponent_bits < 0:
            raise ValueError(name + f"exponent_bits must be >= 0, got {self.exponent_bits}")
        if self.mantissa_bits < 0:
            raise ValueError(name + f"mantissa_bits must be >= 0, got {self.mantissa_bits}")
        if self.mantissa_bits > _MAX_MANTISSA_BITS:
            raise ValueError(
                name + f"mantissa_bits={self.mantissa_bits} exceeds {_MAX_MANTISSA_BITS}: its values would not be "
                "exact in float64, the widest type fpemu computes in"
            )
        if self.bits > _MAX_BITS:
            raise ValueError(name + f"exponent_bits + mantissa_bits + sign = {self.bits} bits exceeds {_MAX_BITS}")
        if self.specials not in SPECIALS:
            raise ValueError(name + f"specials must be one of {SPECIALS}, got {self.specials!r}")
        if self.specials == "ieee" and self.exponent_bits == 0:
            raise ValueError(
                name + "specials='ieee' needs exponent_bits >= 1: infinity and NaN live in the all-ones exponent "
                "(a format without exponent bits takes specials 'fn', 'fnuz', 'none' or 'p3109')"
            )
        if self.exponent_bits == 0 and not self.has_zero:
            raise ValueError(name + "exponent_bits=0 needs has_zero=True: every value is a subnormal")
        if self.specials == "ieee" and self.mantissa_bits == 0:
            raise ValueError(
                name + "specials='ieee' needs mantissa_bits >= 1: with no mantissa the all-ones exponent "
                "cannot hold both infinity and NaN (use specials='fn' for an E8M0-like NaN)"
            )
        if self.specials == "fnuz" and not self.signed:
            raise ValueError(name + "specials='fnuz' needs signed=True: its NaN is the negative-zero code")
        if not self.signed and self.specials not in ("ieee", "fn", "p3109"):
            raise ValueError(
                name + f"signed=False needs a NaN code for negative inputs: specials must be 'ieee', 'fn' or "
                f"'p3109', got {self.specials!r}"
            )
        if self.twos_complement and not (self.signed and self.exponent_bits == 0 and self.specials == "none"):
            raise ValueError(
                name + "twos_complement=True needs a signed fixed-point format: signed=True, exponent_bits=0 and "
                f"specials='none' (OCP INT8), got signed={self.signed}, exponent_bits={self.exponent_bits}, "
                f"specials={self.specials!r}"
            )
        if not self.has_zero and self.signed:
            raise ValueError(name + "has_zero=False is supported for unsigned formats only (E8M0-style)")
        if self.max_code < (0 if not self.has_zero else 1):
            raise ValueError(
                name + f"specials={self.specials!r} leaves no positive finite value in "
                f"{self.exponent_bits} exponent and {self.mantissa_bits} mantissa bits"
            )
        top_exponent = (self.max_code >> self.mantissa_bits) - self.bias
        if top_exponent > _F64_MAX_EXPONENT:
            raise ValueError(
                name + f"bias={self.bias} puts the largest value at 2**{top_exponent}, beyond float64's range"
            )
        if self.min_subnormal_exponent < _F64_MIN_SUBNORMAL_EXPONENT:
            raise ValueError(
                name + f"bias={self.bias} puts the smallest value at 2**{self.min_subnormal_exponent}, "
                "below float64's smallest subnormal"
            )

    # -- raw layout ---------------------------------------------------------------------------------

    @property
    def bits(self) -> int:
        """Total width of a code in bits."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def num_codes(self) -> int:
        """Number of distinct codes, ``2**bits``."""
        return 1 << self.bits

    @property
    def code_dtype(self) -> np.dtype:
        """Smallest unsigned integer dtype that holds a code (uint8, uint16, uint32 or uint64)."""
        for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
            if self.bits <= np.iinfo(dtype).bits:
                return np.dtype(dtype)
        raise AssertionError("unreachable: bits <= 64 is validated")

    @property
    def sign_mask(self) -> int:
        """The sign bit of a code (0 for unsigned formats)."""
        return (1 << (self.exponent_bits + self.mantissa_bits)) if self.signed else 0

    @property
    def max_code(self) -> int:
        """Magnitude code (sign bit clear) of the largest finite value."""
        all_ones = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        if self.specials == "ieee":
            return (((1 << self.exponent_bits) - 1) << self.mantissa_bits) - 1
        if self.specials == "fn":
            return all_ones - 1
        if self.specials == "p3109":  # below +inf (signed), below +inf and NaN (unsigned)
            return all_ones - 1 if self.signed else all_ones - 2
        return all_ones

    @property
    def neg_max_code(self) -> int:
        """Magnitude code of the most negative finite value: ``max_code + 1`` for two's-complement
        formats (OCP INT8's -2.0, code 0x80), else ``max_code`` (0 for unsigned formats)."""
        if not self.signed:
            return 0
        return self.max_code + 1 if self.twos_complement else self.max_code

    @property
    def nan_code(self) -> int | None:
        """The canonical (positive, quiet) NaN code, or None for formats without NaN.

        ``"ieee"``: all-ones exponent with the top mantissa bit set; ``"fn"``: the all-ones magnitude
        code; ``"fnuz"``: the negative-zero code; ``"p3109"``: the negative-zero code (signed) or the
        all-ones code (unsigned). The negative NaN of ``"ieee"``/``"fn"`` formats is ``nan_code | sign_mask``;
        the other layouts have a single NaN.
        """
        if self.specials == "ieee":
            return (((1 << self.exponent_bits) - 1) << self.mantissa_bits) | (1 << (self.mantissa_bits - 1))
        if self.specials == "fn" or (self.specials == "p3109" and not self.signed):
            return (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        if self.specials in ("fnuz", "p3109"):
            return self.sign_mask
        return None

    @property
    def inf_code(self) -> int | None:
        """The code of +infinity, or None for formats without infinity (-infinity is ``inf_code | sign_mask``)."""
        if self.specials == "ieee":
            return ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        if self.specials == "p3109":
            all_ones = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
            return all_ones if self.signed else all_ones - 1
        return None

    @property
    def has_inf(self) -> bool:
        return self.specials in ("ieee", "p3109")

    @property
    def has_nan(self) -> bool:
        return self.specials != "none"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.has_zero and self.specials not in ("fnuz", "p3109") and not self.twos_complement

    @property
    def has_subnormals(self) -> bool:
        return self.has_zero and self.mantissa_bits > 0

    @property
    def encoding(self) -> tuple:
        """The encoding facts without the name: two formats with equal encodings have equal codes."""
        return (
            self.exponent_bits, self.mantissa_bits, self.bias, self.signed, self.specials, self.has_zero,
            self.twos_complement,
        )  # fmt: skip

    # -- derived numbers ----------------------------------------------------------------------------

    @property
    def precision(self) -> int:
        """Significant bits of a normal value, ``mantissa_bits + 1``."""
        return self.mantissa_bits + 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return (1 if self.has_zero else 0) - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value."""
        return (self.max_code >> self.mantissa_bits) - self.bias

    @property
    def min_subnormal_exponent(self) -> int:
        """Exponent of the smallest positive value (the quantum of the subnormal range)."""
        return self.emin - self.mantissa_bits if self.has_zero else self.emin

    @property
    def max(self) -> float:
        """Largest finite value (exact)."""
        return self.magnitude_value(self.max_code)

    @property
    def min(self) -> float:
        """Smallest finite value: ``-max`` for signed formats (``-(max + quantum)`` for two's-complement
        ones), else the smallest non-negative value."""
        if self.signed:
            return -self.magnitude_value(self.neg_max_code)
        return 0.0 if self.has_zero else self.min_normal

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, ``2**emin`` (numpy's ``smallest_normal``/``tiny``).

        A format without an exponent field has no normal values: all of its values lie below this.
        """
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value: the smallest subnormal, or ``min_normal`` without subnormals."""
        return math.ldexp(1.0, self.min_subnormal_exponent)

    smallest_normal = min_normal
    smallest_subnormal = min_subnormal
    tiny = min_normal

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger value, ``2**-mantissa_bits`` (numpy's ``eps``).

        Where 1.0 is a subnormal (no exponent field: OCP INT8, P3109 with P = K), the subnormal spacing.
        """
        return math.ldexp(1.0, max(0, self.emin) - self.mantissa_bits)

    def magnitude_value(self, code: int) -> float:
        """Exact value of a finite magnitude code (sign bit clear), as a Python float.

        Two's-complement formats also take ``neg_max_code`` (the magnitude of their most negative value).

        Raises:
          ValueError: if ``code`` is not a finite magnitude code of this format.
        """
        code = int(code)
        top = max(self.max_code, self.neg_max_code)
        if not 0 <= code <= top:
            raise ValueError(f"code must be a finite magnitude code of {self.name} in [0, {top}], got {code}")
        exponent_field = code >> self.mantissa_bits
        mantissa = code & ((1 << self.mantissa_bits) - 1)
        if self.has_zero and exponent_field == 0:
            return math.ldexp(float(mantissa), self.min_subnormal_exponent)
        significand = (1 << self.mantissa_bits) | mantissa
        return math.ldexp(float(significand), exponent_field - self.bias - self.mantissa_bits)

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy / ml_dtypes dtype with exactly this encoding, or None (tf32 and most custom formats)."""
        return _DTYPE_BY_ENCODING.get(self.encoding)

    def fits_in(self, other: Format) -> bool:
        """Whether every finite value of this format is exactly a value of ``other`` (see `fits`)."""
        return fits(self, other)

    def __str__(self) -> str:
        return self.name


def bind_dtype(fmt: Format, dtype: np.dtype) -> None:
    """Record that ``dtype`` has exactly ``fmt``'s encoding (`Format.dtype` answers from it)."""
    _DTYPE_BY_ENCODING[fmt.encoding] = np.dtype(dtype)


def fits(inner: Format, outer: Format) -> bool:
    """Whether every finite value of ``inner`` is exactly representable in ``outer``."""
    return (
        inner.mantissa_bits <= outer.mantissa_bits
        and inner.min_subnormal_exponent >= outer.min_subnormal_exponent
        and max(inner.max, -inner.min) <= outer.max
    )
