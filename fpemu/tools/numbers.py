"""Exact, readable text for the values and codes of a format, as the ``fpemu`` command line prints them.

Every number is printed exactly: as a decimal when that is exact and short, as ``2^k`` for powers of
two, as ``odd*2^k`` or ``(2-2^-n)*2^k`` otherwise, and as a hex float (``0x1.cp+8``) beside it where
space allows. Codes print in hex and as their ``sign exponent mantissa`` fields in binary.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import fpemu

__all__ = ["approx", "code_bits", "code_hex", "exact", "exact_full", "hex_float", "layout"]


def _exact_decimal(value: float) -> str | None:
    """The shortest decimal of a finite ``value`` if it is exact and at most 12 significant digits."""
    text = repr(value)
    exact_value = decimal.Decimal(text)
    if exact_value != decimal.Decimal(value) or len(exact_value.normalize().as_tuple().digits) > 12:
        return None
    return text[:-2] if text.endswith(".0") else text


def exact(value: float) -> str:
    """An exact, readable rendering of ``value``.

    NaN (with its sign), infinities and signed zeros are spelled out; powers of two outside ``[2^-4, 2^16]`` print as
    ``2^k``; other values as a short exact decimal when there is one, else as ``(2-2^-n)*2^k`` or
    ``odd*2^k``.

    Example:
      >>> [exact(v) for v in (448.0, -0.0, 2.0**-9, 0.75, float.fromhex("0x1.fffffep127"), 3 * 2.0**-24)]
      ['448', '-0', '2^-9', '0.75', '(2-2^-23)*2^127', '3*2^-24']
    """
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, magnitude = ("-" if value < 0 else ""), abs(value)
    numerator, denominator = magnitude.as_integer_ratio()
    shift = (numerator & -numerator).bit_length() - 1  # strip the power of two from an integer numerator
    odd, exponent = numerator >> shift, shift - (denominator.bit_length() - 1)
    if odd == 1 and not -4 <= exponent <= 16:
        return f"{sign}2^{exponent}"
    text = _exact_decimal(magnitude)
    if text is not None:
        return sign + text
    if odd == 1:
        return f"{sign}2^{exponent}"
    top = odd.bit_length() - 1
    if top >= 4 and odd + 1 == 1 << (top + 1):  # odd = 2^(top+1) - 1: the (2 - 2^-top) * 2^k shape of a max
        return f"{sign}(2-2^-{top})*2^{exponent + top}"
    return f"{sign}{odd}*2^{exponent}"


def hex_float(value: float) -> str:
    """``float.hex`` without trailing zeros (``0x1.cp+8``); non-finite values as `exact`."""
    if not math.isfinite(value):
        return exact(value)
    mantissa, exponent = value.hex().split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"


def exact_full(value: float) -> str:
    """`exact`, then the shortest round-trip decimal where different, then the hex float."""
    text = exact(value)
    if not math.isfinite(value):
        return text
    plain = repr(value)
    if text not in (plain, plain.removesuffix(".0")):
        text += f" = {plain}"
    return f"{text}  ({hex_float(value)})"


def approx(value: Fraction) -> str:
    """A rational as its nearest float, marked ``~`` when that float is not exact."""
    as_float = float(value)
    return repr(as_float) if Fraction(as_float) == value else f"~{as_float!r}"


def code_hex(code: int, fmt: fpemu.Format) -> str:
    """A code of ``fmt`` in hex, zero-padded to the format's width (``0x07`` for 8 bits)."""
    return f"0x{code:0{(fmt.bits + 3) // 4}x}"


def code_bits(code: int, fmt: fpemu.Format) -> str:
    """The code's fields in binary, ``sign exponent mantissa`` separated by spaces."""
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    fields = [str((code >> (e + m)) & 1)] if fmt.signed else []
    if e:
        fields.append(format((code >> m) & ((1 << e) - 1), f"0{e}b"))
    if m:
        fields.append(format(code & ((1 << m) - 1), f"0{m}b"))
    return " ".join(fields)


def layout(fmt: fpemu.Format) -> str:
    """The field layout as a column title, e.g. ``s eeee mmm``."""
    fields = ["s"] if fmt.signed else []
    if fmt.exponent_bits:
        fields.append("e" * fmt.exponent_bits)
    if fmt.mantissa_bits:
        fields.append("m" * fmt.mantissa_bits)
    return " ".join(fields)
