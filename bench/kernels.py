"""Speed of the quantize and matmul paths beside the hardware's own limits, on a GPU (bench/gpu.sh) or CPU.

Usage::

    PYTHONPATH=. python3 bench/kernels.py [--quantize-size N] [--matmul-size N] [--repeats R] [--json FILE]

How each row is timed: the jitted function is compiled and run twice, then ``--repeats`` calls are
dispatched back to back and one ``block_until_ready`` waits for the last (so the device never waits
for Python between calls); the median over three such groups, divided by ``--repeats``. A
``block_until_ready`` after every call instead adds the launch gap to every call (on 2**28
elements on an H200 it made XLA's elementwise ops look 35% slower).

Rows:

- **copy**, the ceiling: PyTorch's device-to-device copy (``y.copy_(x)``, timed with CUDA events:
  how the fastest framework measures its own copy) where PyTorch sees a GPU, and
  ``jax.jit(jnp.copy)``; 8 bytes moved per float32 element (read + write). Every quantize row is
  given as a fraction of the first of these.
- **quantize**, float32 input of N elements (default 2**28 on a GPU, 2**20 on CPU): `fpemu.quantize`
  on the XLA path, nearest-even and stochastic, for one format of each family (FP8 e4m3fn and
  e5m2, FP6 e3m2fn, FP4 e2m1fn, E8M0, bf16, fp16, P3109 k8p3se); the Pallas kernel for e4m3fn
  (compiled on a GPU, interpret mode on CPU); `fpemu.scaled.quantize_dequantize` for MXFP8, MXFP4
  and NVFP4, also as a multiple of the e4m3fn quantize time.
- **matmul**, N x N x N (default 8192 on a GPU, 512 on CPU): float32, bf16 and native FP8 dots,
  `fpemu.matmul` with e4m3fn operands (XLA path), and a **bf16 running sum every 32 products**
  through `fpemu.matmul` (the XLA path's scan) and through `fpemu.kernels.matmul_kernel` (the
  fused kernel), each as a fraction of the bf16 dot, the last also as a multiple of the XLA path.

bench/gpu.sh runs this on a GPU machine; bench/RESULTS_gpu.md keeps the numbers.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import fpemu
import fpemu.kernels
import fpemu.scaled
from fpemu.tools.bench import environment

QUANTIZE_FORMATS = ("e4m3fn", "e5m2", "e3m2fn", "e2m1fn", "e8m0fnu", "bf16", "fp16", "p3109_k8p3se")
BLOCK_FORMATS = ("mxfp8", "mxfp4", "nvfp4")


def seconds_per_call(fn: Callable[..., Any], args: tuple, repeats: int) -> float:
    """Median over three groups of ``repeats`` back-to-back calls, per call (after two untimed calls)."""
    for _ in range(2):
        jax.block_until_ready(fn(*args))
    groups = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            out = fn(*args)
        jax.block_until_ready(out)
        groups.append((time.perf_counter() - start) / repeats)
    return statistics.median(groups)


def torch_copy_seconds(n: int, repeats: int) -> float | None:
    """PyTorch's device copy of n float32 elements, CUDA events around back-to-back copies; None
    where PyTorch is missing or sees no GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    groups = []
    for _ in range(3):
        start.record()
        for _ in range(repeats):
            y.copy_(x)
        end.record()
        torch.cuda.synchronize()
        groups.append(start.elapsed_time(end) / 1e3 / repeats)
    del x, y
    torch.cuda.empty_cache()
    return statistics.median(groups)


def _row(suite: str, name: str, fn: Callable[..., Any], args: tuple, repeats: int, **extra: Any) -> dict[str, Any]:
    try:
        return {"suite": suite, "row": name, "seconds": seconds_per_call(fn, args, repeats), **extra}
    except Exception as error:  # e.g. a backend that cannot compile an FP8 dot
        return {"suite": suite, "row": name, "error": f"{type(error).__name__}: {error}"[:200], **extra}


def quantize_rows(n: int, repeats: int, interpret: bool) -> list[dict[str, Any]]:
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32) * 100
    key = jax.random.key(1)
    out = []
    torch_s = torch_copy_seconds(n, repeats)
    if torch_s is not None:
        out.append({"suite": "quantize", "row": "copy: PyTorch y.copy_(x), CUDA events", "seconds": torch_s})
    rows: list[tuple[str, Callable[..., Any], tuple]] = [("copy: jax.jit(jnp.copy)", jax.jit(jnp.copy), (x,))]
    for fmt in QUANTIZE_FORMATS:
        rows.append(
            (f"xla {fmt} nearest_even", jax.jit(functools.partial(fpemu.quantize, fmt=fmt, backend="xla")), (x,))
        )
        stochastic = functools.partial(fpemu.quantize, fmt=fmt, rounding="stochastic", backend="xla")
        rows.append((f"xla {fmt} stochastic", jax.jit(lambda v, k, q=stochastic: q(v, key=k)), (x, key)))
    suffix = " (interpret)" if interpret else ""
    kernel = functools.partial(fpemu.kernels.quantize_kernel, fmt="e4m3fn", interpret=interpret)
    rows.append((f"pallas e4m3fn nearest_even{suffix}", jax.jit(kernel), (x,)))
    rows.append(
        (f"pallas e4m3fn stochastic{suffix}", jax.jit(lambda v, k: kernel(v, rounding="stochastic", key=k)), (x, key))
    )
    blocks = x.reshape(-1, 1024)
    for block_format in BLOCK_FORMATS:
        qdq = functools.partial(fpemu.scaled.quantize_dequantize, block_format=block_format)
        rows.append((f"quantize_dequantize {block_format}", jax.jit(qdq), (blocks,)))
    out += [_row("quantize", name, fn, args, repeats, n=n) for name, fn, args in rows]
    copy = next(r["seconds"] for r in out if "seconds" in r)
    quantize = next((r["seconds"] for r in out if r["row"] == "xla e4m3fn nearest_even" and "seconds" in r), None)
    for row in out:
        row["n"] = n
        if "seconds" in row:
            row["gb_per_s"] = 8 * n / row["seconds"] / 1e9
            row["fraction_of_copy"] = copy / row["seconds"]
            if row["row"].startswith("quantize_dequantize") and quantize:
                row["times_quantize"] = row["seconds"] / quantize
    return out


