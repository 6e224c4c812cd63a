"""The running sum's step of the matmul kernel: ``round(acc + s)`` to the accumulator's format, once.

Everywhere, the step is `fpemu._ops.accumulate.round_accumulator` (the XLA path's step: an exact
addition by TwoSum and round-to-odd, then one rounding by the integer engine), with the kernel's
own rounding of a tile. Compiled on a GPU, for a bfloat16 running sum rounded to nearest even
without saturation, the same result takes nine PTX instructions per element instead of about sixty:

- ``add.rz``, ``add.rm`` and ``add.rp`` of ``acc`` and ``s``: the sum truncated, and whether it was
  exact (the downward and upward sums are equal as floats; ``-0 + +0`` is exact);
- round-to-odd: the truncated sum with its last bit set when it was inexact (``t | 1``), so the one
  rounding that follows is the rounding of the exact sum (24 bits are at least 2 more than bf16's 8);
- an exact zero becomes +0, as in `fpemu._ops.accumulate.positive_zero`;
- ``cvt.rn.bf16.f32`` (round to nearest even: overflow to ±inf, bf16 subnormals kept, NaN stays
  NaN) and ``cvt.f32.bf16`` back.

Measured on an H200 at 8192**3 with ``accumulate_every=32``, in a prototype kernel with this step
(bench/RESULTS_gpu.md; its setp compared bits, this one compares floats so that -0 + +0 is exact):
7.9 ms against 31 ms with the integer step and 68 ms for the XLA path, bit-identical to the XLA path
on all 67,108,864 outputs. Interpret mode (CPU) cannot run PTX: it runs the integer step,
which gives the same bits. float16 running sums (``cvt.rn.f16.f32``) would work the same way and are
left on the integer step until a GPU run has checked them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fpemu._jax.pallas import elementwise_inline_asm
from fpemu._ops.matmul_config import MatmulConfig

_BF16_STEP = """
{
.reg .f32 rz, rd, ru;
.reg .b32 t;
.reg .pred inexact, zero;
.reg .b16 h;
add.rz.f32 rz, $1, $2;
add.rm.f32 rd, $1, $2;
add.rp.f32 ru, $1, $2;
mov.b32 t, rz;
setp.ne.f32 inexact, rd, ru;
@inexact or.b32 t, t, 1;
setp.eq.f32 zero, rz, 0f00000000;
and.pred zero, zero, !inexact;
@zero mov.b32 t, 0;
mov.b32 rz, t;
cvt.rn.bf16.f32 h, rz;
cvt.f32.bf16 $0, h;
}
"""


def ptx_step_applies(cfg: MatmulConfig, interpret: bool) -> bool:
    """Whether the compiled kernel's step for ``cfg`` is the PTX one: a bf16 running sum rounded to
    nearest even, without saturation, on a GPU."""
    return (
        not interpret
        and not cfg.direct
        and cfg.accumulate.name == "bf16"
        and cfg.accumulate_rounding == "nearest_even"
        and cfg.saturate is False
    )


def bf16_step(acc: jax.Array, s: jax.Array) -> jax.Array:
    """``round(acc + s)`` to bfloat16, nearest even, as float32: the PTX step (compiled kernels only)."""
    (out,) = elementwise_inline_asm(
        _BF16_STEP,
        args=[acc, s],
        constraints="=r,r,r",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(acc.shape, jnp.float32)],
    )
    return out


__all__ = ["bf16_step", "ptx_step_applies"]
