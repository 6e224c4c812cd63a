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
    ("e8m0fnu", F32(12.0), {"exponent_ties": "even"}, 0x82),  # 8: the even exponent (130)
    # IEEE P3109 binary8p3se (e5m2, bias 16): max 49152 (0x7e), +inf 0x7f, NaN 0x80 (the -0 code), -inf 0xff
    ("p3109_k8p3se", F32(49152.0), {}, 0x7E),
    ("p3109_k8p3se", F32(53248.0), {}, 0x7E),  # the tie above max (even mantissa): max
    ("p3109_k8p3se", F32(53248.004), {}, 0x7F),  # above it: +inf
    ("p3109_k8p3se", F32(INF), {}, 0x7F),
    ("p3109_k8p3se", F32(-INF), {}, 0xFF),
    ("p3109_k8p3se", F32(NAN), {}, 0x80),
    ("p3109_k8p3se", F32(-NAN), {}, 0x80),  # one NaN, no sign
    ("p3109_k8p3se", F32(-0.0), {}, 0x00),  # no -0
    ("p3109_k8p3se", F32(-(2.0**-19)), {}, 0x00),  # a negative underflow is +0, never the NaN code
    ("p3109_k8p3se", F32(2.0**-18), {}, 0x00),  # tie with the smallest subnormal 2**-17: even
    ("p3109_k8p3se", F32(3 * 2.0**-18), {}, 0x02),
    ("p3109_k8p3se", F32(-3.0), {}, 0xC6),
    # P3109's saturation modes: to_odd overflows under OvfInf; SatPropagate keeps infinities
    ("p3109_k8p3se", F32(1e6), {"rounding": "to_odd"}, 0x7E),
    ("p3109_k8p3se", F32(1e6), {"rounding": "to_odd", "saturate": "ovf_inf"}, 0x7F),
    ("p3109_k8p3se", F32(-1e6), {"rounding": "to_odd", "saturate": "ovf_inf"}, 0xFF),
    ("p3109_k8p3se", F32(1e6), {"saturate": "sat_propagate"}, 0x7E),
    ("p3109_k8p3se", F32(-INF), {"saturate": "sat_propagate"}, 0xFF),
    ("p3109_k8p3se", F32(INF), {"saturate": "sat_finite"}, 0x7E),
    ("p3109_k8p3se", F32(1e6), {"rounding": "toward_zero", "saturate": "ovf_inf"}, 0x7E),
    ("p3109_k8p3sf", F32(INF), {"saturate": "sat_propagate"}, 0x7F),  # finite domain: max (e5m2fnuz's 57344)
    ("p3109_k8p3sf", F32(INF), {"saturate": "ovf_inf"}, 0x80),
    # P3109 binary8p1se (no mantissa: 2**(E - 64)): ties away (ml_dtypes' rule) or to the even exponent
    ("p3109_k8p1se", F32(6.0), {}, 0x43),  # 8
    ("p3109_k8p1se", F32(6.0), {"exponent_ties": "even"}, 0x42),  # 4: E = 66 is even
    ("p3109_k8p1se", F32(3.0), {"exponent_ties": "even"}, 0x42),  # 4 again (2 is E = 65)
    ("p3109_k8p1se", F32(2.0**-64), {}, 0x01),  # the tie between 0 and the smallest value 2**-63
    ("p3109_k8p1se", F32(2.0**-64), {"exponent_ties": "even"}, 0x00),
    # P3109 binary8p4ue (unsigned, bias 16): max 53248 (0xfd), +inf 0xfe, NaN 0xff; negative inputs
    ("p3109_k8p4ue", F32(1e9), {}, 0xFE),
    ("p3109_k8p4ue", F32(1e9), {"saturate": True}, 0xFD),
    ("p3109_k8p4ue", F32(-1.0), {}, 0xFF),  # fpemu's rule: negative -> NaN
    ("p3109_k8p4ue", F32(-1.0), {"saturate": True}, 0xFF),
    ("p3109_k8p4ue", F32(-1.0), {"saturate": "sat_finite"}, 0x00),  # P3109: the lowest value, 0
    ("p3109_k8p4ue", F32(-INF), {"saturate": "sat_propagate"}, 0x00),
    ("p3109_k8p4ue", F32(-1.0), {"saturate": "ovf_inf"}, 0xFF),
    ("p3109_k8p4ue", F32(-1.0), {"saturate": "ovf_inf", "rounding": "toward_zero"}, 0x00),
    ("p3109_k8p4ue", F32(-1.0), {"saturate": "ovf_inf", "rounding": "toward_positive"}, 0x00),
    ("p3109_k8p4ue", F32(-INF), {"saturate": "ovf_inf", "rounding": "toward_zero"}, 0xFF),
    ("p3109_k8p4ue", F32(-(2.0**-19)), {"saturate": "ovf_inf"}, 0x00),  # rounds to zero: 0
    ("p3109_k8p4ue", F32(-(2.0**-19)), {}, 0xFF),
    # OCP INT8 (MXINT8 element): two's complement k/64, -2.0 is 0x80, no NaN, no -0
    ("int8_ocp", F32(-2.0), {}, 0x80),
    ("int8_ocp", F32(-2.0078125), {}, 0x80),  # tie between -2 (even) and -129/64: -2
    ("int8_ocp", F32(-2.5), {}, 0x80),  # overflow: no infinity or NaN, so the most negative value
    ("int8_ocp", F32(2.0), {}, 0x7F),  # 127/64
    ("int8_ocp", F32(-1.99), {"rounding": "toward_negative"}, 0x80),
    ("int8_ocp", F32(-(1 / 64)), {}, 0xFF),
    ("int8_ocp", F32(1 / 128), {}, 0x00),  # tie with 1/64: even
    ("int8_ocp", F32(3 / 128), {}, 0x02),
    ("int8_ocp", F32(-0.0), {}, 0x00),
    ("int8_ocp", F32(-INF), {}, 0x80),
    ("int8_ocp", F32(INF), {}, 0x7F),
    ("int8_ocp", F32(NAN), {}, 0x00),  # no NaN code and no -0 to invert into: the zero code
]


def case_id(case) -> str:
    fmt, x, options, _ = case
    kind = "f64" if isinstance(x, F64) else "f32"
    value = "nan" if math.isnan(x) else float(x).hex()
    extra = ",".join(f"{k}={v}" for k, v in options.items())
    return f"{fmt}-{kind}:{value}" + (f"-{extra}" if extra else "")