def matmul_rows(n: int, repeats: int, interpret: bool) -> list[dict[str, Any]]:
    ka, kb = jax.random.split(jax.random.key(2))
    a = jax.random.normal(ka, (n, n), jnp.float32)
    b = jax.random.normal(kb, (n, n), jnp.float32)
    a16, b16 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    f32 = jnp.float32
    narrow = {"accumulate": "bf16", "accumulate_every": 32}
    suffix = " (interpret)" if interpret else ""
    rows: list[tuple[str, Callable[..., Any], tuple]] = [
        ("fp32 HIGHEST", jax.jit(lambda u, v: jnp.dot(u, v, precision=jax.lax.Precision.HIGHEST)), (a, b)),
        ("bf16 (fp32 accumulate)", jax.jit(lambda u, v: jnp.dot(u, v, preferred_element_type=f32)), (a16, b16)),
        ("native fp8 e4m3fn (fp32 accumulate)", jax.jit(lambda u, v: jnp.dot(u, v, preferred_element_type=f32)),
         (a.astype(jnp.float8_e4m3fn), b.astype(jnp.float8_e4m3fn))),
        ("fpemu.matmul e4m3fn (xla)", jax.jit(lambda u, v: fpemu.matmul(u, v, lhs="e4m3fn", rhs="e4m3fn")), (a, b)),
        ("bf16 running sum every 32: fpemu.matmul (xla)", jax.jit(lambda u, v: fpemu.matmul(u, v, **narrow)), (a16, b16)),
        (f"bf16 running sum every 32: matmul_kernel{suffix}",
         jax.jit(lambda u, v: fpemu.kernels.matmul_kernel(u, v, interpret=interpret, **narrow)), (a16, b16)),
    ]  # fmt: skip
    out = [_row("matmul", name, fn, args, repeats, n=n) for name, fn, args in rows]
    bf16 = next(r["seconds"] for r in out if r["row"].startswith("bf16 (") and "seconds" in r)
    xla = next((r["seconds"] for r in out if r["row"].endswith("fpemu.matmul (xla)") and "seconds" in r), None)
    for row in out:
        if "seconds" in row:
            row["tflops"] = 2 * n**3 / row["seconds"] / 1e12
            row["fraction_of_bf16"] = bf16 / row["seconds"]
            if "matmul_kernel" in row["row"] and xla:
                row["times_faster_than_xla"] = xla / row["seconds"]
    return out


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [", ".join(f"{k}: {v}" for k, v in meta.items() if k != "schema"), ""]
    quantize = [r for r in rows if r["suite"] == "quantize"]
    if quantize:
        lines += [f"quantize, {quantize[0]['n']} float32 elements", ""]
        lines += ["| row | GB/s | fraction of the copy | |", "|---|---:|---:|---|"]
        for r in quantize:
            if "error" in r:
                lines.append(f"| {r['row']} | n/a ({r['error']}) | | |")
                continue
            extra = f"{r['times_quantize']:.2f}x the e4m3fn quantize" if "times_quantize" in r else ""
            lines.append(f"| {r['row']} | {r['gb_per_s']:.0f} | {r['fraction_of_copy']:.3f} | {extra} |")
        lines.append("")
    matmul = [r for r in rows if r["suite"] == "matmul"]
    if matmul:
        n = matmul[0]["n"]
        lines += [f"matmul {n}x{n}x{n}", "", "| row | ms | TFLOP/s | fraction of bf16 | |", "|---|---:|---:|---:|---|"]
        for r in matmul:
            if "error" in r:
                lines.append(f"| {r['row']} | n/a ({r['error']}) | | | |")
                continue
            extra = f"{r['times_faster_than_xla']:.2f}x the XLA path" if "times_faster_than_xla" in r else ""
            lines.append(
                f"| {r['row']} | {r['seconds'] * 1e3:.2f} | {r['tflops']:.4g} | {r['fraction_of_bf16']:.3f} | {extra} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    accelerator = jax.default_backend() == "gpu"  # the kernels are compiled with Triton: GPUs only
    parser.add_argument("--quantize-size", type=int, default=(1 << 28) if accelerator else (1 << 20))
    parser.add_argument("--matmul-size", type=int, default=8192 if accelerator else 512)
    parser.add_argument("--repeats", type=int, default=10 if accelerator else 3)
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
    print(markdown(rows, meta), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
