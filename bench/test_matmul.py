"""Speed of `fpemu.matmul` beside the plain float32 and bfloat16 matmuls: one table (group) per shape.

Every row is a jitted function of two float32 matrices, compiled and run once before timing, each
timed call ending in ``block_until_ready``. The emulated rows include rounding both operands (and
the output where a row says so). After timing, each fpemu row checks a few output rows against a
float64 computation on the rounded operands. The module prints its own summary (ratios to the
float32 matmul of the same group, and the verdict on the issue's target) when it finishes, apart
from conftest.py's quantize summary, which is about ns/element of 2**24-element arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
from fpemu.tools.bench import machine_line

HIGHEST = lax.Precision.HIGHEST
CHECK_ROWS = 4


def _fp32(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _bf16_peer(a, b):  # the hardware's bf16 x bf16 -> f32 product, no rounding work: the lower bound
    return lax.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), (((1,), (0,)), ((), ())),
                           preferred_element_type=jnp.float32)  # fmt: skip


def _native_fp8(a, b):  # the backend's own FP8 dot on float8_e4m3fn casts (XLA:CPU upcasts; Hopper has FP8 MMA)
    return lax.dot_general(a.astype(jnp.float8_e4m3fn), b.astype(jnp.float8_e4m3fn), (((1,), (0,)), ((), ())),
                           preferred_element_type=jnp.float32)  # fmt: skip


def _pallas_kernel(a, b):  # GPU only: on CPU, interpret mode would time the interpreter
    from fpemu.kernels import matmul_kernel

    return matmul_kernel(a, b, lhs="e4m3fn", rhs="e4m3fn")


def _quantize_then_fp32(a, b):  # what the fast path saves: the same rounding, then a float32 dot
    return jnp.matmul(fpemu.quantize(a, "e4m3fn"), fpemu.quantize(b, "e4m3fn"), precision=HIGHEST)


def _fpemu(**options):
    return lambda a, b: fpemu.matmul(a, b, **options)


_LHS_FIRST = (((0,), (0,)), ((), ()))  # a.T @ b


def _fp32_lhs_transposed(a, b):
    return jnp.matmul(a.T, b, precision=HIGHEST)


def _fpemu_lhs_transposed(a, b):
    return fpemu.dot_general(a, b, _LHS_FIRST, lhs="e4m3fn", rhs="e4m3fn")


# group -> (n, {row: (function, description, (lhs format, rhs format) for the check or None)})
GROUPS = {
    "2048^3": (
        2048,
        {
            "fp32 matmul": (_fp32, "jnp.matmul(a, b), float32, Precision.HIGHEST", None),
            "bf16 x bf16 -> f32": (_bf16_peer, "lax.dot_general on bf16 casts, f32 accumulation (peer)", None),
            "native fp8 e4m3fn -> f32": (
                _native_fp8,
                "lax.dot_general on float8_e4m3fn casts, f32 accumulation (peer)",
                ("e4m3fn", "e4m3fn"),
            ),
            "fpemu e4m3fn": (
                _fpemu(lhs="e4m3fn", rhs="e4m3fn"),
                "fpemu.matmul(lhs=rhs='e4m3fn'): fast path",
                ("e4m3fn", "e4m3fn"),
            ),
            "pallas kernel e4m3fn": (
                _pallas_kernel,
                "fpemu.kernels.matmul_kernel(lhs=rhs='e4m3fn') (GPU only)",
                ("e4m3fn", "e4m3fn"),
            ),
            "fpemu e4m3fn x e5m2, out bf16": (
                _fpemu(lhs="e4m3fn", rhs="e5m2", out="bf16"),
                "fast path, output rounded to bf16",
                None,
            ),
            "fpemu e2m1fn": (_fpemu(lhs="e2m1fn", rhs="e2m1fn"), "FP4 operands: fast path", ("e2m1fn", "e2m1fn")),
            "quantize + fp32 matmul": (_quantize_then_fp32, "quantize both to e4m3fn, then the float32 matmul", None),
            "fpemu fp16": (
                _fpemu(lhs="fp16", rhs="fp16"),
                "fp16 operands: no fast path (float32 dot)",
                ("fp16", "fp16"),
            ),
            "fpemu e4m3fn, fp32 every 128": (
                _fpemu(lhs="e4m3fn", rhs="e4m3fn", accumulate="fp32", accumulate_every=128),
                "FP8 GEMM recipe: float32 chunks of 128, promoted",
                ("e4m3fn", "e4m3fn"),
            ),
        },
    ),
    "512^3": (
        512,
        {
            "fp32 matmul": (_fp32, "jnp.matmul(a, b), float32", None),
            "fpemu e4m3fn": (_fpemu(lhs="e4m3fn", rhs="e4m3fn"), "fast path", ("e4m3fn", "e4m3fn")),
            "fpemu e4m3fn, bf16 accumulator": (
                _fpemu(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16"),
                "sequential bf16 running sum (every product)",
                None,
            ),
            "fpemu fp16, fp16 accumulator": (
                _fpemu(lhs="fp16", rhs="fp16", accumulate="fp16"),
                "sequential fp16 running sum (every product)",
                None,
            ),
            "fp32 matmul, lhs transposed": (_fp32_lhs_transposed, "jnp.matmul(a.T, b), float32", None),
            "fpemu e4m3fn, lhs transposed": (
                _fpemu_lhs_transposed,
                "fpemu.dot_general contracting a's first axis: the rounded lhs is transposed",
                None,
            ),
            "fpemu fp32 every 1": (_fpemu(accumulate_every=1), "sequential float32 sum (a fixed order)", None),
            "fpemu e4m3fn, bf16 every 32": (
                _fpemu(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=32),
                "bf16 running sum, chunks of 32",
                None,
            ),
        },
    ),
}
CASES = [(group, row) for group, (_, rows) in GROUPS.items() for row in rows]
_TIMES: dict[tuple[str, str], dict[str, float]] = {}


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(20261121)
    out = {}
    for group, (n, _) in GROUPS.items():
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        out[group] = (jnp.asarray(a).block_until_ready(), jnp.asarray(b).block_until_ready())
    return out


def _check(y: np.ndarray, a: jax.Array, b: jax.Array, formats: tuple[str, str]) -> None:
    """The first rows against float64 on the rounded operands, within the float32 summation bound."""
    qa = np.asarray(fpemu.quantize(a[:CHECK_ROWS], formats[0]), np.float64)
    qb = np.asarray(fpemu.quantize(b, formats[1]), np.float64)
    exact = qa @ qb
    k = qa.shape[1]
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    assert np.all(np.abs(y[:CHECK_ROWS] - exact) <= gamma * (np.abs(qa) @ np.abs(qb)))


@pytest.mark.parametrize(("group", "row"), CASES, ids=[f"{g}-{r}" for g, r in CASES])
def test_matmul_speed(benchmark, operands, group, row):
    fn, description, check = GROUPS[group][1][row]
    if row.startswith("pallas") and jax.default_backend() != "gpu":
        pytest.skip("the compiled Pallas kernel needs a GPU (interpret mode would time the interpreter)")
    benchmark.group = f"matmul {group}"
    benchmark.extra_info["row"] = description
    a, b = operands[group]
    jitted = jax.jit(fn)

    def call():
        return jitted(a, b).block_until_ready()

    call()  # compile and warm up
    y = np.asarray(benchmark(call))
    if benchmark.stats is not None:
        _TIMES[group, row] = {stat: benchmark.stats[stat] for stat in ("median", "min")}
    if check is not None:
        _check(y, a, b, check)


def summary_lines(times: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    lines = [
        machine_line(),
        "",
        "| group | row | median ms | min ms | median / fp32 | min / fp32 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (group, row), t in times.items():
        base = times.get((group, "fp32 matmul"))
        ratios = [f"{t[s] / base[s]:.2f}" if base else "n/a" for s in ("median", "min")]
        ms = f"{t['median'] * 1e3:.1f} | {t['min'] * 1e3:.1f}"
        lines.append(f"| {group} | {row} | {ms} | {ratios[0]} | {ratios[1]} |")
    fp8, fp32 = times.get(("2048^3", "fpemu e4m3fn")), times.get(("2048^3", "fp32 matmul"))
    if fp8 and fp32:
        verdicts = [
            f"by {s}: {'met' if fp8[s] < fp32[s] else 'MISSED'} ({fp8[s] / fp32[s]:.2f})" for s in ("median", "min")
        ]
        target = "target emulated FP8 matmul faster than the fp32 matmul at 2048^3 [ratio < 1]: "
        lines += ["", target + "; ".join(verdicts)]
    return lines


@pytest.fixture(autouse=True)
def _summary(print_summary):
    print_summary("fpemu matmul speed summary", lambda: summary_lines(_TIMES) if _TIMES else [])
