"""Exact, readable text for the values and codes of a format, as the ``fpemu`` command line prints them.

Every number is printed exactly: as a decimal when that is exact and short, as ``2^k`` for powers of
two, as ``odd*2^k`` or ``(2-2^-n)*2^k`` otherwise, and as a hex float (``0x1.cp+8``) beside it where
space allows. Codes print in hex and as their ``sign exponent mantissa`` fields in binary.

`parse_number` reads the VALUE of ``fpemu cast`` exactly, into a `fractions.Fraction`: a decimal
(``0.1``, ``1e999``, ``-0``) or a hex float (``0x1.8p3``, ``0x1p2000``) of any size within
``MAX_DECIMAL_EXPONENT``/``MAX_BINARY_EXPONENT``, never through float64; `describe_number` prints it
exactly, saying how it relates to float64 (``1e999  (exact, beyond float64's range: ...)``).
"""

from __future__ import annotations

import decimal
import math
import re
from fractions import Fraction
from typing import NamedTuple

import fpemu

__all__ = [
    "MAX_BINARY_EXPONENT",
    "MAX_DECIMAL_EXPONENT",
    "NUMBER_SPELLINGS",
    "Number",
    "approx",
    "code_bits",
    "code_hex",
    "describe_number",
    "exact",
    "exact_full",
    "float64_of",
    "hex_float",
    "layout",
    "parse_number",
    "short",
]


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


def _scientific(value: Fraction, digits: int = 17) -> str:
    """A nonzero rational to ``digits`` significant digits, as ``1.5e+999`` (any exponent, unlike a float)."""
    sign, numerator, denominator = ("-" if value < 0 else ""), abs(value.numerator), value.denominator
    exponent = math.floor((numerator.bit_length() - denominator.bit_length()) * math.log10(2))
    while True:  # the estimate is off by at most one either way; the quotients are small, so this is fast
        shift = digits - 1 - exponent
        top, bottom = (numerator * 10**shift, denominator) if shift >= 0 else (numerator, denominator * 10**-shift)
        mantissa, rest = divmod(top, bottom)
        mantissa += 2 * rest > bottom or (2 * rest == bottom and mantissa % 2 == 1)
        if mantissa >= 10**digits:
            exponent += 1
        elif mantissa < 10 ** (digits - 1):
            exponent -= 1
        else:
            break
    text = str(mantissa).rstrip("0")
    head = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{sign}{head}e{exponent:+03d}"


def _short_decimal(value: Fraction) -> str | None:
    """``value`` as an exact decimal if it has one of at most 17 significant digits (``0.00009765625``), else None."""
    numerator, denominator = abs(value.numerator), value.denominator
    if numerator >= 10**17:  # the digits of a short decimal, divided by a power of 10, reduce to at most this
        return None
    twos = (denominator & -denominator).bit_length() - 1
    rest = denominator >> twos
    guess = round((rest.bit_length() - 1) / math.log2(5))
    fives = next((k for k in (guess - 1, guess, guess + 1) if k >= 0 and 5**k == rest), None)
    if fives is None:
        return None
    places = max(twos, fives)
    scaled = numerator * 10**places // denominator
    if scaled >= 10**17:
        return None
    digits = str(scaled)
    stripped = digits.rstrip("0")
    return _decimal_text("-" if value < 0 else "", stripped, len(digits) - len(stripped) - places)


def approx(value: Fraction) -> str:
    """A rational as its nearest float, marked ``~`` when that float is not exact.

    A value that is no float64 but an exact decimal of at most 17 significant digits prints as that decimal,
    unmarked. Beyond float64's range (or below its smallest subnormal), 17 significant digits of the exact value.

    Example:
      >>> approx(Fraction(1, 4)), approx(Fraction(1, 10)), approx(Fraction(1, 3)), approx(-Fraction(10**999) + 1)
      ('0.25', '0.1', '~0.3333333333333333', '~-1e+999')
      >>> approx(Fraction(3, 10**999)), approx(Fraction(10009765625 - 10**10, 10**11))
      ('3e-999', '0.00009765625')
    """
    text = _short_decimal(value)
    try:
        as_float = float(value)
    except OverflowError:
        return text or "~" + _scientific(value)
    if Fraction(as_float) == value:
        return repr(as_float)
    if text is not None:
        return text
    if as_float == 0:
        return "~" + _scientific(value)
    return f"~{as_float!r}"


