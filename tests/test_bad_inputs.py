"""A catalogue of bad and unusual inputs across every public entry point, and the contract for float64.

Each bad input must raise the documented exception type with a message that names the argument and,
where there is a set of valid choices, shows them. Each unusual input must give its documented value.
docs/semantics.md ("Input contract") is the table these rows enforce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpemu
import fpemu.kernels
import fpemu.scaled
import fpemu.testing
from fpemu.tools import cli

F32 = jnp.ones((4,), jnp.float32)
M = jnp.ones((2, 2), jnp.float32)
KEY = jax.random.key(0)


@dataclasses.dataclass(frozen=True)
class Bad:
    name: str
    call: Callable[[], Any]
    error: type[BaseException]
    says: tuple[str, ...]  # substrings the message must contain


def bad(name: str, call: Callable[[], Any], error: type[BaseException], *says: str) -> Bad:
    return Bad(name, call, error, says)


MODES = "nearest_even"  # every rounding-mode error lists the modes; checking the first one is enough


def with_x64(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call``, run with jax_enable_x64 on (thread-local, restored afterwards)."""

    def run() -> Any:
        with jax.enable_x64(True):
            return call()

    return run


CATALOGUE: list[Bad] = [
    # -- quantize: formats ------------------------------------------------------------------------
    bad("quantize fmt None", lambda: fpemu.quantize(F32, None), TypeError, "fmt", "None"),
    bad("quantize fmt int", lambda: fpemu.quantize(F32, 8), TypeError, "fmt"),
    bad("quantize fmt unknown", lambda: fpemu.quantize(F32, "e4m3fx"), fpemu.UnknownFormatError, "fmt", "e4m3fn"),
    bad("quantize fmt E4M3", lambda: fpemu.quantize(F32, "E4M3"), fpemu.UnknownFormatError, "e4m3fn", "e4m3"),
    bad("quantize fmt fp8", lambda: fpemu.quantize(F32, "fp8"), fpemu.UnknownFormatError, "e4m3fn", "e5m2"),
    bad("quantize fmt fp4", lambda: fpemu.quantize(F32, "fp4"), fpemu.UnknownFormatError, "e2m1fn"),
    bad("quantize fmt mxfp4", lambda: fpemu.quantize(F32, "mxfp4"), fpemu.UnknownFormatError, "fpemu.scaled"),
    bad("quantize fmt nvfp4", lambda: fpemu.quantize(F32, "nvfp4"), fpemu.UnknownFormatError, "fpemu.scaled"),
    bad("quantize fmt mxfp8", lambda: fpemu.quantize(F32, "mxfp8"), fpemu.UnknownFormatError, "fpemu.scaled"),
    bad("quantize fmt int dtype", lambda: fpemu.quantize(F32, np.int8), fpemu.UnknownFormatError, "fmt", "int8"),
    bad("quantize fmt array", lambda: fpemu.quantize(F32, F32), TypeError, "fmt", "array"),
    bad("quantize fmt too wide", lambda: fpemu.quantize(F32.astype(jnp.bfloat16), "fp16"), ValueError, "fp16", "bf16"),
    # -- quantize: modes and options ---------------------------------------------------------------
    bad(
        "quantize rounding unknown",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="nearest"),
        ValueError,
        "rounding",
        MODES,
    ),
    bad("quantize rounding int", lambda: fpemu.quantize(F32, "e4m3fn", rounding=0), ValueError, "rounding", MODES),
    bad("quantize rounding None", lambda: fpemu.quantize(F32, "e4m3fn", rounding=None), ValueError, "rounding", MODES),
    bad(
        "quantize rounding upper",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="NEAREST_EVEN"),
        ValueError,
        "rounding",
        MODES,
    ),
    bad("quantize saturate str", lambda: fpemu.quantize(F32, "e4m3fn", saturate="yes"), TypeError, "saturate", "bool"),
    bad("quantize saturate int", lambda: fpemu.quantize(F32, "e4m3fn", saturate=1), TypeError, "saturate", "bool"),
    bad(
        "quantize subnormals None",
        lambda: fpemu.quantize(F32, "e4m3fn", subnormals=None),
        TypeError,
        "subnormals",
        "bool",
    ),
    bad("quantize key not stochastic", lambda: fpemu.quantize(F32, "e4m3fn", key=KEY), ValueError, "key", "stochastic"),
    bad("quantize stochastic no key", lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic"), ValueError, "key"),
    bad(
        "quantize key raw wrong shape",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=jnp.zeros((3, 2), jnp.uint32)),
        TypeError,
        "key",
        "PRNG",
    ),
    bad(
        "quantize key float",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=jnp.zeros((2,), jnp.float32)),
        TypeError,
        "key",
    ),
    bad("quantize key int", lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=0), TypeError, "key"),
    bad(
        "quantize key uint32 of 3 words",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=jnp.array([1, 2, 3], jnp.uint32)),
        TypeError,
        "key",
        "PRNG",
        "(2,)",
        "got shape (3,)",
    ),
    bad(
        "quantize key batch",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=jax.random.split(KEY, 2)),
        ValueError,
        "key",
        "vmap",
    ),
    bad(
        "quantize random_bits 0",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=KEY, random_bits=0),
        ValueError,
        "random_bits",
        "[1, 32]",
    ),
    bad(
        "quantize random_bits 33",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=KEY, random_bits=33),
        ValueError,
        "random_bits",
        "[1, 32]",
    ),
    bad(
        "quantize random_bits float",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=KEY, random_bits=8.0),
        ValueError,
        "random_bits",
    ),
    bad(
        "quantize random_bits bool",
        lambda: fpemu.quantize(F32, "e4m3fn", rounding="stochastic", key=KEY, random_bits=True),
        ValueError,
        "random_bits",
    ),
    bad(
        "quantize random_bits not stochastic",
        lambda: fpemu.quantize(F32, "e4m3fn", random_bits=8),
        ValueError,
        "random_bits",
        "stochastic",
    ),
    bad(
        "quantize backend unknown",
        lambda: fpemu.quantize(F32, "e4m3fn", backend="gpu"),
        ValueError,
        "backend",
        "auto",
        "xla",
        "pallas",
    ),
    bad("quantize backend None", lambda: fpemu.quantize(F32, "e4m3fn", backend=None), ValueError, "backend", "auto"),
    # -- quantize: inputs --------------------------------------------------------------------------
    bad("quantize x str", lambda: fpemu.quantize("abc", "e4m3fn"), TypeError, "x"),
    bad("quantize x None", lambda: fpemu.quantize(None, "e4m3fn"), TypeError, "x"),
    bad(
        "quantize x object array",
        lambda: fpemu.quantize(np.array([1.0, None], object), "e4m3fn"),
        TypeError,
        "x",
        "object",
    ),
    bad("quantize x str array", lambda: fpemu.quantize(np.array(["1.0"]), "e4m3fn"), TypeError, "x"),
    bad("quantize x int list", lambda: fpemu.quantize([1, 2], "e4m3fn"), TypeError, "x", "integer"),
    bad("quantize x int", lambda: fpemu.quantize(3, "e4m3fn"), TypeError, "x", "int"),
    bad("quantize x bool", lambda: fpemu.quantize(True, "e4m3fn"), TypeError, "x", "bool"),
    bad("quantize x complex", lambda: fpemu.quantize(1j, "e4m3fn"), TypeError, "x", "complex"),
    bad(
        "quantize x complex array",
        lambda: fpemu.quantize(jnp.ones(2, jnp.complex64), "e4m3fn"),
        TypeError,
        "x",
        "complex",
    ),
    bad(
        "quantize x int8 array",
        lambda: fpemu.quantize(jnp.ones(2, jnp.int8), "e4m3fn"),
        TypeError,
        "x",
        "integer",
        "x.astype(jnp.float32)",
    ),
    bad(
        "quantize x float8 array",
        lambda: fpemu.quantize(jnp.ones(2, jnp.float8_e4m3fn), "e4m3fn"),
        TypeError,
        "x",
        "float32",
    ),
    bad("quantize x ragged list", lambda: fpemu.quantize([[1.0], [1.0, 2.0]], "e4m3fn"), (TypeError, ValueError), "x"),
    bad(
        "quantize pallas on cpu",
        lambda: fpemu.quantize(F32, "e4m3fn", backend="pallas"),
        ValueError,
        "backend='pallas'",
        "GPU",
    ),
    # -- encode --------------------------------------------------------------------------------------
    bad("encode fmt None", lambda: fpemu.encode(F32, None), TypeError, "fmt"),
    bad("encode fmt unknown", lambda: fpemu.encode(F32, "e4m3fx"), fpemu.UnknownFormatError, "fmt", "e4m3fn"),
    bad("encode rounding", lambda: fpemu.encode(F32, "e4m3fn", rounding="up"), ValueError, "rounding", MODES),
    bad("encode saturate", lambda: fpemu.encode(F32, "e4m3fn", saturate="no"), TypeError, "saturate"),
    bad("encode int input", lambda: fpemu.encode(jnp.ones(2, jnp.int32), "e4m3fn"), TypeError, "x", "integer"),
    bad("encode str input", lambda: fpemu.encode("1.0", "e4m3fn"), TypeError, "x"),
    bad("encode no key", lambda: fpemu.encode(F32, "e4m3fn", rounding="stochastic"), ValueError, "key"),
    bad("encode too wide", lambda: fpemu.encode(F32.astype(jnp.float16), "bf16"), ValueError, "bf16", "fp16"),
    # -- decode --------------------------------------------------------------------------------------
    bad("decode fmt None", lambda: fpemu.decode(jnp.zeros(2, jnp.uint8), None), TypeError, "fmt"),
    bad("decode float codes", lambda: fpemu.decode(F32, "e4m3fn"), TypeError, "codes", "integer"),
    bad("decode bool codes", lambda: fpemu.decode(np.array([True]), "e4m3fn"), TypeError, "codes", "integer"),
    bad("decode code 256", lambda: fpemu.decode(np.array([256]), "e4m3fn"), ValueError, "codes", "[0, 256)"),
    bad("decode code -1", lambda: fpemu.decode(np.array([-1]), "e4m3fn"), ValueError, "codes", "[0, 256)"),
    bad("decode code 2**32", lambda: fpemu.decode([2**32], "e4m3fn"), ValueError, "codes", "[0, 256)"),
    bad("decode code 2**32 + 1", lambda: fpemu.decode(np.array([2**32 + 1], np.int64), "e4m3fn"), ValueError, "codes"),
    bad("decode code 2**70", lambda: fpemu.decode([2**70], "e4m3fn"), ValueError, "codes"),
    bad("decode code 2**70 scalar", lambda: fpemu.decode(2**70, "e4m3fn"), ValueError, "codes"),
    bad(
        "decode uint64 huge",
        lambda: fpemu.decode(np.array([2**63], np.uint64), "e2m1fn"),
        ValueError,
        "codes",
        "[0, 16)",
    ),
    bad("decode fp4 code 16", lambda: fpemu.decode(np.array([16], np.uint8), "e2m1fn"), ValueError, "codes", "[0, 16)"),
    bad(
        "decode dtype int", lambda: fpemu.decode(np.array([1], np.uint8), "e4m3fn", dtype=np.int32), TypeError, "dtype"
    ),
    bad(
        "decode dtype too narrow",
        lambda: fpemu.decode(np.array([1], np.uint16), "fp16", dtype=jnp.bfloat16),
        ValueError,
        "dtype",
    ),
    bad("decode dtype None", lambda: fpemu.decode(np.array([1], np.uint8), "e4m3fn", dtype=None), TypeError, "dtype"),
    bad(
        "decode dtype float64 without x64",
        lambda: fpemu.decode(np.array([1], np.uint8), "e4m3fn", dtype=np.float64),
        ValueError,
        "dtype=float64",
        "jax_enable_x64",
    ),
    bad("unpack int64", lambda: fpemu.unpack(np.array([1, 2], np.int64), "e2m1fn"), TypeError, "packed", "int64"),
    bad("reference complex", lambda: fpemu.testing.reference.round_scalar(1j, "e4m3fn"), TypeError, "x", "real"),
    bad("decode codes str", lambda: fpemu.decode("7", "e4m3fn"), TypeError, "codes"),
    # -- pack / unpack ---------------------------------------------------------------------------------
    bad("pack fmt None", lambda: fpemu.pack(np.zeros(2, np.uint8), None), TypeError, "fmt"),
    bad("pack float codes", lambda: fpemu.pack(np.zeros(2, np.float32), "e2m1fn"), TypeError, "codes", "integer"),
    bad("pack scalar", lambda: fpemu.pack(np.uint8(1), "e2m1fn"), ValueError, "codes", "dimension"),
    bad(
        "pack code out of range",
        lambda: fpemu.pack(np.array([16, 0], np.uint8), "e2m1fn"),
        ValueError,
        "codes",
        "[0, 16)",
    ),
    bad("pack negative code", lambda: fpemu.pack(np.array([-1, 0], np.int32), "e2m1fn"), ValueError, "codes"),
    bad("unpack uint16", lambda: fpemu.unpack(np.zeros(2, np.uint16), "e2m1fn"), TypeError, "packed", "uint8"),
    bad("unpack fmt unknown", lambda: fpemu.unpack(np.zeros(2, np.uint8), "fp5"), fpemu.UnknownFormatError, "fmt"),
    bad("unpack float", lambda: fpemu.unpack(np.zeros(2, np.float32), "e2m1fn"), TypeError, "packed"),
    bad("unpack fp6 bytes", lambda: fpemu.unpack(np.zeros(2, np.uint8), "e3m2fn"), ValueError, "packed", "3"),
    # -- matmul / dot_general / conv -----------------------------------------------------------------
    bad("matmul lhs array kw", lambda: fpemu.matmul(M, M, lhs=M), TypeError, "lhs", "array"),
    bad("matmul lhs unknown", lambda: fpemu.matmul(M, M, lhs="e4m3fx"), fpemu.UnknownFormatError, "lhs", "e4m3fn"),
    bad("matmul rhs None ok, out bogus", lambda: fpemu.matmul(M, M, out="bogus"), fpemu.UnknownFormatError, "out"),
    bad(
        "matmul accumulate unknown",
        lambda: fpemu.matmul(M, M, accumulate="fp33"),
        fpemu.UnknownFormatError,
        "accumulate",
    ),
    bad("matmul accumulate too wide", lambda: fpemu.matmul(M, M, accumulate="fp64"), ValueError, "accumulate"),
    bad("matmul rounding", lambda: fpemu.matmul(M, M, rounding="round"), ValueError, "rounding", MODES),
    bad(
        "matmul accumulate_rounding",
        lambda: fpemu.matmul(M, M, accumulate="bf16", accumulate_rounding="x"),
        ValueError,
        "accumulate_rounding",
        MODES,
    ),
    bad(
        "matmul accumulate_every 0",
        lambda: fpemu.matmul(M, M, accumulate_every=0),
        ValueError,
        "accumulate_every",
        ">= 1",
    ),
    bad("matmul accumulate_every -2", lambda: fpemu.matmul(M, M, accumulate_every=-2), ValueError, "accumulate_every"),
    bad(
        "matmul accumulate_every float",
        lambda: fpemu.matmul(M, M, accumulate_every=2.0),
        TypeError,
        "accumulate_every",
        "int",
    ),
    bad(
        "matmul accumulate_every bool",
        lambda: fpemu.matmul(M, M, accumulate_every=True),
        TypeError,
        "accumulate_every",
        "int",
    ),
    bad("matmul saturate", lambda: fpemu.matmul(M, M, saturate="yes"), TypeError, "saturate", "bool"),
    bad(
        "matmul preferred int",
        lambda: fpemu.matmul(M, M, preferred_element_type=jnp.int32),
        TypeError,
        "preferred_element_type",
    ),
    bad(
        "matmul preferred junk",
        lambda: fpemu.matmul(M, M, preferred_element_type="junk"),
        TypeError,
        "preferred_element_type",
    ),
    bad("matmul key not stochastic", lambda: fpemu.matmul(M, M, key=KEY), ValueError, "key", "stochastic"),
    bad("matmul stochastic no key", lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic"), ValueError, "key"),
    bad(
        "matmul key wrong shape",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", key=jnp.zeros((3, 2), jnp.uint32)),
        TypeError,
        "key",
    ),
    bad(
        "matmul key uint32 of 5 words",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", key=jnp.arange(5, dtype=jnp.uint32)),
        TypeError,
        "key",
        "got shape (5,)",
    ),
    bad(
        "matmul_kernel key uint32 of 5 words",
        lambda: fpemu.kernels.matmul_kernel(
            M, M, lhs="e4m3fn", rounding="stochastic", key=jnp.arange(5, dtype=jnp.uint32), interpret=True
        ),
        TypeError,
        "key",
        "got shape (5,)",
    ),
    bad(
        "conv window_strides 0",
        lambda: fpemu.conv_general_dilated(jnp.ones((1, 1, 4, 4)), jnp.ones((1, 1, 2, 2)), (0, 0), "VALID"),
        ValueError,
        "window_strides",
        ">= 1",
    ),
    bad(
        "conv rhs_dilation 0",
        lambda: fpemu.conv_general_dilated(
            jnp.ones((1, 1, 4, 4)), jnp.ones((1, 1, 2, 2)), (1, 1), "VALID", rhs_dilation=(0, 1)
        ),
        ValueError,
        "rhs_dilation",
        ">= 1",
    ),
    bad("matmul int operand", lambda: fpemu.matmul(jnp.ones((2, 2), jnp.int32), M), TypeError, "integer"),
    bad("matmul bool operand", lambda: fpemu.matmul(True, M), TypeError, "bool"),
    bad("matmul str operand", lambda: fpemu.matmul("a", M), TypeError, "str"),
    bad("matmul shapes", lambda: fpemu.matmul(jnp.ones((2, 3)), jnp.ones((2, 3))), (TypeError, ValueError), "3"),
    bad("matmul scalar operand", lambda: fpemu.matmul(jnp.float32(1), M), ValueError, "at least 1 dimension"),
    bad(
        "matmul lhs_scale array",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", lhs_scale=M),
        ValueError,
        "lhs_scale",
        "scalar",
    ),
    bad("matmul lhs_scale str", lambda: fpemu.matmul(M, M, lhs="e4m3fn", lhs_scale="2"), TypeError, "lhs_scale"),
    bad(
        "dot_general bad dims",
        lambda: fpemu.dot_general(M, M, (((5,), (0,)), ((), ()))),
        (TypeError, ValueError),
        "dimension",
    ),
    bad(
        "conv int operand",
        lambda: fpemu.conv_general_dilated(jnp.ones((1, 1, 4), jnp.int32), jnp.ones((1, 1, 1)), (1,), "VALID"),
        TypeError,
        "integer",
    ),
    # explicit random bits (random=): a dict keyed by the call's stochastic roundings
    bad(
        "matmul random and key",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", key=KEY, random={"lhs": 0}),
        ValueError,
        "key=",
        "random=",
        "not both",
    ),
    bad(
        "matmul random not stochastic",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", random={"lhs": 0}),
        ValueError,
        "random is only used with stochastic rounding",
    ),
    bad(
        "matmul random unknown key",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", random={"lhs": 0, "output": 0}),
        ValueError,
        "'output'",
        "valid keys: 'lhs'",
    ),
    bad(
        "matmul random missing key",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", out="bf16", rounding="stochastic", random={"lhs": 0}),
        ValueError,
        "lacks the key 'out'",
        "'lhs', 'out'",
    ),
    bad(
        "matmul random array",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", random=jnp.zeros((2, 2), jnp.uint32)),
        TypeError,
        "random must be a dict",
        "'lhs'",
    ),
    bad(
        "matmul random shape",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", random={"lhs": np.zeros((3,), np.uint32)}),
        ValueError,
        "random['lhs']",
        "shape of a (2, 2)",
    ),
    bad(
        "matmul random float",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", random={"lhs": M}),
        TypeError,
        "random['lhs']",
        "integer",
    ),
    bad(
        "matmul random negative",
        lambda: fpemu.matmul(M, M, lhs="e4m3fn", rounding="stochastic", random={"lhs": -1}),
        ValueError,
        "random['lhs']",
        "[0, 2**32)",
    ),
    bad(
        "conv random accumulate shape",
        lambda: fpemu.conv_general_dilated(
            jnp.ones((1, 1, 4)),
            jnp.ones((1, 1, 2)),
            (1,),
            "VALID",
            accumulate="bf16",
            accumulate_rounding="stochastic",
            random={"accumulate": np.zeros((3, 1, 1, 3), np.uint32)},
        ),
        ValueError,
        "random['accumulate']",
        "(number of chunks,) + the result's shape (2, 1, 1, 3)",
    ),
    # -- emulate / Policy / DotPolicy ------------------------------------------------------------------
    bad(
        "Policy default unknown",
        lambda: fpemu.Policy(default="bf17"),
        fpemu.UnknownFormatError,
        "Policy.default",
        "bf16",
    ),
    bad(
        "Policy rounding",
        lambda: fpemu.Policy(default="bf16", rounding="nearest"),
        ValueError,
        "Policy.rounding",
        MODES,
    ),
    bad(
        "Policy random_bits",
        lambda: fpemu.Policy(default="bf16", random_bits=8),
        ValueError,
        "random_bits",
        "stochastic",
    ),
    bad("Policy saturate", lambda: fpemu.Policy(default="bf16", saturate="yes"), TypeError, "saturate", "bool"),
    bad(
        "Policy round_inputs",
        lambda: fpemu.Policy(default="bf16", round_inputs="all"),
        (TypeError, ValueError),
        "round_inputs",
    ),
    bad(
        "Policy overrides unknown primitive",
        lambda: fpemu.Policy(default="bf16", overrides={"mull": "fp32"}),
        ValueError,
        "mull",
        "mul",
    ),
    bad("DotPolicy lhs", lambda: fpemu.DotPolicy(lhs="e4m3fx"), fpemu.UnknownFormatError, "DotPolicy.lhs"),
    bad("DotPolicy accumulate_every", lambda: fpemu.DotPolicy(accumulate_every=0), ValueError, "accumulate_every"),
    bad(
        "DotPolicy accumulate_rounding",
        lambda: fpemu.DotPolicy(accumulate_rounding="x"),
        ValueError,
        "accumulate_rounding",
        MODES,
    ),
    bad("emulate policy int", lambda: fpemu.emulate(jnp.sin, 3), TypeError, "policy"),
    bad("emulate policy unknown", lambda: fpemu.emulate(jnp.sin, "bf17"), fpemu.UnknownFormatError, "bf16"),
    bad("emulate fn not callable", lambda: fpemu.emulate(3, "bf16"), TypeError, "fn", "callable"),
    bad(
        "emulate key wrong",
        lambda: fpemu.emulate(jnp.sin, fpemu.Policy(default="bf16", rounding="stochastic"), key="k"),
        TypeError,
        "key",
    ),
    bad("emulate key not stochastic", lambda: fpemu.emulate(jnp.sin, "bf16", key=KEY), ValueError, "key", "stochastic"),
    # -- scaled ----------------------------------------------------------------------------------------
    bad(
        "scaled recipe unknown",
        lambda: fpemu.scaled.quantize_dequantize(F32, "mxfp9"),
        fpemu.scaled.UnknownBlockFormatError,
        "mxfp8",
    ),
    bad("scaled recipe None", lambda: fpemu.scaled.quantize_dequantize(F32, None), TypeError, "block_format"),
    bad(
        "scaled rounding",
        lambda: fpemu.scaled.quantize_dequantize(F32, "mxfp8_e4m3", rounding="x"),
        ValueError,
        "rounding",
        MODES,
    ),
    bad(
        "scaled int input",
        lambda: fpemu.scaled.quantize_dequantize(jnp.ones(32, jnp.int32), "mxfp8_e4m3"),
        TypeError,
        "x",
    ),
    bad(
        "scaled axis out of range",
        lambda: fpemu.scaled.quantize_dequantize(jnp.ones((2, 32)), "mxfp8_e4m3", axis=5),
        ValueError,
        "axis",
    ),
    bad(
        "scaled axis str",
        lambda: fpemu.scaled.quantize_dequantize(jnp.ones((2, 32)), "mxfp8_e4m3", axis="last"),
        TypeError,
        "axis",
    ),
    bad(
        "scaled block not dividing",
        lambda: fpemu.scaled.quantize_dequantize(jnp.ones((2, 31)), "mxfp8_e4m3"),
        ValueError,
        "32",
        "pad",
    ),
    bad(
        "scaled no key",
        lambda: fpemu.scaled.quantize_dequantize(F32, "fp8_e4m3", rounding="stochastic"),
        ValueError,
        "key",
    ),
    bad(
        "scaled random and key",
        lambda: fpemu.scaled.quantize_dequantize(F32, "fp8_e4m3", rounding="stochastic", key=KEY, random=0),
        ValueError,
        "key=",
        "random=",
        "not both",
    ),
    bad(
        "scaled random shape",
        lambda: fpemu.scaled.BlockArray.from_array(
            F32, "fp8_e4m3", rounding="stochastic", random_bits=8, random=np.zeros((3,), np.uint8)
        ),
        ValueError,
        "random",
        "(4,)",
    ),
    bad(
        "scaled random out of range",
        lambda: fpemu.scaled.quantize_dequantize(F32, "fp8_e4m3", rounding="stochastic", random_bits=8, random=256),
        ValueError,
        "random",
        "[0, 2**8)",
    ),
    bad(
        "scaled random not stochastic",
        lambda: fpemu.scaled.quantize_dequantize(F32, "fp8_e4m3", random=0),
        ValueError,
        "random is only used with rounding='stochastic'",
    ),
    bad(
        "recipe saturate unknown",
        lambda: fpemu.scaled.BlockFormat(name="r", element="e4m3fn", saturate="sat_finit"),
        ValueError,
        "saturate",
        "sat_finite",
    ),
    bad(
        "scaled saturate override int",
        lambda: fpemu.scaled.quantize_dequantize(F32, "fp8_e4m3", saturate=1),
        ValueError,
        "saturate",
        "sat_propagate",
    ),
    bad(
        "from_array recipe unknown",
        lambda: fpemu.scaled.BlockArray.from_array(F32, "nvfp5"),
        fpemu.scaled.UnknownBlockFormatError,
        "nvfp4",
    ),
    bad(
        "delayed qdq None state",
        lambda: fpemu.scaled.DelayedScaling(block_format="fp8_e4m3").quantize_dequantize(F32, None),
        TypeError,
        "state",
    ),
    bad("get_block_format int", lambda: fpemu.scaled.get_block_format(3), TypeError, "block_format"),
    bad("qsnr shapes", lambda: fpemu.scaled.qsnr(jnp.ones(3), jnp.ones(4)), ValueError, "shape"),
    # -- testing ---------------------------------------------------------------------------------------
    bad(
        "ulp_distance shapes",
        lambda: fpemu.testing.ulp_distance(np.ones(3), np.ones(4), "e4m3fn"),
        ValueError,
        "a and b must broadcast",
        "(3,) and (4,)",
    ),
    bad("ulp_distance fmt", lambda: fpemu.testing.ulp_distance(1.0, 2.0, "e4m3fx"), fpemu.UnknownFormatError, "e4m3fn"),
    bad("assert_close like", lambda: fpemu.testing.assert_close(1.0, 1.0, like="tf"), ValueError, "like", "torch"),
    bad("tolerances framework", lambda: fpemu.testing.tolerances("tf"), ValueError, "torch"),
    bad(
        "assert_bit_exact fmt",
        lambda: fpemu.testing.assert_representable(F32, "e4m3fx"),
        fpemu.UnknownFormatError,
        "e4m3fn",
    ),
    bad(
        "reference rounding",
        lambda: fpemu.testing.reference.round_scalar(1.0, "e4m3fn", rounding="x"),
        ValueError,
        "rounding",
        MODES,
    ),
    bad("values fmt", lambda: fpemu.testing.values("e4m3fx"), fpemu.UnknownFormatError, "e4m3fn"),
    # -- kernels ---------------------------------------------------------------------------------------
    bad(
        "kernel fmt",
        lambda: fpemu.kernels.quantize_kernel(F32, "e4m3fx", interpret=True),
        fpemu.UnknownFormatError,
        "fmt",
    ),
    bad(
        "kernel rounding",
        lambda: fpemu.kernels.quantize_kernel(F32, "e4m3fn", rounding="x", interpret=True),
        ValueError,
        "rounding",
        MODES,
    ),
    bad(
        "kernel interpret str",
        lambda: fpemu.kernels.quantize_kernel(F32, "e4m3fn", interpret="yes"),
        TypeError,
        "interpret",
        "bool",
    ),
    bad(
        "kernel int input",
        lambda: fpemu.kernels.quantize_kernel(jnp.ones(4, jnp.int32), "e4m3fn", interpret=True),
        TypeError,
        "x",
    ),
    bad(
        "kernel key wrong",
        lambda: fpemu.kernels.quantize_kernel(
            F32, "e4m3fn", rounding="stochastic", key=jnp.zeros((3,), jnp.float32), interpret=True
        ),
        TypeError,
        "key",
    ),
    bad(
        "kernel random and key",
        lambda: fpemu.kernels.quantize_kernel(F32, "e4m3fn", rounding="stochastic", key=KEY, random=0, interpret=True),
        ValueError,
        "not both",
    ),
    bad(
        "kernel random float",
        lambda: fpemu.kernels.quantize_kernel(F32, "e4m3fn", rounding="stochastic", random=F32, interpret=True),
        TypeError,
        "random",
        "integer",
    ),
    bad(
        "matmul kernel random unknown key",
        lambda: fpemu.kernels.matmul_kernel(M, M, lhs="e4m3fn", rounding="stochastic", random={"a": 0}, interpret=True),
        ValueError,
        "'a'",
        "valid keys: 'lhs'",
    ),
    bad(
        "matmul kernel lhs",
        lambda: fpemu.kernels.matmul_kernel(M, M, lhs="e4m3fx", interpret=True),
        fpemu.UnknownFormatError,
        "lhs",
    ),
    bad(
        "matmul kernel 3-D",
        lambda: fpemu.kernels.matmul_kernel(jnp.ones((1, 2, 2)), M, interpret=True),
        ValueError,
        "2-D",
    ),
    # -- Policy(dot=...): training recipe names ------------------------------------------------------
    bad(
        "Policy dot MXFP8", lambda: fpemu.Policy(dot="MXFP8"), ValueError, "Policy.dot='MXFP8'", "did you mean 'mxfp8'?"
    ),
    bad("Policy dot mxfp9", lambda: fpemu.Policy(dot="mxfp9"), ValueError, "did you mean 'mxfp8'", "nvfp4"),
    bad(
        "Policy dot E4M3FN",
        lambda: fpemu.Policy(dot="E4M3FN"),
        ValueError,
        "did you mean fpemu.DotPolicy(lhs='e4m3fn', rhs='e4m3fn')?",
    ),
    # -- registry ----------------------------------------------------------------------------------------
    bad("get_format None", lambda: fpemu.get_format(None), TypeError, "None"),
    bad("get_format unknown", lambda: fpemu.get_format("bfloat17"), fpemu.UnknownFormatError, "bfloat16"),
    bad("register_format not a Format", lambda: fpemu.register_format("e4m3fn"), TypeError, "Format"),
    bad(
        "register_format aliases int",
        lambda: fpemu.register_format(
            fpemu.Format(name="bad_aliases_row", exponent_bits=3, mantissa_bits=2), aliases=3
        ),
        TypeError,
        "aliases",
        "None",
    ),
    bad(
        "register_format taken",
        lambda: fpemu.register_format(fpemu.get_format("e4m3fn")),
        ValueError,
        "e4m3fn",
        "taken",
    ),
    bad(
        "Format bad specials",
        lambda: fpemu.Format(name="x", exponent_bits=4, mantissa_bits=3, specials="nan"),
        ValueError,
        "specials",
    ),
    bad(
        "Format negative exponent_bits",
        lambda: fpemu.Format(name="x", exponent_bits=-1, mantissa_bits=3),
        ValueError,
        "exponent_bits",
    ),
    # -- the input contract (docs/semantics.md, "Input contract") ---------------------------------------
    bad(
        "quantize host float64 to fp64",
        lambda: fpemu.quantize(np.array([1.0]), "fp64"),
        ValueError,
        "fp64",
        "jax_enable_x64",
    ),
    bad(
        "quantize x numpy float8",
        lambda: fpemu.quantize(np.ones(2, jnp.float8_e4m3fn), "e2m1fn"),
        TypeError,
        "x",
        "float32",
    ),
    bad("quantize x tuple of str", lambda: fpemu.quantize(("a",), "e4m3fn"), TypeError, "x"),
    bad("decode float list", lambda: fpemu.decode([1.0], "e4m3fn"), TypeError, "codes", "integer"),
    bad("pack code 2**32", lambda: fpemu.pack([2**32, 0], "e2m1fn"), ValueError, "codes", "[0, 16)"),
    bad("pack bool codes", lambda: fpemu.pack(np.array([True, False]), "e2m1fn"), TypeError, "codes", "integer"),
    bad("unpack list", lambda: fpemu.unpack([33], "e2m1fn"), TypeError, "packed", "uint8"),
    bad("matmul float8 operand", lambda: fpemu.matmul(M.astype(jnp.float8_e4m3fn), M), TypeError, "a", "float32"),
    bad(
        "dot_general int rhs",
        lambda: fpemu.dot_general(M, M.astype(jnp.int32), (((1,), (0,)), ((), ()))),
        TypeError,
        "b",
        "integer",
    ),
    bad(
        "emulate fp16 on bfloat16 data",
        lambda: fpemu.emulate(jnp.sin, "fp16")(F32.astype(jnp.bfloat16)),
        ValueError,
        "fp16",
        "bf16",
    ),
    bad(
        "scaled x float64",
        lambda: fpemu.scaled.quantize_dequantize(np.ones(32), "mxfp8_e4m3"),
        TypeError,
        "x",
        "float64",
    ),
    bad(
        "scaled x float64 with x64",
        with_x64(lambda: fpemu.scaled.quantize_dequantize(jnp.ones(32, jnp.float64), "mxfp8_e4m3")),
        TypeError,
        "x",
        "float64",
    ),
    bad("scaled x list", lambda: fpemu.scaled.quantize_dequantize([1.0] * 32, "mxfp8_e4m3"), TypeError, "x", "list"),
    bad(
        "scaled x float8",
        lambda: fpemu.scaled.quantize_dequantize(jnp.ones(32, jnp.float8_e4m3fn), "mxfp8_e4m3"),
        TypeError,
        "x",
        "float8_e4m3fn",
    ),
    bad(
        "from_array x float64",
        lambda: fpemu.scaled.BlockArray.from_array(np.ones(32), "mxfp8_e4m3"),
        TypeError,
        "x",
        "float64",
    ),
    bad(
        "scaled matmul bfloat16",
        lambda: fpemu.scaled.matmul(jnp.ones((1, 32), jnp.bfloat16), jnp.ones((32, 1), jnp.bfloat16), "mxfp8_e4m3"),
        TypeError,
        "a",
        "float32",
    ),
    bad(
        "from_codes code out of range",
        lambda: fpemu.scaled.BlockArray.from_codes(
            np.full((1, 32), 16), np.array([[127]], np.uint8), block_format="mxfp4"
        ),
        ValueError,
        "codes",
        "[0, 16)",
    ),
    bad(
        "matmul_kernel float64 with x64",
        with_x64(lambda: fpemu.kernels.matmul_kernel(M.astype(jnp.float64), M.astype(jnp.float64), interpret=True)),
        ValueError,
        "float32",
        "fpemu.matmul",
    ),
    bad(
        "reference round_array int",
        lambda: fpemu.testing.reference.round_array(np.array([1]), "e4m3fn"),
        ValueError,
        "x",
        "float64",
    ),
]


