"""Corner cases with known correct answers, written from ../shared/PITFALLS.md (not from the code).

Each case: (format name, input, keyword options, expected code). The input is a float32 value
unless it is an `F64` (then it is rounded from its float64 value).
"""

import math

import numpy as np

F32 = np.float32


class F64(float):
    """A float64 input (rounded from its exact float64 value)."""


def f32_bits(bits: int) -> np.float32:
    return np.array(bits, np.uint32).view(np.float32)[()]


INF, NAN = float("inf"), float("nan")

CASES = [
    # e4m3fn (OCP E4M3: max 448, no infinity, NaN 0x7f/0xff)
    ("e4m3fn", F32(2.0**-10), {}, 0x00),  # tie with the smallest subnormal, rounds to even (0)
    ("e4m3fn", F32(-(2.0**-10)), {}, 0x80),
    ("e4m3fn", F32(3 * 2.0**-10), {}, 0x02),
    ("e4m3fn", F32(15 * 2.0**-10), {}, 0x08),  # rounds up into the smallest normal
    ("e4m3fn", F32(1.0625), {}, 0x38),  # tie, to even: 1.0
    ("e4m3fn", F32(1.0625001), {}, 0x39),  # just above the tie: 1.125
    ("e4m3fn", F32(126.24), {}, 0x70),  # mantissa carry into the exponent: 128
    ("e4m3fn", F32(464.0), {}, 0x7E),  # tie above 448, whose mantissa is even: 448
    ("e4m3fn", F32(464.00003), {}, 0x7F),  # above the tie: overflow to NaN
    ("e4m3fn", F32(INF), {}, 0x7F),
    ("e4m3fn", F32(-INF), {}, 0xFF),
    ("e4m3fn", F32(INF), {"saturate": True}, 0x7E),
    ("e4m3fn", F32(-INF), {"saturate": True}, 0xFE),
    ("e4m3fn", F64(-431.99999999999994), {}, 0xFD),  # -416: ml_dtypes' float64 array cast gives -448
    # directed rounding and overflow
    ("e4m3fn", F32(1e6), {"rounding": "toward_zero"}, 0x7E),
    ("e4m3fn", F32(449.0), {"rounding": "toward_positive"}, 0x7F),
    ("e4m3fn", F32(449.0), {"rounding": "toward_negative"}, 0x7E),
    ("e4m3fn", F32(-449.0), {"rounding": "toward_positive"}, 0xFE),
    ("e4m3fn", F32(450.0), {"rounding": "to_odd"}, 0x7E),  # round-to-odd never overflows
    # e5m2 (IEEE-like: max 57344, has infinity)
    ("e5m2", F32(61440.0), {}, 0x7C),  # tie above max (odd mantissa): infinity
    ("e5m2", F32(61439.996), {}, 0x7B),
    ("e5m2", F32(9.0), {}, 0x48),  # 8.0
    ("e5m2", F32(1.125), {}, 0x3C),  # 1.0
    ("e5m2", F32(3 * 2.0**-17), {}, 0x02),
    # fnuz: no -0, NaN is 0x80
    ("e4m3fnuz", F32(-0.0), {}, 0x00),
    ("e4m3fnuz", F32(-(2.0**-13)), {}, 0x00),  # negative underflow: +0, never 0x80
    ("e4m3fnuz", F32(248.0), {}, 0x80),
    ("e4m3fnuz", F32(247.99998), {}, 0x7F),  # 240
    ("e4m3fnuz", F32(INF), {}, 0x80),
    ("e4m3fnuz", F32(-INF), {}, 0x80),
    ("e4m3fnuz", F32(NAN), {}, 0x80),
    ("e5m2fnuz", F32(-0.0), {}, 0x00),
    # bf16
    ("bf16", f32_bits(0x7F800001), {}, 0x7FC0),  # NaN with a low payload stays NaN, not inf
    ("bf16", f32_bits(0x007FFFFF), {}, 0x0080),  # float32 subnormal rounds up to bf16's min normal
    ("bf16", F64(1 + 2.0**-8 + 2.0**-40), {}, 0x3F81),  # one rounding from float64, not two
    # fp16
    ("fp16", F32(65520.0), {}, 0x7C00),
    ("fp16", F32(65519.996), {}, 0x7BFF),
    ("fp16", F32(2.0**-25), {}, 0x0000),
    ("fp16", F32(np.nextafter(F32(2.0**-25), F32(1.0))), {}, 0x0001),
    # FP4: no infinity, no NaN
    ("e2m1fn", F32(7.0), {}, 0x7),  # 6
    ("e2m1fn", F32(INF), {}, 0x7),
    ("e2m1fn", F32(-INF), {}, 0xF),
    ("e2m1fn", F32(NAN), {}, 0x8),  # ml_dtypes: the zero code with the sign inverted
    ("e2m1fn", F32(-NAN), {}, 0x0),
    # E8M0: powers of two 2**-127..2**127, 0xff NaN, no zero, no sign; ties away from zero
    ("e8m0fnu", F32(0.75), {}, 0x7F),  # 1
    ("e8m0fnu", F32(3.0), {}, 0x81),  # 4
    ("e8m0fnu", F32(12.0), {}, 0x83),  # 16
    ("e8m0fnu", F32(0.0), {}, 0xFF),
    ("e8m0fnu", F32(-1.0), {}, 0xFF),
    ("e8m0fnu", F32(INF), {}, 0xFF),
    ("e8m0fnu", F32(NAN), {}, 0xFF),
    ("e8m0fnu", F32(1.5 * 2.0**127), {}, 0xFF),
    ("e8m0fnu", F32(2.0**-128), {}, 0x00),
    ("e8m0fnu", f32_bits(0x00000001), {}, 0x00),
    ("e8m0fnu", F32(1.25 * 2.0**-127), {}, 0x00),  # ml_dtypes gives 2**-126 here
]


def case_id(case) -> str:
    fmt, x, options, _ = case
    kind = "f64" if isinstance(x, F64) else "f32"
    value = "nan" if math.isnan(x) else float(x).hex()
    extra = ",".join(f"{k}={v}" for k, v in options.items())
    return f"{fmt}-{kind}:{value}" + (f"-{extra}" if extra else "")
