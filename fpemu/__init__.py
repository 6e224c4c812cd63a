"""fpemu: bit-exact low-precision floating-point emulation for JAX."""

from fpemu import scaled
from fpemu._codec import decode, encode, pack, unpack
from fpemu._emulate import DotPolicy, Policy, emulate
from fpemu._format import Format
from fpemu._matmul import conv_general_dilated, dot_general, matmul
from fpemu._quantize import quantize
from fpemu._registry import UnknownFormatError, formats, get_format, register_format

__all__ = [
    "DotPolicy",
    "Format",
    "Policy",
    "UnknownFormatError",
    "conv_general_dilated",
    "decode",
    "dot_general",
    "emulate",
    "encode",
    "formats",
    "get_format",
    "matmul",
    "pack",
    "quantize",
    "register_format",
    "scaled",
    "testing",
    "unpack",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # `fpemu.testing` needs the test extras (hypothesis): imported on first use, not with fpemu.
    if name == "testing":
        import importlib

        return importlib.import_module("fpemu.testing")
    raise AttributeError(f"module 'fpemu' has no attribute {name!r}")