@pytest.mark.parametrize("case", CATALOGUE, ids=lambda c: c.name)
def test_bad_input_raises_a_clear_error(case: Bad):
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    missing = [s for s in case.says if s not in message]
    assert not missing, f"{type(info.value).__name__}: {message!r} does not mention {missing}"


def test_catalogue_names_are_unique():
    names = [c.name for c in CATALOGUE]
    assert len(names) == len(set(names))


# -- the command line -------------------------------------------------------------------------------

CLI_BAD = [
    (["--bogus"], ("--bogus",)),
    (["bogus"], ("bogus", "cast")),
    (["cast", "--to", "e4m3fn"], ("VALUE",)),
    (["cast", "abc", "--to", "e4m3fn"], ("abc", "VALUE")),
    (["cast", "1.0", "--to", "e4m3fx"], ("e4m3fx", "e4m3fn")),
    (["cast", "1.0", "--to", "E4M3"], ("E4M3", "e4m3fn")),
    (["cast", "1.0", "--rounding", "up"], ("up", "nearest_even")),
    (
        ["cast", "1.0", "--to", "e4m3fn", "--rounding", "stochastic", "--seed", str(2**70)],
        ("argument --seed", "9223372036854775807"),
    ),
    (["cast", "1.0", "--to", "e4m3fn", "--rounding", "stochastic", "--random-bits", "40"], ("random-bits", "32")),
    (["cast", "1.0", "--to", "e4m3fn", "--seed", "3"], ("seed", "stochastic")),
    (["cast", "0x1p40001", "--to", "fp64"], ("0x1p40001", "VALUE", "hex-float exponents from -40000 to 40000")),
    (["info", "fp5"], ("fp5",)),
    (["info"], ("FORMAT",)),
    (["plot", "bogus"], ("bogus", "values")),
    (["plot", "matmul-error", "--recipes", "mxfp9"], ("mxfp9", "mxfp8_e4m3")),
    (["bench", "--bogus"], ("--bogus",)),
]


