"""Training-step ratios on a GPU: bench/transformer_block.py's step (value_and_grad + SGD) at a size
that fills a GPU, native bf16 against the emulated rows, compile (first call) and step time.

Usage (bench/gpu.sh runs it)::

    PYTHONPATH=. python3 bench/gpu_training_step.py [--batch 16 --seq 512 --d 1024] [--rounds 20]

Rows: ``native bf16`` (parameters and input in bfloat16, not emulated), ``fp32`` (not emulated),
``emulated bf16`` (`fpemu.emulate(step, "bf16")`), a recipe name such as ``fp8_current``, ``mxfp8``,
``nvfp4`` (`fpemu.emulate(step, Policy(dot=...))`, float32 elsewhere), ``bf16+RECIPE``
(`Policy(default="bf16", dot=RECIPE)`), ``fp16`` (float16 parameters and input, not emulated) and
``scalify-fp16`` (`fpemu.scalify.scalify(step)` on `ScaledArray`s of float16 data and float32 scales, as in
bench/test_scalify.py). The first row is the base: each row's step time is the median over rounds,
each round calling every row once in a shuffled order (a fixed seed), of the row's time over the
base's in the same round; the first call (trace and compile) is timed once per row, and shown
against the base's and, where the ``fp32`` row runs, against fp32's (issue 31's compile measure).
Each row also shows its compiled program's size: the instructions that launch work, in the entry
computation and in its loops' and conditionals' computations (``kernels``: fusions, library calls,
loops and the like, on a GPU about one launch each; not parameters, constants, tuples or bitcasts)
and all its instructions. ``--hlo DIR`` writes each row's optimized HLO there, to read what a row
launches. ``--profile ROW,...`` traces ten steps of each of those rows with `jax.profiler` after the
timing and prints where the device's time went (before the summary, which comes last): the 15 largest
entries of each timeline of the device (the GPU's "XLA Ops" and its streams' kernels), in microseconds
per step. XLA:CPU records no such timeline, so on a CPU the profile says so and shows nothing.
"""

from __future__ import annotations

import argparse
import collections
import glob
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformer_block as tb

