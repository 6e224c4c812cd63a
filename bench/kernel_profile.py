"""Where XLA:CPU's compile time and a training step's time go, kernel by kernel.

Usage::

    PYTHONPATH=. python3 bench/kernel_profile.py [--model MODEL] [--top 12] [--calls 10] ROW [ROW ...]

A MODEL is a model of `fpemu sweep` (``mlp``, ``transformer``, ``transformer4``, ``transformer4-scan``; here
the default is ``transformer``), a ROW one of its rows (docs/benchmarks.md): ``fp32``, ``emulated bf16``, a
training recipe (``Policy(dot=recipe)``) or ``bf16+recipe`` (``Policy(default="bf16", dot=recipe)``). For
each, the script prints two reports, both from JAX's profiler (`jax.profiler.trace`):

- **compile**: the step is compiled under the profiler, and XLA:CPU's ``FusionCompiler::Compile`` events
  give each kernel it generated code for (once per distinct kernel: a kernel the program runs twice, or two
  identical ones, is compiled once), with its MLIR operations. A kernel whose module is named
  ``__compute_module_*`` went through XLA:CPU's older emitter. The report gives XLA's whole compile
  (wall time, profiler on), the kernels' sum (the compiler runs them on several threads, so the sum can
  exceed the whole), the longest kernels and the longest families (below);
- **step**: the step is compiled again with XLA's per-kernel trace events on (the compile option
  ``xla_cpu_enable_xprof_traceme``), called ``--calls`` times under the profiler, and each kernel's events
  are summed: its time per call (summed over threads: XLA splits a kernel into tasks, one event each) and
  its events per call. The report gives the longest kernels, with their result types and the JAX
  operation that made them (the HLO metadata's ``op_name``), and the longest families (a kernel's name
  without its numbered suffix: XLA names a fusion after what it fused, so ``ynn_fusion`` are the dots run
  by YNNPACK, ``copy_bitcast_fusion`` mostly transposes).

Step time is the profiled calls' time, profiler included: use `fpemu sweep` for ratios. This reads XLA's
profiler events, whose names are XLA's and may change: the script says so when it finds none. It makes
the per-kernel tables of bench/RESULTS_training.md's twentieth and twenty-first sessions in one command.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax

from fpemu.tools import choices, sweep

_OLDER_EMITTER = "__compute_module_"
_OP_NAME = re.compile(r'op_name="([^"]*)"')


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kernel:
    """A kernel of the compiled program: its result type and the JAX operation that made it."""

    name: str
    type: str
    op_name: str


def kernel_of_module(module: str) -> tuple[str, bool]:
    """(kernel name, whether XLA:CPU's older emitter compiled it) of a ``FusionCompiler::Compile`` event's
    ``module`` statistic.

    Example:
      >>> kernel_of_module("bitcast_reduce_fusion.5_kernel_module")
      ('bitcast_reduce_fusion.5', False)
      >>> kernel_of_module("__compute_module_copy_bitcast_fusion.4")
      ('copy_bitcast_fusion.4', True)
      >>> kernel_of_module("wrapped_scatter")
      ('wrapped_scatter', False)
    """
    if module.startswith(_OLDER_EMITTER):
        return module.removeprefix(_OLDER_EMITTER), True
    return module.removesuffix("_kernel_module"), False


def family(kernel: str) -> str:
    """A kernel's name without its numbered suffix.

    Example:
      >>> family("ynn_fusion.81"), family("wrapped_scatter"), family("cond.12.clone")
      ('ynn_fusion', 'wrapped_scatter', 'cond')
    """
    return re.sub(r"(\.\d+)+(\.clone)?$", "", kernel)


def program_kernels(hlo: str) -> dict[str, Kernel]:
    """The kernels of an optimized HLO module's text (`fpemu.tools.sweep.hlo_kernels`: the instructions that
    launch work, in the entry computation and in its loops' and conditionals' computations), by name, with
    their result types and shortened ``op_name`` (without the outer ``jit(...)/``; empty where XLA kept none).

    Example:
      >>> text = "\\n".join([
      ...     "ENTRY %main (x: f32[2]) -> f32[2] {",
      ...     "  %x = f32[2]{0} parameter(0)",
      ...     '  ROOT %neg_fusion = f32[2]{0} fusion(%x), kind=kLoop, calls=%fused, metadata={op_name="jit(step)/neg"}',
      ...     "}",
      ... ])
      >>> program_kernels(text)
      {'neg_fusion': Kernel(name='neg_fusion', type='f32[2]{0}', op_name='neg')}
    """
    kernels = {}
    for name, (result, line) in sweep.hlo_kernels(hlo).items():
        op = _OP_NAME.search(line)
        op_name = re.sub(r"^jit\([^/]*\)/", "", op.group(1)).replace("\\'", "'") if op else ""
        kernels[name] = Kernel(name=name, type=result, op_name=op_name)
    return kernels


def _events(run: Callable[[], Any]) -> list[tuple[str, float, dict]]:
    """(name, milliseconds, statistics) of every event JAX's profiler records while ``run()`` runs."""
    with tempfile.TemporaryDirectory(prefix="fpemu_kernel_profile_") as folder:
        with jax.profiler.trace(folder):
            run()
        (path,) = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        data = jax.profiler.ProfileData.from_file(path)
        return [
            (event.name, event.duration_ns / 1e6, dict(event.stats))
            for plane in data.planes
            for line in plane.lines
            for event in line.events
        ]


