"""Speed of the Pallas kernels beside the XLA path and the hardware's own limits (issue #3's targets).

Usage::

    PYTHONPATH=. python3 bench/kernels.py [--quantize-size N] [--matmul-size N] [--repeats R] [--json FILE]

Rows (each timed the same way: compiled and run once before timing, every call ends in
``block_until_ready``, the median of ``--repeats`` calls is reported):

- quantize, float32 input of N elements (default 2**28 on a GPU, 2**20 on CPU): a device-to-device
  copy (``jnp.copy`` under ``jit``: the bandwidth reference, 8 bytes moved per element) and
  ``x * -1`` (the cheapest elementwise op), then ``fpemu.quantize`` to e4m3fn with nearest-even and
  stochastic rounding through ``backend="xla"`` and through the Pallas kernel (compiled on a GPU,
  interpret mode on CPU, where it is the only way Pallas runs). Reported: ns/element, GB/s (8
  bytes per element) and the fraction of the copy's bandwidth.
- matmul, N x N x N (default 8192 on a GPU, 512 on CPU): float32 (default precision and
  ``HIGHEST``), bfloat16 with float32 accumulation, the native FP8 ``jnp.dot`` on float8_e4m3fn
  inputs (where the backend compiles it), ``fpemu.matmul`` with e4m3fn operands and float32
  accumulation (the XLA path), and ``fpemu.kernels.matmul_kernel`` with the same options.
  Reported: TFLOP/s (2 N**3 per product) and the ratio to the bf16 matmul.

The targets (H200): quantize at least 85% of the copy bandwidth at 2**28 elements; the emulated
e4m3fn matmul at least 70% of the bf16 matmul at 8192**3. bench/gpu.sh runs this on a GPU machine;
bench/RESULTS.md keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import fpemu
import fpemu.kernels
from fpemu.tools.bench import environment, timeit


def _median_seconds(fn: Callable[..., Any], args: tuple, repeats: int) -> float:
    return timeit(lambda: fn(*args), warmup=2, min_repeats=repeats, max_repeats=repeats).median_s


def quantize_rows(n: int, repeats: int, interpret: bool) -> list[dict[str, Any]]:
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32) * 100
    key = jax.random.key(1)
    rows = [
        ("copy", jax.jit(jnp.copy), (x,)),
        ("negate", jax.jit(lambda v: v * -1), (x,)),
        ("xla nearest_even", jax.jit(lambda v: fpemu.quantize(v, "e4m3fn", backend="xla")), (x,)),
        (
            "xla stochastic",
            jax.jit(lambda v, k: fpemu.quantize(v, "e4m3fn", rounding="stochastic", key=k, backend="xla")),
            (x, key),
        ),
        (
            "pallas nearest_even" + (" (interpret)" if interpret else ""),
            jax.jit(lambda v: fpemu.kernels.quantize_kernel(v, "e4m3fn", interpret=interpret)),
            (x,),
        ),
        (
            "pallas stochastic" + (" (interpret)" if interpret else ""),
            jax.jit(
                lambda v, k: fpemu.kernels.quantize_kernel(
                    v, "e4m3fn", rounding="stochastic", key=k, interpret=interpret
                )
            ),
            (x, key),
        ),
    ]
    for _ in range(10):  # bring the allocator and thread pool to a steady state before the first row
        jax.block_until_ready(rows[0][1](x))
    out = []
    for name, fn, args in rows:
        seconds = _median_seconds(fn, args, repeats)
        out.append({"suite": "quantize", "row": name, "n": n, "seconds": seconds})
    copy = out[0]["seconds"]
    for row in out:
        row["ns_per_element"] = row["seconds"] / n * 1e9
        row["gb_per_s"] = 8 * n / row["seconds"] / 1e9
        row["fraction_of_copy_bandwidth"] = copy / row["seconds"]
    return out


def matmul_rows(n: int, repeats: int, interpret: bool) -> list[dict[str, Any]]:
    ka, kb = jax.random.split(jax.random.key(2))
    a = jax.random.normal(ka, (n, n), jnp.float32)
    b = jax.random.normal(kb, (n, n), jnp.float32)
    f32 = jnp.float32
    rows: list[tuple[str, Callable[..., Any], tuple]] = [
        ("fp32 default precision", jax.jit(lambda u, v: jnp.dot(u, v)), (a, b)),
        ("fp32 HIGHEST", jax.jit(lambda u, v: jnp.dot(u, v, precision=jax.lax.Precision.HIGHEST)), (a, b)),
        ("bf16 (fp32 accumulate)", jax.jit(lambda u, v: jnp.dot(u, v, preferred_element_type=f32)), (a.astype(jnp.bfloat16), b.astype(jnp.bfloat16))),
        ("native fp8 e4m3fn (fp32 accumulate)", jax.jit(lambda u, v: jnp.dot(u, v, preferred_element_type=f32)), (a.astype(jnp.float8_e4m3fn), b.astype(jnp.float8_e4m3fn))),
        ("fpemu.matmul e4m3fn (xla)", jax.jit(lambda u, v: fpemu.matmul(u, v, lhs="e4m3fn", rhs="e4m3fn")), (a, b)),
    ]  # fmt: skip
    label = "kernels.matmul_kernel e4m3fn" + (" (interpret)" if interpret else "")
    fn = jax.jit(lambda u, v: fpemu.kernels.matmul_kernel(u, v, lhs="e4m3fn", rhs="e4m3fn", interpret=interpret))
    rows.append((label, fn, (a, b)))
    out = []
    for name, fn, args in rows:
        try:
            seconds = _median_seconds(fn, args, repeats)
        except Exception as error:  # e.g. a backend that cannot compile an FP8 dot
            out.append({"suite": "matmul", "row": name, "n": n, "error": f"{type(error).__name__}: {error}"[:200]})
            continue
        out.append({"suite": "matmul", "row": name, "n": n, "seconds": seconds, "tflops": 2 * n**3 / seconds / 1e12})
    bf16 = next(r["seconds"] for r in out if r["row"].startswith("bf16"))
    for row in out:
        if "seconds" in row:
            row["fraction_of_bf16"] = bf16 / row["seconds"]
    return out


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [", ".join(f"{k}: {v}" for k, v in meta.items() if k != "schema"), ""]
    quantize = [r for r in rows if r["suite"] == "quantize"]
    if quantize:
        lines += [f"quantize to e4m3fn, {quantize[0]['n']} float32 elements", ""]
        lines += ["| row | ns/element | GB/s | fraction of copy bandwidth |", "|---|---:|---:|---:|"]
        for r in quantize:
            lines.append(
                f"| {r['row']} | {r['ns_per_element']:.4g} | {r['gb_per_s']:.4g} | {r['fraction_of_copy_bandwidth']:.3f} |"
            )
        lines.append("")
    matmul = [r for r in rows if r["suite"] == "matmul"]
    if matmul:
        n = matmul[0]["n"]
        lines += [f"matmul {n}x{n}x{n}", "", "| row | TFLOP/s | fraction of bf16 |", "|---|---:|---:|"]
        for r in matmul:
            if "error" in r:
                lines.append(f"| {r['row']} | n/a ({r['error']}) | |")
            else:
                lines.append(f"| {r['row']} | {r['tflops']:.4g} | {r['fraction_of_bf16']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    accelerator = jax.default_backend() == "gpu"  # the kernels are compiled with Triton: GPUs only
    parser.add_argument("--quantize-size", type=int, default=(1 << 28) if accelerator else (1 << 20))
    parser.add_argument("--matmul-size", type=int, default=8192 if accelerator else 512)
    parser.add_argument("--repeats", type=int, default=20 if accelerator else 5)
    parser.add_argument("--skip", choices=["quantize", "matmul"], action="append", default=[])
    parser.add_argument("--json", type=Path, help="also write the rows and the machine description here")
    args = parser.parse_args(argv)
    interpret = not accelerator
    rows = []
    if "quantize" not in args.skip:
        rows += quantize_rows(args.quantize_size, args.repeats, interpret)
    if "matmul" not in args.skip:
        rows += matmul_rows(args.matmul_size, args.repeats, interpret)
    meta = environment()
    print(_markdown(rows, meta))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