def short(value: Fraction, digits: int = 6) -> str:
    """``value`` to ``digits`` significant digits, like ``format(float(value), ".6g")`` but for any exponent.

    Example:
      >>> short(Fraction(1, 3)), short(Fraction(10**999, 3))
      ('0.333333', '3.33333e+998')
    """
    try:
        as_float = float(value)
    except OverflowError:
        return _scientific(value, digits)
    if as_float == 0 and value != 0:
        return _scientific(value, digits)
    return format(as_float, f".{digits}g")


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


# -- exact parsing of a number --------------------------------------------------------------------

MAX_DECIMAL_EXPONENT = 10_000  # the largest |exponent| of a decimal VALUE, as in 1e-10000
MAX_BINARY_EXPONENT = 40_000  # the largest |exponent| of a (normalised) hex-float VALUE, as in 0x1p-40000
NUMBER_SPELLINGS = (
    "a decimal (0.1, -2.5e-3, 1e999, -0, 123456789012345678901234567890), a hex float (0x1.8p3, 0x1p2000, "
    "-0x1p-1100), nan, inf or -inf"
)

_DECIMAL = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_HEX = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?")
_SPECIALS = {"nan": math.nan, "inf": math.inf, "infinity": math.inf}


class Number(NamedTuple):
    """A number read exactly from text by `parse_number`.

    Attributes:
      value: a `fractions.Fraction` for a finite nonzero number; a float for NaN (with its sign), ``±inf`` and
        ``±0`` (a Fraction has no negative zero).
      text: the number written exactly, in the notation it was given in: a decimal as ``0.1``,
        ``123456789012345678901234567890`` or ``1e999`` (scientific from 10^7 on and below 10^-6), a hex float as
        ``0x1.8p+3``.
    """

    value: Fraction | float
    text: str


def _decimal_text(sign: str, digits: str, exponent: int) -> str:
    """``sign digits * 10^exponent`` (no leading or trailing zeros in ``digits``) written out."""
    adjusted = exponent + len(digits) - 1
    if adjusted < -6 or exponent > 6:
        return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{adjusted}"
    if exponent >= 0:
        return sign + digits + "0" * exponent
    whole, point = digits[:exponent], digits[exponent:]
    return f"{sign}{whole or '0'}.{point.rjust(-exponent, '0')}"


def _hex_text(negative: bool, odd: int, exponent: int) -> str:
    """``±odd * 2^exponent`` as a normalised hex float, ``0x1.8p+3``, of any exponent."""
    fraction_bits = odd.bit_length() - 1
    width = (fraction_bits + 3) // 4
    fraction = format((odd - (1 << fraction_bits)) << (4 * width - fraction_bits), f"0{width}x") if width else ""
    fraction = fraction.rstrip("0")
    return f"{'-' if negative else ''}0x1{'.' + fraction if fraction else ''}p{exponent + fraction_bits:+d}"


def _out_of_range(text: str, what: str, limit: int) -> ValueError:
    return ValueError(
        f"{text!r} is out of range: {what} exponents from -{limit} to {limit} (every format's range is far inside)"
    )