def _no_events(what: str) -> RuntimeError:
    return RuntimeError(
        f"JAX's profiler recorded no {what}: this jaxlib's XLA names its events differently (the script reads "
        "XLA:CPU's profiler events, whose names are XLA's)"
    )


def compile_report(lowered: Any, top: int) -> str:
    """The compile report of a lowered step (see the module docstring)."""
    wall = []

    def compile_timed() -> None:
        start = time.perf_counter()
        lowered.compile()
        wall.append(time.perf_counter() - start)

    events = _events(compile_timed)
    kernels = []
    for name, ms, stats in events:
        if name == "FusionCompiler::Compile" and "module" in stats:
            kernel, older = kernel_of_module(str(stats["module"]))
            kernels.append((ms, stats.get("op_count", ""), older, kernel))
    if not kernels:
        raise _no_events("FusionCompiler::Compile events with a module")
    kernels.sort(key=lambda k: (-k[0], k[3]))
    older = [k for k in kernels if k[2]]
    lines = [
        f"compile: XLA {wall[0]:.2f} s (profiler on); {len(kernels)} kernels generated in {sum(k[0] for k in kernels) / 1e3:.2f} s "
        f"(summed over the compiler's threads), {len(older)} of them by the older emitter "
        f"({sum(k[0] for k in older) / 1e3:.2f} s)",
        "",
        "| compile ms | MLIR ops | emitter | kernel |",
        "|---:|---:|---|---|",
    ]
    lines += [
        f"| {ms:.2f} | {ops} | {'older' if old else 'newer'} | `{kernel}` |" for ms, ops, old, kernel in kernels[:top]
    ]
    return "\n".join(lines + [""] + _family_table([(kernel, ms) for ms, _, _, kernel in kernels], "compile ms", top))


def _family_table(times: list[tuple[str, float]], unit: str, top: int) -> list[str]:
    """The lines of a table of kernel families (`family`), the ``top`` longest: summed time and kernels."""
    families: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for name, ms in times:
        families[family(name)][0] += ms
        families[family(name)][1] += 1
    lines = [f"| {unit} | kernels | family |", "|---:|---:|---|"]
    for name, (ms, count) in sorted(families.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]:
        lines.append(f"| {ms:.3f} | {count:.0f} | `{name}` |")
    return lines


def step_report(lowered: Any, args: tuple, calls: int, top: int) -> str:
    """The step report of a lowered step (see the module docstring)."""
    compiled = lowered.compile(compiler_options={"xla_cpu_enable_xprof_traceme": True})
    program = program_kernels(compiled.as_text())
    jax.block_until_ready(compiled(*args))  # the first call's allocations out of the profile
    elapsed = []

    def run() -> None:
        for _ in range(calls):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            elapsed.append(time.perf_counter() - start)

    per_kernel: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for name, ms, _ in _events(run):
        if name in program:
            per_kernel[name][0] += ms / calls
            per_kernel[name][1] += 1 / calls
    if not per_kernel:
        raise _no_events("per-kernel events (xla_cpu_enable_xprof_traceme)")
    ranked = sorted(per_kernel.items(), key=lambda kv: (-kv[1][0], kv[0]))
    lines = [
        f"step: {calls} calls of {sorted(elapsed)[len(elapsed) // 2] * 1e3:.2f} ms (median, profiler on); "
        f"{sum(v[1] for v in per_kernel.values()):.0f} kernel events a call, {sum(v[0] for v in per_kernel.values()):.2f} ms "
        f"of kernel time a call (summed over threads); {len(per_kernel)} of the program's {len(program)} kernels seen",
        "",
        "| ms a call | events a call | kernel | type | made by |",
        "|---:|---:|---|---|---|",
    ]
    for name, (ms, runs) in ranked[:top]:
        kernel = program[name]
        lines.append(f"| {ms:.3f} | {runs:.0f} | `{name}` | `{kernel.type}` | `{kernel.op_name}` |")
    return "\n".join(
        lines + [""] + _family_table([(name, ms) for name, (ms, _) in per_kernel.items()], "ms a call", top)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweep.add_row_arguments(parser)
    parser.add_argument(
        "--top", type=choices.option(choices.integer(1, "kernels and families shown per report")), default=12,
        metavar="N", help="kernels and families shown per report (default 12)",
    )  # fmt: skip
    parser.add_argument(
        "--calls", type=choices.option(choices.integer(1, "profiled calls of each step")), default=10, metavar="N",
        help="profiled calls of each step (default 10)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if jax.default_backend() != "cpu":
        parser.error(f"the script profiles XLA:CPU's kernels; JAX's default backend here is {jax.default_backend()!r}")
    warnings.simplefilter("ignore")  # the models' PrecisionWarnings are not this script's subject
    jax.config.update("jax_enable_compilation_cache", False)  # a program the persistent cache served: no compile events
    for row in args.rows:
        build, row_args = sweep.row(args.model, row)
        jax.clear_caches()
        lowered = jax.jit(build()).lower(*row_args)
        print(f"## {row}", compile_report(lowered, args.top), "", step_report(lowered, row_args, args.calls, args.top),
              sep="\n", end="\n\n", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
