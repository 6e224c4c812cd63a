"""Every training recipe's step on a small model: compile time by phase and step time, beside fp32 and emulated bf16.

Usage::

    PYTHONPATH=. python3 bench/training_sweep.py [--model mlp|transformer] [--recipes fp8_current,mxfp8,...]
                                                 [--rounds 15] [--forms dot,bf16+dot]

The models:

- ``mlp``: the digits MLP 64-128-128-10 (ReLU), batch 64, softmax cross-entropy, one optax Adam step;
- ``transformer``: bench/transformer_block.py's pre-LayerNorm block (batch 8, sequence 128, d 256),
  value_and_grad + SGD.

Rows: ``fp32`` (not emulated), ``emulated bf16`` (``emulate(step, "bf16")``) and, per recipe, the
step under ``Policy(dot=recipe)`` (form ``dot``) and ``Policy(default="bf16", dot=recipe)`` (form
``bf16+dot``). A stochastic recipe gets a key.

**Compile time** is measured per row on a fresh function with every JAX cache cleared, in three
phases: ``trace`` (JAX's trace, which includes emulate's interpreter), ``lower`` (to StableHLO) and
``compile`` (XLA), and given as a multiple of fp32's total; with ``--compiles N``, each phase is the
minimum over N fresh builds (a single compile varies by 10% or more with the machine's load). Beside
it, two measures of XLA's work that do not depend on the load: the optimized HLO's kernels (the
top-level instructions that launch work: XLA:CPU compiles each distinct one once, a few
milliseconds each) and its instructions. **Step time** is the median over
``--rounds`` rounds; each round calls every row once, in an order shuffled per round (a fixed
seed), and a row's ratio is the median of its time over emulated bf16's in the same round. The
allocator settings (``GLIBC_TUNABLES``) and ``XLA_FLAGS`` are printed with the machine: on CPU a
step whose buffer of intermediate values exceeds glibc's largest mmap threshold (32 MiB) pays a
page fault per 4 KiB of it at every call (bench/RESULTS_training.md, "Page faults"). So each row
also shows that buffer (``temp MiB``: XLA's ``memory_analysis().temp_size_in_bytes``) and the
process's minor page faults per call over the timed calls (``faults``; ``getrusage``, where the
platform has it).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformer_block
from gpu_training_step import program_size

import fpemu
from fpemu.tools.bench import machine_line


def mlp_model() -> tuple[Callable[..., Any], tuple]:
    """The digits MLP's Adam step and its arguments (params, optimizer state, x, labels)."""
    import optax

    rng = np.random.default_rng(0)
    sizes = (64, 128, 128, 10)
    params = [
        {"w": (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), "b": np.zeros(o, np.float32)}
        for i, o in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    params = jax.tree_util.tree_map(jnp.asarray, params)
    x = jnp.asarray(rng.standard_normal((64, 64)).astype(np.float32))
    labels = jnp.asarray(rng.integers(0, 10, 64))
    opt = optax.adam(1e-3)

    def loss(p, x, labels):
        h = x
        for layer in p[:-1]:
            h = jax.nn.relu(h @ layer["w"] + layer["b"])
        logits = h @ p[-1]["w"] + p[-1]["b"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def step(p, state, x, labels):
        value, grads = jax.value_and_grad(loss)(p, x, labels)
        updates, state = opt.update(grads, state, p)
        return value, optax.apply_updates(p, updates), state

    return step, (params, opt.init(params), x, labels)


def transformer_model() -> tuple[Callable[..., Any], tuple]:
    params, x = transformer_block.make_inputs()
    return transformer_block.step, (jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(x))


MODELS = {"mlp": mlp_model, "transformer": transformer_model}


def rows_for(
    step: Callable[..., Any], args: tuple, recipes: list[str], forms: list[str]
) -> dict[str, tuple[Callable[[], Callable], tuple]]:
    """Row name -> (a builder of a fresh unjitted function for that row, its arguments). A recipe with
    delayed scaling runs as ``emulate(step, policy, state=True)`` from its first state."""
    key = jax.random.key(0)

    def emulated(policy):
        options = {"key": key} if isinstance(policy, fpemu.Policy) and policy.stochastic else {}
        try:
            fpemu.emulate(step, policy, **options)
        except ValueError as error:  # delayed scaling: amax histories in a state
            if "state=True" not in str(error):
                raise
            state = fpemu.init_training_state(step, policy, *args)
            return (lambda: fpemu.emulate(step, policy, state=True, **options)), (state, *args)
        return (lambda: fpemu.emulate(step, policy, **options)), args

    rows = {"fp32": ((lambda: lambda *a: step(*a)), args), "emulated bf16": emulated("bf16")}
    for recipe in recipes:
        if "dot" in forms:
            rows[recipe] = emulated(fpemu.Policy(dot=recipe))
        if "bf16+dot" in forms:
            rows[f"bf16+{recipe}"] = emulated(fpemu.Policy(default="bf16", dot=recipe))
    return rows


def compile_phases(build: Callable[[], Callable], args: tuple) -> tuple[float, float, float, int, int, float]:
    """(trace, lower, XLA compile) seconds of a fresh function, every JAX cache cleared first, the
    kernels of its optimized HLO (`gpu_training_step.program_size`), its instructions (the lines of
    ``compile().as_text()`` that assign a value) and its buffer of intermediate values in MiB."""
    jax.clear_caches()
    fn = jax.jit(build())
    start = time.perf_counter()
    traced = fn.trace(*args)
    traced_at = time.perf_counter()
    lowered = traced.lower()
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    text = compiled.as_text()
    kernels, _ = program_size(text)
    instructions = sum(" = " in line for line in text.splitlines())  # as recorded since the first sweeps
    memory = compiled.memory_analysis()
    temp = memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")
    return traced_at - start, lowered_at - traced_at, done - lowered_at, kernels, instructions, temp


def fastest_phases(build: Callable[[], Callable], args: tuple, builds: int) -> tuple:
    """`compile_phases` of ``builds`` fresh builds, each phase's time the minimum over them."""
    runs = [compile_phases(build, args) for _ in range(builds)]
    return (*(min(run[i] for run in runs) for i in range(3)), *runs[0][3:])


def minor_faults() -> int:
    """The process's minor page faults so far (0 where ``resource`` is missing: Windows)."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="mlp")
    parser.add_argument("--recipes", default=",".join(fpemu.TRAINING_RECIPES))
    parser.add_argument("--forms", default="dot,bf16+dot", help="dot, bf16+dot, or both (comma-separated)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compiles", type=int, default=1, help="fresh builds per row; each phase's minimum")
    args = parser.parse_args()
    if args.compiles < 1:
        parser.error(f"--compiles must be at least 1, got {args.compiles}")
    recipes = [r for r in args.recipes.split(",") if r]
    unknown = [r for r in recipes if r not in fpemu.TRAINING_RECIPES]
    if unknown:
        parser.error(f"--recipes: unknown {unknown}; the training recipes are {', '.join(fpemu.TRAINING_RECIPES)}")
    step, call_args = MODELS[args.model]()
    rows = rows_for(step, call_args, recipes, args.forms.split(","))
    print(machine_line())
    print(f"model {args.model}; compile: fresh function, caches cleared, minimum of {args.compiles}; "
          f"step: {args.rounds} interleaved rounds")  # fmt: skip
    phases = {name: fastest_phases(build, row_args, args.compiles) for name, (build, row_args) in rows.items()}
    jitted = {name: jax.jit(build()) for name, (build, _) in rows.items()}
    for name, fn in jitted.items():
        jax.block_until_ready(fn(*rows[name][1]))
    order = list(jitted)
    shuffle = random.Random(0)
    times: dict[str, list[float]] = {name: [] for name in jitted}
    ratios: dict[str, list[float]] = {name: [] for name in jitted}
    faults = dict.fromkeys(jitted, 0)
    for _ in range(args.rounds):
        shuffle.shuffle(order)
        this = {}
        for name in order:
            before = minor_faults()
            start = time.perf_counter()
            jax.block_until_ready(jitted[name](*rows[name][1]))
            this[name] = time.perf_counter() - start
            faults[name] += minor_faults() - before
        for name in jitted:
            times[name].append(this[name])
            ratios[name].append(this[name] / this["emulated bf16"])
    fp32_compile = sum(phases["fp32"][:3])
    header = (
        "| row | trace s | lower s | XLA s | compile vs fp32 | HLO kernels | HLO instructions | temp MiB | faults "
        "| step ms | step vs emulated bf16 |"
    )
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in jitted:
        t, lo, c, k, n, temp = phases[name]
        print(f"| {name} | {t:.2f} | {lo:.2f} | {c:.2f} | {(t + lo + c) / fp32_compile:.2f}x | {k} | {n} | {temp:.1f} | "
              f"{faults[name] / args.rounds:.0f} | {statistics.median(times[name]) * 1e3:.2f} | "
              f"{statistics.median(ratios[name]):.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