@pytest.mark.parametrize("argv, says", CLI_BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_cli_names_the_bad_flag_or_value(argv, says, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    missing = [s for s in says if s not in err]
    assert not missing, f"stderr {err!r} does not mention {missing}"


# -- unusual inputs with documented values ---------------------------------------------------------


def bits(x: Any) -> list[int]:
    a = np.asarray(x)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]).ravel().tolist()


@pytest.mark.long
def test_a_python_float_list_is_float64_data():
    """PITFALLS: -431.99999999999994 -> e4m3fn is -416 from float64 (-448 if rounded through float32 first)."""
    v = -431.99999999999994
    for x in (v, [v], (v,), np.float64(v), np.array([v])):
        assert np.asarray(fpemu.quantize(x, "e4m3fn")).ravel().tolist() == [-416.0], x


@pytest.mark.long
def test_float64_overflow_of_float32_is_rounded_from_float64():
    for x in (1e40, [1e40], np.array([1e40])):
        y = fpemu.quantize(x, "e4m3fn", rounding="toward_zero")
        assert np.asarray(y).ravel().tolist() == [448.0]


def test_zero_sized_convolution_is_an_empty_result():
    """A convolution with no output positions returns an empty array (it used to divide by zero)."""
    out = fpemu.conv_general_dilated(jnp.ones((1, 1, 0)), jnp.ones((1, 1, 1)), (1,), "VALID", lhs="e4m3fn")
    assert out.shape == (1, 1, 0) and out.dtype == jnp.float32


