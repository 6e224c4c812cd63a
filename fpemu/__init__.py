"""fpemu: bit-exact low-precision floating-point emulation for JAX."""

from fpemu._codec import decode, encode, pack, unpack
from fpemu._format import Format
from fpemu._quantize import quantize
from fpemu._registry import UnknownFormatError, formats, get_format, register_format

__all__ = [
    "Format",
    "UnknownFormatError",
    "decode",
    "encode",
    "formats",
    "get_format",
    "pack",
    "quantize",
    "register_format",
    "unpack",
]
__version__ = "0.1.0"