import fpemu
import fpemu.scalify as jsa
from fpemu.tools.sweep import program_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--rows", default="native bf16,fp32,emulated bf16,fp8_current,mxfp8,nvfp4")
    parser.add_argument("--hlo", type=Path, default=None, help="a folder for each row's optimized HLO")
    parser.add_argument("--profile", default="", help="rows whose steps to trace and break down")
    args = parser.parse_args()
    profiled = [name for name in args.profile.split(",") if name]
    for name in profiled:
        if name not in args.rows.split(","):
            parser.error(f"--profile names {name!r}, which is not one of --rows: {args.rows}")
    tb.BATCH, tb.SEQ, tb.D = args.batch, args.seq, args.d  # read by the block at trace time
    params, x = tb.make_inputs()
    params32 = jax.tree_util.tree_map(jnp.asarray, params)
    x32 = jnp.asarray(x)
    params16 = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params32)
    key = jax.random.key(0)

    def recipe(name):
        default, _, dot = name.rpartition("+")
        policy = fpemu.Policy(default=default, dot=dot) if default else fpemu.Policy(dot=dot)
        fn = fpemu.emulate(tb.step, policy, key=key) if policy.stochastic else fpemu.emulate(tb.step, policy)
        return jax.jit(fn), (params32, x32)

    builders = {
        "native bf16": lambda: (jax.jit(tb.step), (params16, x32.astype(jnp.bfloat16))),
        "fp32": lambda: (jax.jit(tb.step), (params32, x32)),
        "emulated bf16": lambda: (jax.jit(fpemu.emulate(tb.step, "bf16")), (params32, x32)),
        "fp16": lambda: (jax.jit(tb.step), jax.tree_util.tree_map(lambda v: v.astype(jnp.float16), (params32, x32))),
        "scalify-fp16": lambda: (
            jax.jit(jsa.scalify(tb.step)),
            jsa.tree.astype(jsa.as_scaled_array((params32, x32), scale=np.float32(1)), jnp.float16),
        ),
    }
    rows = {}
    sizes = {}
    for name in args.rows.split(","):
        jitted, call_args = builders[name]() if name in builders else recipe(name)
        start = time.perf_counter()  # the first call, as jitted(*call_args) makes it: trace, lower, compile, run
        fn = jitted.lower(*call_args).compile()
        value, _ = jax.block_until_ready(fn(*call_args))
        compile_s = time.perf_counter() - start
        rows[name] = (fn, call_args, compile_s)
        text = fn.as_text()
        sizes[name] = program_size(text)
        if args.hlo is not None:
            args.hlo.mkdir(parents=True, exist_ok=True)
            (args.hlo / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.txt").write_text(text)
        loss = float(jsa.asarray(value, jnp.float32)) if name == "scalify-fp16" else float(value)
        print(f"training: {name}: first call {compile_s:.2f} s, loss {loss:.4g}", flush=True)
    base = next(iter(rows))
    order = list(rows)
    shuffle = random.Random(0)
    ratios: dict[str, list[float]] = {name: [] for name in rows}
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        shuffle.shuffle(order)
        this = {}
        for name in order:
            fn, call_args, _ = rows[name]
            start = time.perf_counter()
            jax.block_until_ready(fn(*call_args))
            this[name] = time.perf_counter() - start
        for name in rows:
            ratios[name].append(this[name] / this[base])
            times[name].append(this[name])
    for name in profiled:
        fn, call_args, _ = rows[name]
        profile(name, lambda fn=fn, call_args=call_args: fn(*call_args))
    device = jax.devices()[0]
    print(f"training: {device.device_kind}, jax {jax.__version__}, B{args.batch} S{args.seq} D{args.d}, "
          f"{args.rounds} interleaved rounds")  # fmt: skip
    for name, (_, _, compile_s) in rows.items():
        vs_fp32 = f", {compile_s / rows['fp32'][2]:.2f}x fp32" if "fp32" in rows and base != "fp32" else ""
        kernels, instructions = sizes[name]
        print(f"training: {name}: step {np.median(times[name]) * 1e3:.2f} ms, {np.median(ratios[name]):.2f}x "
              f"{base}; first call {compile_s:.1f} s ({compile_s / rows[base][2]:.2f}x {base}{vs_fp32}); "
              f"{kernels} kernels, {instructions} instructions")  # fmt: skip


def profile(name: str, call, steps: int = 10) -> None:
    """Trace ``steps`` calls and print the largest entries of each device timeline, per step."""
    jax.block_until_ready(call())
    folder = Path(tempfile.mkdtemp(prefix="gpu_training_step_"))
    try:
        with jax.profiler.trace(str(folder)):
            for _ in range(steps):
                jax.block_until_ready(call())
        (trace,) = glob.glob(str(folder / "**" / "*.xplane.pb"), recursive=True)
        data = jax.profiler.ProfileData.from_file(trace)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    timelines, counts = device_time(data, steps)
    if not timelines:
        print(f"profile: {name}: the trace has no device timeline (XLA:CPU records none)")
    for kind, totals in sorted(timelines.items()):
        print(f"profile: {name}: {kind}: {sum(totals.values()):.0f} us per step in {len(totals)} names")
        for event, us in totals.most_common(15):
            print(f"profile: {name}: {kind}: {us:9.1f} us  x{counts[kind, event] / steps:g}  {event[:100]}")


def device_time(data, steps: int) -> tuple[dict[str, collections.Counter], collections.Counter]:
    """A profile's device timelines (``jax.profiler.ProfileData``): per kind ("XLA Ops", or "streams"
    for the GPU streams' kernels and copies), each event name's microseconds per step; and each
    (kind, name)'s number of events. Host planes and other lines are left out."""
    timelines: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    counts: collections.Counter = collections.Counter()
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            kind = "XLA Ops" if line.name == "XLA Ops" else "streams" if line.name.startswith("Stream") else None
            if kind is None:
                continue
            for event in line.events:
                timelines[kind][event.name] += event.duration_ns / 1e3 / steps
                counts[kind, event.name] += 1
    return dict(timelines), counts


if __name__ == "__main__":
    main()