def test_decode_out_of_range_under_jit_is_nan():
    """Under jit the codes are not known: out-of-range codes decode to NaN (documented), never a value."""
    out = jax.jit(lambda c: fpemu.decode(c, "e4m3fn"))(jnp.array([256, 7, -1], jnp.int32))
    assert np.isnan(np.asarray(out)[[0, 2]]).all() and float(out[1]) == fpemu.decode([7], "e4m3fn")[0]


FP32_FORMATS = [f for f in fpemu.formats() if f.bits <= 16 and f.mantissa_bits <= 10 and f.name not in ("fp16",)]


@pytest.mark.long
@given(v=st.floats(allow_nan=False, allow_infinity=True, width=64), fmt=st.sampled_from(FP32_FORMATS))
def test_one_float64_value_one_answer_through_every_door(v: float, fmt):
    """The same float64 value gives bit-identical results through every entry point that takes it."""
    expected = np.asarray(fpemu.quantize(np.array([v]), fmt))  # NumPy float64 (x64 off): the reference door
    answers = {
        "python float": fpemu.quantize(v, fmt),
        "list": fpemu.quantize([v], fmt),
        "numpy scalar": fpemu.quantize(np.float64(v), fmt),
        "matmul": fpemu.matmul(np.array([[v]]), np.array([[1.0]]), lhs=fmt),
    }
    with jax.enable_x64(True):
        answers["x64 jax array"] = fpemu.quantize(jnp.asarray([v], jnp.float64), fmt).astype(jnp.float32)
    for door, got in answers.items():
        want = expected.astype(np.float32).ravel()
        if door == "matmul":  # a dot's zero sum is +0 (docs/matmul.md, Special values): -0.0 @ 1.0 is +0
            want = np.where(want == 0, np.float32(0.0), want)
        assert bits(np.asarray(got, np.float32).ravel()) == bits(want), door


