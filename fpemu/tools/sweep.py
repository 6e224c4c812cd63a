"""``fpemu sweep``: every training recipe's step on a small model, compile time by phase and step time,
beside fp32 and emulated bf16 (docs/benchmarks.md, "fpemu sweep").

The models are `fpemu.tools.models`' digits MLP (``mlp``: 64-128-128-10, batch 64, one Adam step),
transformer block (``transformer``: batch 8, sequence 128, d 256, one SGD step), four such blocks in
a row (``transformer4``) and the same four blocks run by ``jax.lax.scan`` (``transformer4-scan``). The
rows: ``fp32`` (not emulated), ``emulated bf16`` (``emulate(step, "bf16")``) and, per recipe, the step
under ``Policy(dot=recipe)`` (form ``dot``, row ``RECIPE``) and ``Policy(default="bf16", dot=recipe)``
(form ``bf16+dot``, row ``bf16+RECIPE``). A stochastic recipe gets ``jax.random.key(0)``; a recipe with
delayed scaling runs as ``emulate(step, policy, state=True)`` from `fpemu.init_training_state`.

**Compile time** is measured per row on a fresh function with every JAX cache cleared, in three
phases: ``trace`` (JAX's trace, emulate's interpreter included), ``lower`` (to StableHLO) and ``XLA``
(``compile()``), and given as a multiple of fp32's total; with ``compiles=N`` each phase is the minimum
over N fresh builds. Beside it, two measures that do not depend on the machine's load: the optimized
HLO's kernels (`program_size`) and its instructions (the lines of its text that assign a value).
**Step time** is the median over ``rounds`` rounds; each round calls every row once, in an order
shuffled per round (a fixed seed), and a row's ratio is the median of its time over emulated bf16's in
the same round. The allocator settings (``GLIBC_TUNABLES``) and ``XLA_FLAGS`` are printed with the
machine: on CPU a step whose buffer of intermediate values (``temp MiB``, XLA's
``memory_analysis().temp_size_in_bytes``) exceeds glibc's largest mmap threshold (32 MiB) pays a page
fault per 4 KiB of it at every call, so each row also shows the process's minor page faults per call
(``faults``, from ``getrusage`` where the platform has it), and `faults_note` names below the table the rows
that fault in 4 MiB or more per call, with the ``GLIBC_TUNABLES`` setting that keeps the memory.

``fpemu sweep`` turns JAX's persistent compilation cache off for its process, before its first compile
(JAX decides once per process whether it uses the cache): a compile that the cache served from disk, from
an earlier run or build, would not be a compile. ``JAX_COMPILATION_CACHE_DIR`` is often set for sweeps
(docs/training.md); with it, the MLP's fp32 row read 0.01 s of XLA. `run` leaves the setting to its caller.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

import fpemu
from fpemu.testing import text_table
from fpemu.tools import choices, models
from fpemu.tools.bench import environment, machine_line

if sys.platform != "win32":
    import resource

__all__ = [
    "FORMS",
    "MODELS",
    "SweepRow",
    "add_row_arguments",
    "add_sweep_parser",
    "cmd_sweep",
    "faults_note",
    "hlo_kernels",
    "program_size",
    "row",
    "row_name",
    "rows_for",
    "run",
]

#: A row with at least this many minor page faults per call (4 MiB of 4 KiB pages) is named below the table.
FAULTS_NOTED = 1024
#: glibc's setting that keeps a step's buffer in the process (docs/training.md, "Page faults").
KEEP_MEMORY = (
    "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824"
    ":glibc.malloc.arena_max=1"
)

#: The models, by the name ``--model`` takes.
MODELS: dict[str, Callable[[], tuple[Callable[..., Any], tuple]]] = {
    "mlp": models.mlp_model,
    "transformer": models.transformer_model,
    "transformer4": models.transformer_stack_model,
    "transformer4-scan": models.transformer_scan_model,
}
#: The rows that are not a recipe's: the step unemulated, and emulated in bf16.
_BASE_ROWS = ("fp32", "emulated bf16")
#: The policy forms of a recipe's rows: ``Policy(dot=recipe)`` and ``Policy(default="bf16", dot=recipe)``.
FORMS = ("dot", "bf16+dot")
JSON_SCHEMA = "fpemu.sweep/1"

#: Top-level HLO instructions that launch no work.
_NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
#: An HLO instruction's line: its name, its result type (a tuple's may hold ``/*index=5*/`` comments) and its
#: opcode.
_INSTRUCTION = re.compile(r"%?([\w.\-]+) = (\(.*?\)|\S+) ([a-z][a-z0-9-]*)\(")
#: A computation's first line: ``ENTRY`` or not, and its name.
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{$")
#: Instructions whose computations run as the program's control flow (their kernels are the program's).
_CONTROL_FLOW = frozenset({"while", "conditional", "call"})
#: The computations an instruction runs by name: a loop's ``body=`` and ``condition=``, a call's ``to_apply=``,
#: a two-way conditional's computations; a conditional's ``branch_computations={...}`` list.
_CALLED = re.compile(r"(?:body|condition|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")


def _called(line: str) -> list[str]:
    """The names of the computations the instruction on ``line`` runs."""
    names = _CALLED.findall(line)
    for branches in _BRANCHES.findall(line):
        names += [name.strip().lstrip("%") for name in branches.split(",")]
    return names


def hlo_kernels(hlo: str) -> dict[str, tuple[str, str]]:
    """The kernels of an optimized HLO module's text: the instructions that launch work (not parameters,
    constants, tuples, tuple elements or bitcasts) of its entry computation and of the computations it
    runs as control flow (a ``while`` loop's body and condition, a ``conditional``'s branches, a
    ``call``'s callee, and theirs in turn), by name, each with its result type and its line. A fused
    computation is one kernel: its own instructions are not counted.

    Example:
      >>> text = "\\n".join([
      ...     "%fused (p: f32[2]) -> f32[2] {",
      ...     "  ROOT %r = f32[2]{0} negate(%p)",
      ...     "}",
      ...     "%body (c: f32[2]) -> f32[2] {",
      ...     "  %c = f32[2]{0} parameter(0)",
      ...     "  ROOT %neg_fusion = f32[2]{0} fusion(%c), kind=kLoop, calls=%fused",
      ...     "}",
      ...     "ENTRY %main (x: f32[2]) -> f32[2] {",
      ...     "  %x = f32[2]{0} parameter(0)",
      ...     "  ROOT %loop = f32[2]{0} while(%x), condition=%cond, body=%body",
      ...     "}",
      ... ])
      >>> sorted(hlo_kernels(text))
      ['loop', 'neg_fusion']
    """
    computations: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = header.group(2)
            computations[current] = []
            entry = current if header.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current is not None:
            computations[current].append(line)
    kernels: dict[str, tuple[str, str]] = {}
    pending, seen = [entry] if entry is not None else [], set()
    while pending:
        name = pending.pop()
        if name in seen or name not in computations:
            continue
        seen.add(name)
        for line in computations[name]:
            found = _INSTRUCTION.search(line)
            if found is None or found.group(3) in _NOT_KERNELS:
                continue
            kernels[found.group(1)] = (found.group(2), line)
            if found.group(3) in _CONTROL_FLOW:
                pending.extend(_called(line))
    return kernels


def program_size(hlo: str) -> tuple[int, int]:
    """(kernels, instructions) of an optimized HLO module's text: `hlo_kernels`' count, and the
    instructions of all its computations.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> kernels, instructions = program_size(jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones(8)).compile().as_text())
      >>> 1 <= kernels <= instructions
      True
    """
    return len(hlo_kernels(hlo)), sum(_INSTRUCTION.search(line) is not None for line in hlo.splitlines())


def rows_for(
    step: Callable[..., Any], args: tuple, recipes: list[str], forms: list[str]
) -> dict[str, tuple[Callable[[], Callable[..., Any]], tuple]]:
    """Row name -> (a builder of a fresh unjitted function for that row, its arguments)."""
    key = jax.random.key(0)

    def emulated(policy: Any) -> tuple[Callable[[], Callable[..., Any]], tuple]:
        recipe = policy.dot if isinstance(policy, fpemu.Policy) else None
        row_key = key if isinstance(policy, fpemu.Policy) and policy.stochastic else None
        if isinstance(recipe, fpemu.TrainingRecipe) and recipe.stateful:  # delayed scaling: amax histories
            state = fpemu.init_training_state(step, policy, *args)
            return (lambda: fpemu.emulate(step, policy, key=row_key, state=True)), (state, *args)
        return (lambda: fpemu.emulate(step, policy, key=row_key)), args

    rows = {"fp32": ((lambda: lambda *a: step(*a)), args), "emulated bf16": emulated("bf16")}
    for recipe in recipes:
        if "dot" in forms:
            rows[recipe] = emulated(fpemu.Policy(dot=recipe))
        if "bf16+dot" in forms:
            rows[f"bf16+{recipe}"] = emulated(fpemu.Policy(default="bf16", dot=recipe))
    return rows


def row_name(name: str) -> str:
    """``name`` if it names a row of the sweep: ``fp32``, ``emulated bf16``, a training recipe, or ``bf16+`` and a
    training recipe (the ``bf16+dot`` form). The bench scripts that look into one row (bench/buffer_peak.py,
    bench/kernel_profile.py) take their ``ROW`` arguments through it.

    Raises:
      ValueError: any other name, with `fpemu.training_recipe`'s message (the closest names, or where an
        inference recipe is meant).

    Example:
      >>> row_name("bf16+mxfp8")
      'bf16+mxfp8'
    """
    if name not in _BASE_ROWS:
        try:
            fpemu.training_recipe(name.removeprefix("bf16+"))
        except ValueError as error:
            raise ValueError(
                f"{name!r} is not a row (fp32, 'emulated bf16', a training recipe, or bf16+ and a training recipe): {error}"
            ) from None
    return name


def add_row_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of a script that looks into rows of the sweep: ``ROW [ROW ...]`` (`row_name`, into
    ``rows``) and ``--model`` (a name of `MODELS`, default ``transformer``)."""
    parser.add_argument(
        "rows", nargs="+", type=choices.option(row_name), metavar="ROW",
        help="fp32, 'emulated bf16', a training recipe, or bf16+recipe",
    )  # fmt: skip
    parser.add_argument("--model", choices=sorted(MODELS), default="transformer")