def parse_number(text: str) -> Number:
    """Read a number exactly: a decimal or a hex float into a `fractions.Fraction`, never through float64.

    ``nan``, ``inf``, ``infinity`` (any case, with an optional sign) and zeros (``-0``, ``0x0p0``) become floats,
    so that NaN and zero keep their sign. Decimal exponents are limited to ``±MAX_DECIMAL_EXPONENT`` and hex-float
    (binary) exponents to ``±MAX_BINARY_EXPONENT``: far beyond every format, and small enough to stay fast.

    Args:
      text: the number, surrounding spaces allowed.

    Returns:
      A `Number`: the exact value and its exact, canonical text.

    Raises:
      ValueError: for anything else, naming the text and listing the accepted spellings (`NUMBER_SPELLINGS`).

    Example:
      >>> parse_number("0.1")
      Number(value=Fraction(1, 10), text='0.1')
      >>> parse_number("-1e999").text, parse_number("0x1p2000").value == 2**2000, parse_number("0x1.8p3").text
      ('-1e999', True, '0x1.8p+3')
      >>> parse_number("-0"), parse_number("123456789012345678901234567890").text
      (Number(value=-0.0, text='-0'), '123456789012345678901234567890')
    """
    stripped = text.strip()
    bare = stripped.lstrip("+-").lower()
    if bare in _SPECIALS and len(stripped) - len(bare) <= 1:
        value = math.copysign(_SPECIALS[bare], -1.0 if stripped.startswith("-") else 1.0)
        return Number(value, exact(value))
    hex_match, decimal_match = _HEX.fullmatch(stripped), _DECIMAL.fullmatch(stripped)
    for match, what, limit in (
        (hex_match, "hex-float", MAX_BINARY_EXPONENT),
        (decimal_match, "decimal", MAX_DECIMAL_EXPONENT),
    ):
        if match and match[4] and len(match[4].lstrip("+-0")) > 9:  # int() of a huge exponent would be slow
            raise _out_of_range(stripped, what, limit)
    if hex_match and (hex_match[2] or hex_match[3]):
        sign, whole, point, power = hex_match[1], hex_match[2], hex_match[3] or "", hex_match[4] or "0"
        mantissa, exponent = int(whole + point or "0", 16), int(power) - 4 * len(point)
        if mantissa and abs(exponent + mantissa.bit_length() - 1) > MAX_BINARY_EXPONENT:
            raise _out_of_range(stripped, "hex-float", MAX_BINARY_EXPONENT)
    elif decimal_match and (decimal_match[2] or decimal_match[3]):
        sign, whole, point, power = decimal_match[1], decimal_match[2], decimal_match[3] or "", decimal_match[4] or "0"
        digits = (whole + point).lstrip("0")
        exponent = int(power) - len(point) + (len(digits) - len(digits.rstrip("0")))
        digits = digits.rstrip("0")
        if digits and abs(exponent + len(digits) - 1) > MAX_DECIMAL_EXPONENT:
            raise _out_of_range(stripped, "decimal", MAX_DECIMAL_EXPONENT)
        if digits:
            rational = Fraction(decimal.Decimal(f"{digits}e{exponent}"))
            return Number(
                -rational if sign == "-" else rational, _decimal_text(sign.replace("+", ""), digits, exponent)
            )
        mantissa = 0
    else:
        raise ValueError(f"not a number: {stripped!r} (write {NUMBER_SPELLINGS})")
    if mantissa == 0:
        zero = -0.0 if sign == "-" else 0.0
        return Number(zero, exact(zero))
    shift = (mantissa & -mantissa).bit_length() - 1
    odd, exponent = mantissa >> shift, exponent + shift
    rational = Fraction(odd << exponent) if exponent >= 0 else Fraction(odd, 1 << -exponent)
    return Number(-rational if sign == "-" else rational, _hex_text(sign == "-", odd, exponent))


def float64_of(value: Fraction | float) -> float | None:
    """The float64 equal to ``value`` (a float stays itself), or None when no float64 is."""
    if isinstance(value, float):
        return value
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if Fraction(as_float) == value else None


def describe_number(number: Number) -> str:
    """``number`` as the ``input`` line of ``fpemu cast`` prints it: exactly, and how float64 would read it.

    NaN (with its sign) and infinities print as ``nan``, ``-nan``, ``inf``, ``-inf``; a finite float64 value as
    Python's shortest repr and its hex float (``-0.0  (-0x0p+0)``); any other number as its exact text and the float64
    a float parser would have made of it.

    Example:
      >>> describe_number(parse_number("464"))
      '464.0  (0x1.dp+8)'
      >>> describe_number(parse_number("0.1"))
      '0.1  (exact; not a float64, which would read it as 0.1 = 0x1.999999999999ap-4)'
      >>> describe_number(parse_number("1e999"))
      "1e999  (exact; beyond float64's range, which would read it as inf)"
      >>> print(describe_number(parse_number("-0x1p-1100")))
      -0x1p-1100  (exact; below float64's smallest subnormal 2^-1074, which would read it as -0)
    """
    as_float = float64_of(number.value)
    if as_float is not None and not math.isfinite(as_float):
        return exact(as_float)
    if as_float is not None:
        return f"{as_float!r}  ({hex_float(as_float)})"
    value = number.value
    try:
        nearest = float(value)
    except OverflowError:
        return f"{number.text}  (exact; beyond float64's range, which would read it as {'-' if value < 0 else ''}inf)"
    if nearest == 0:
        zero = "-0" if value < 0 else "0"
        return f"{number.text}  (exact; below float64's smallest subnormal 2^-1074, which would read it as {zero})"
    return f"{number.text}  (exact; not a float64, which would read it as {nearest!r} = {hex_float(nearest)})"