# -- the input contract: one float64 value through every door (docs/semantics.md, "Input contract") ----

F64 = -431.99999999999994  # e4m3fn: -416 rounded once; float32 first gives -432, a tie that goes to -448
ONCE, TWICE = -416.0, -448.0
MATMUL_DIMS = (((1,), (0,)), ((), ()))


def jit_quantize(x: Any) -> Any:
    return jax.jit(lambda v: fpemu.quantize(v, "e4m3fn"))(x)


def emulate_same(x: Any) -> Any:
    return fpemu.emulate(lambda v: v, "e4m3fn")(x)


FLOAT64_DOORS = [
    ("quantize Python float", lambda: fpemu.quantize(F64, "e4m3fn"), ONCE),
    ("quantize tuple", lambda: fpemu.quantize((F64,), "e4m3fn"), ONCE),
    ("quantize nested list", lambda: fpemu.quantize([[F64]], "e4m3fn"), ONCE),
    ("encode list", lambda: fpemu.decode(fpemu.encode([F64], "e4m3fn"), "e4m3fn"), ONCE),
    ("matmul with a format", lambda: fpemu.matmul(np.array([[F64]]), np.array([[1.0]]), lhs="e4m3fn"), ONCE),
    ("dot_general of lists", lambda: fpemu.dot_general([[F64]], [[1.0]], MATMUL_DIMS, lhs="e4m3fn"), ONCE),
    (
        "conv_general_dilated",
        lambda: fpemu.conv_general_dilated(np.array([[[F64]]]), np.array([[[1.0]]]), (1,), "VALID", lhs="e4m3fn"),
        ONCE,
    ),
    (
        "matmul_kernel",
        lambda: fpemu.kernels.matmul_kernel(np.array([[F64]]), np.array([[1.0]]), lhs="e4m3fn", interpret=True),
        ONCE,
    ),
    ("reference round_array", lambda: fpemu.testing.reference.round_array(np.array([F64]), "e4m3fn"), ONCE),
    ("reference round_scalar", lambda: fpemu.testing.reference.round_scalar(F64, "e4m3fn"), ONCE),
    ("emulate after quantize", lambda: emulate_same(fpemu.quantize(np.array([F64]), "e4m3fn")), ONCE),
    ("matmul without a format: float32", lambda: fpemu.matmul(np.array([[F64]]), np.array([[1.0]])), -432.0),
    ("quantize_kernel", lambda: fpemu.kernels.quantize_kernel(np.array([F64]), "e4m3fn", interpret=True), ONCE),
    # the doors that cannot, as the table says: JAX makes float32 of the data first (x64 off)
    ("quantize under jit", lambda: jit_quantize(np.array([F64])), TWICE),
    ("quantize of jnp.asarray", lambda: fpemu.quantize(jnp.asarray([F64]), "e4m3fn"), TWICE),
    ("emulate NumPy float64", lambda: emulate_same(np.array([F64])), TWICE),
    ("emulate Python float", lambda: fpemu.emulate(lambda v, c: v + c, "e4m3fn")(jnp.zeros(1), F64), TWICE),
    (
        "matmul with a scale",
        lambda: fpemu.matmul(np.array([[F64]]), np.array([[1.0]]), lhs="e4m3fn", lhs_scale=1.0),
        TWICE,
    ),
    # x64 on: every door rounds once
    ("x64 quantize of a JAX array", with_x64(lambda: fpemu.quantize(jnp.asarray([F64]), "e4m3fn")), ONCE),
    ("x64 quantize under jit", with_x64(lambda: jit_quantize(np.array([F64]))), ONCE),
    ("x64 emulate", with_x64(lambda: emulate_same(np.array([F64]))), ONCE),
    (
        "x64 matmul with a scale",
        with_x64(lambda: fpemu.matmul(jnp.array([[F64]]), jnp.array([[1.0]]), lhs="e4m3fn", lhs_scale=1.0)),
        ONCE,
    ),
    (
        "x64 quantize_kernel",
        with_x64(lambda: fpemu.kernels.quantize_kernel(jnp.asarray([F64]), "e4m3fn", interpret=True)),
        ONCE,
    ),
]