def row(model: str, name: str) -> tuple[Callable[[], Callable[..., Any]], tuple]:
    """The row named ``name`` (`row_name`) on the model ``model`` (a name of `MODELS`): a builder of a fresh
    unjitted function for it and its arguments, as `rows_for` gives them.

    Raises:
      ValueError: ``name`` names no row (`row_name`).

    Example:
      >>> build, args = row("mlp", "bf16+mxfp8")
      >>> callable(build()), len(args)
      (True, 4)
    """
    recipes = [] if row_name(name) in _BASE_ROWS else [name.removeprefix("bf16+")]
    step, args = MODELS[model]()
    return rows_for(step, args, recipes, list(FORMS))[name]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One row's measurements: compile phases in seconds, the optimized program's size and buffer, and
    its step (median milliseconds, the median ratio to emulated bf16's step, page faults per call)."""

    name: str
    trace_s: float
    lower_s: float
    xla_s: float
    compile_vs_fp32: float
    kernels: int
    instructions: int
    temp_mib: float
    faults: float
    step_ms: float
    step_vs_emulated_bf16: float


def _compile_phases(
    build: Callable[[], Callable[..., Any]], args: tuple
) -> tuple[float, float, float, int, int, float]:
    """(trace, lower, XLA) seconds of a fresh function, every JAX cache cleared first; its kernels
    (`program_size`), its instructions (the lines of ``compile().as_text()`` that assign a value) and its
    buffer of intermediate values in MiB."""
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
    instructions = sum(" = " in line for line in text.splitlines())  # as bench/RESULTS_training.md records them
    memory = compiled.memory_analysis()
    temp = memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")
    return traced_at - start, lowered_at - traced_at, done - lowered_at, kernels, instructions, temp


def _minor_faults() -> int:
    """The process's minor page faults so far (0 on Windows, which has no ``getrusage``)."""
    if sys.platform == "win32":
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run(
    model: str, recipes: list[str], forms: list[str], *, rounds: int, compiles: int,
    progress: Callable[[str], None] | None = None,
) -> list[SweepRow]:  # fmt: skip
    """Measure every row (see the module docstring) and return them in row order. Arguments as checked
    by ``fpemu sweep``'s options: a name of `MODELS`, training recipe names, forms of `FORMS`, at
    least one round and one compile. ``progress(name)`` is called before each row's compiles."""
    step, call_args = MODELS[model]()
    rows = rows_for(step, call_args, recipes, forms)
    phases: dict[str, tuple[float, float, float, int, int, float]] = {}
    for name, (build, row_args) in rows.items():
        if progress is not None:
            progress(name)
        builds = [_compile_phases(build, row_args) for _ in range(compiles)]
        trace, lower, xla = (min(b[i] for b in builds) for i in range(3))
        phases[name] = (trace, lower, xla, *builds[0][3:])
    jitted = {name: jax.jit(build()) for name, (build, _) in rows.items()}
    for name, fn in jitted.items():
        jax.block_until_ready(fn(*rows[name][1]))
    order = list(jitted)
    shuffle = random.Random(0)
    times: dict[str, list[float]] = {name: [] for name in jitted}
    ratios: dict[str, list[float]] = {name: [] for name in jitted}
    faults = dict.fromkeys(jitted, 0)
    for _ in range(rounds):
        shuffle.shuffle(order)
        this = {}
        for name in order:
            before = _minor_faults()
            start = time.perf_counter()
            jax.block_until_ready(jitted[name](*rows[name][1]))
            this[name] = time.perf_counter() - start
            faults[name] += _minor_faults() - before
        for name in jitted:
            times[name].append(this[name])
            ratios[name].append(this[name] / this["emulated bf16"])
    fp32_compile = sum(phases["fp32"][:3])
    return [
        SweepRow(
            name=name,
            trace_s=t,
            lower_s=lo,
            xla_s=c,
            compile_vs_fp32=(t + lo + c) / fp32_compile,
            kernels=k,
            instructions=n,
            temp_mib=temp,
            faults=faults[name] / rounds,
            step_ms=statistics.median(times[name]) * 1e3,
            step_vs_emulated_bf16=statistics.median(ratios[name]),
        )
        for name, (t, lo, c, k, n, temp) in phases.items()
    ]


def table(rows: list[SweepRow]) -> str:
    """The rows as the Markdown table ``fpemu sweep`` prints."""
    header = (
        "row", "trace s", "lower s", "XLA s", "compile vs fp32", "HLO kernels", "HLO instructions", "temp MiB",
        "faults", "step ms", "step vs emulated bf16",
    )  # fmt: skip
    body = [
        (
            r.name,
            f"{r.trace_s:.2f}",
            f"{r.lower_s:.2f}",
            f"{r.xla_s:.2f}",
            f"{r.compile_vs_fp32:.2f}x",
            str(r.kernels),
            str(r.instructions),
            f"{r.temp_mib:.1f}",
            f"{r.faults:.0f}",
            f"{r.step_ms:.2f}",
            f"{r.step_vs_emulated_bf16:.2f}x",
        )
        for r in rows
    ]
    return text_table(body, header, align="l" + "r" * (len(header) - 1), markdown=True)


def faults_note(rows: list[SweepRow]) -> str | None:
    """The line printed below the table that names the rows faulting in `FAULTS_NOTED` pages or more per call
    (None where none does): their step times include the faults, which come from the allocator, not from the
    row's arithmetic.

    Example:
      >>> quiet = SweepRow(name="mxfp8", trace_s=0.1, lower_s=0.1, xla_s=1.0, compile_vs_fp32=3.0, kernels=90,
      ...                  instructions=3000, temp_mib=30.0, faults=3.0, step_ms=20.0, step_vs_emulated_bf16=1.1)
      >>> faults_note([quiet]) is None
      True
      >>> print(faults_note([quiet, dataclasses.replace(quiet, name="nvfp4", temp_mib=35.1, faults=9773.0)]))
      ... # doctest: +ELLIPSIS
      note: page faults per call: nvfp4 9773 (temp 35.1 MiB); these step times include them. On Linux...
    """
    noted = [r for r in rows if r.faults >= FAULTS_NOTED]
    if not noted:
        return None
    each = ", ".join(f"{r.name} {r.faults:.0f} (temp {r.temp_mib:.1f} MiB)" for r in noted)
    return (
        f"note: page faults per call: {each}; these step times include them. On Linux, glibc's malloc maps an "
        "allocation above 32 MiB (such as a step's buffer of intermediate values) afresh at every call, and the "
        f"call faults its pages in; to time the arithmetic alone, start Python with {KEEP_MEMORY} "
        '(docs/training.md, "Page faults").'
    )


# -- the command -----------------------------------------------------------------------------------


def _recipes(text: str) -> list[str]:
    return choices.names("training recipe", fpemu.TRAINING_RECIPES)(text)


def _forms(text: str) -> list[str]:
    return choices.names("form", FORMS)(text)


def add_sweep_parser(subcommands: Any) -> argparse.ArgumentParser:
    """The ``sweep`` subcommand and its options."""
    sweep = subcommands.add_parser(
        "sweep",
        help="time every training recipe's step on a small model: compile and step beside fp32 and emulated bf16",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time the training step of a small model (mlp: the digits MLP with Adam; transformer: a\n"
        "pre-LayerNorm block with SGD; transformer4: four such blocks in a row; transformer4-scan: the same\n"
        "blocks run by jax.lax.scan) unemulated in fp32, emulated in bf16, and under each training recipe.\n"
        "Prints each row's compile time by phase (trace, lower, XLA; a fresh function, every JAX cache\n"
        "cleared) as a multiple of fp32's, its optimized program's kernels, instructions and buffer, and its\n"
        "step time as a multiple of emulated bf16's (medians of interleaved calls), with the machine and the\n"
        "allocator settings (docs/benchmarks.md).",
        epilog="examples:\n  fpemu sweep --model mlp\n"
        "  fpemu sweep --model transformer --recipes fp8_current,mxfp8,nvfp4 --forms dot --rounds 7\n"
        "  fpemu sweep --model mlp --compiles 3 --json sweep.json",
    )
    sweep.add_argument(
        "--model", choices=list(MODELS), default="mlp", metavar="MODEL",
        help=f"the model: {', '.join(MODELS)} (default mlp)",
    )  # fmt: skip
    sweep.add_argument(
        "--recipes", type=choices.option(_recipes), default=None, metavar="R,S,...",
        help=f"training recipes, from {', '.join(fpemu.TRAINING_RECIPES)} (default all)",
    )  # fmt: skip
    sweep.add_argument(
        "--forms", type=choices.option(_forms), default=None, metavar="F,G",
        help="the recipe rows' policies: dot (Policy(dot=R)), bf16+dot (Policy(default='bf16', dot=R)); "
        "default both",
    )  # fmt: skip
    sweep.add_argument(
        "--rounds", type=choices.option(choices.integer(1, "interleaved rounds of step calls")), default=15,
        metavar="N", help="interleaved rounds of step calls (default 15)",
    )  # fmt: skip
    sweep.add_argument(
        "--compiles", type=choices.option(choices.integer(1, "fresh builds per row")), default=1, metavar="N",
        help="fresh builds per row, each compile phase the minimum over them (default 1)",
    )  # fmt: skip
    sweep.add_argument(
        "--json", type=Path, default=None, metavar="FILE",
        help=f"also write the results as JSON (schema {JSON_SCHEMA}, in docs/benchmarks.md)",
    )  # fmt: skip
    return sweep


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run ``fpemu sweep``: print the machine line, the settings and the table; write the JSON if asked. JAX's
    persistent compilation cache is off for the rest of the process (module docstring)."""
    jax.config.update("jax_enable_compilation_cache", False)  # compiles timed, not read from disk (module docstring)
    recipes = list(fpemu.TRAINING_RECIPES) if args.recipes is None else args.recipes
    forms = list(FORMS) if args.forms is None else args.forms
    print(machine_line(), flush=True)
    print(
        f"model {args.model}; compile: a fresh function, caches cleared, persistent cache off, "
        f"minimum of {args.compiles}; step: {args.rounds} interleaved rounds",
        flush=True,
    )
    progress = None
    if sys.stderr.isatty():  # which row XLA is compiling (the whole sweep takes minutes)
        progress = lambda name: print(f"compiling: {name}", file=sys.stderr, flush=True)
    rows = run(args.model, recipes, forms, rounds=args.rounds, compiles=args.compiles, progress=progress)
    print(table(rows))
    note = faults_note(rows)
    if note is not None:
        print(note)
    if args.json is not None:
        meta = {k: v for k, v in environment().items() if k != "schema"}  # the machine, as fpemu bench's JSON
        meta |= {"model": args.model, "recipes": recipes, "forms": forms, "rounds": args.rounds}
        meta["compiles"] = args.compiles
        document = {"schema": JSON_SCHEMA, "meta": meta, "rows": [dataclasses.asdict(row) for row in rows]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0