@pytest.mark.long
@pytest.mark.parametrize(("door", "call", "expected"), FLOAT64_DOORS, ids=[d[0] for d in FLOAT64_DOORS])
def test_the_input_contract_for_a_float64_value(door, call, expected):
    assert np.asarray(call(), np.float64).ravel().tolist() == [expected], door


def test_the_input_contract_for_integer_codes():
    """Every accepted spelling of a code gives its value; every spelling of an out-of-range code is an error."""
    for codes in (0x7E, [0x7E], (0x7E,), np.array([0x7E], np.uint8), np.array([0x7E], np.int64), jnp.array([0x7E])):
        assert np.asarray(fpemu.decode(codes, "e4m3fn")).ravel().tolist() == [448.0], codes
    for codes in (2**32, [2**32], np.array([2**32 + 0x7E]), np.array([2**64 - 1], np.uint64), [2**70], [-1]):
        with pytest.raises(ValueError, match=r"codes must lie in \[0, 256\) for e4m3fn"):
            fpemu.decode(codes, "e4m3fn")
        with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\) for e2m1fn"):
            fpemu.pack(np.atleast_1d(np.asarray(codes, object)).tolist(), "e2m1fn")
    scale = np.array([[127]], np.uint8)  # E8M0 1.0
    from_codes = jax.jit(lambda c: fpemu.scaled.BlockArray.from_codes(c, scale, block_format="mxfp4").dequantize())
    out = np.asarray(from_codes(jnp.array([[16, 2] + [0] * 30], jnp.int32)))  # under jit: NaN, never a value
    assert np.isnan(out[0, 0]) and out[0, 1] == 1.0
