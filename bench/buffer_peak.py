"""What XLA:CPU keeps alive at the peak of a training step's buffer of intermediate values.

Usage::

    PYTHONPATH=. python3 bench/buffer_peak.py [--model MODEL] [--top 25] ROW [ROW ...]

A MODEL is a model of `fpemu sweep` (``mlp``, ``transformer``, ``transformer4``, ``transformer4-scan``; here
the default is ``transformer``), a ROW one of its rows (docs/benchmarks.md): ``fp32``, ``emulated bf16``, a
training recipe (``Policy(dot=recipe)``) or ``bf16+recipe`` (``Policy(default="bf16", dot=recipe)``). For
each, the script compiles the step with XLA's dumps on (``--xla_dump_to``, a temporary folder) and prints:

- XLA's preallocated temp buffer (what `fpemu sweep` reports as ``temp MiB``) and how far it is from
  32 MiB, glibc's largest mmap threshold: a buffer above it is mapped and unmapped at every call,
  which costs a page fault per 4 KiB (bench/RESULTS_training.md, "Page faults");
- where the peak sits (the index of the instruction in XLA's schedule) and the bytes live there in
  all allocations: the parameters and the buffers XLA allocates apart (a loop's or a conditional's
  results) as well as the temp buffer;
- the live values at the peak grouped by the JAX operation that made them (the HLO metadata's
  ``op_name``, shortened: ``jit(step)/`` dropped, fpemu's nested jits kept), largest first, each with
  its count and sizes.

This reads XLA's debugging dumps (``*-live-range.txt`` and the optimized HLO text), whose format is
XLA's and may change; the script says so when it does not find them. It is a tool for finding which
values to shrink or move, as the thirteenth and fifteenth sessions of bench/RESULTS_training.md did
by hand; it times nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

_DUMP = tempfile.mkdtemp(prefix="fpemu_buffer_peak_")
atexit.register(shutil.rmtree, _DUMP, True)
# XLA reads its flags once, when the backend starts: set before jax is imported.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), f"--xla_dump_to={_DUMP}", "--xla_dump_hlo_module_re=.*jit_step.*"]
).strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import functools  # noqa: E402
import glob  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402

from fpemu.tools import choices, sweep  # noqa: E402

_MIB = 2**20
_GLIBC_MMAP_MAX = 32 * _MIB
_PEAK = re.compile(r"^\s*Live ranges at (\d+) \(peak\):")
_LIVE = re.compile(r"^\s*([\w.\-]+)\{[^}]*\}: (\d+) bytes")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def peak_values(live_range: str) -> tuple[int, list[tuple[str, int]]]:
    """(the peak's index in the schedule, [(instruction name, bytes), ...]) from XLA's live-range dump.

    Example:
      >>> text = "  Live ranges at 7 (peak):\\n    a{}: 64 bytes (cumulative: 64 bytes)\\n"
      >>> peak_values(text + "    b{0}: 8 bytes (cumulative: 72 bytes)\\n  Stack trace ...\\n")
      (7, [('a', 64), ('b', 8)])
    """
    lines = live_range.splitlines()
    for i, line in enumerate(lines):
        found = _PEAK.match(line)
        if found:
            values = []
            for entry in lines[i + 1 :]:
                live = _LIVE.match(entry)
                if live is None:
                    break
                values.append((live.group(1), int(live.group(2))))
            return int(found.group(1)), values
    raise ValueError("no 'Live ranges at N (peak):' section in the live-range dump")


def op_names(hlo: str) -> dict[str, str]:
    """Each instruction's ``op_name`` (shortened by `short_op_name`) in an HLO module's text. A fusion
    without one (XLA drops it on some) takes its fused computation's root's, or where the root has none
    (a bitcast), the first one in that computation; parameters and other instructions without metadata
    map to their own name.

    Example:
      >>> text = "\\n".join([
      ...     "%fused (p: f32[2]) -> f32[2] {",
      ...     '  ROOT %r = f32[2]{0} negate(%p), metadata={op_name="jit(step)/neg"}',
      ...     "}",
      ...     "ENTRY %main (x: f32[2]) -> f32[2] {",
      ...     "  %x = f32[2]{0} parameter(0)",
      ...     "  ROOT %f = f32[2]{0} fusion(%x), kind=kLoop, calls=%fused",
      ...     "}",
      ... ])
      >>> op_names(text)["f"], op_names(text)["x"]
      ('neg', 'x')
    """
    names: dict[str, str] = {}
    roots: dict[str, str] = {}  # computation -> its root's op_name (or its first one's)
    calls: dict[str, str] = {}  # instruction -> the computation it calls
    computation = ""
    for line in hlo.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header and not line.startswith(" "):
            computation = header.group(1)
            continue
        found = re.match(r"^\s*(ROOT )?%?([\w.\-]+) = ", line)
        if not found:
            continue
        op = _OP_NAME.search(line)
        called = re.search(r"calls=%([\w.\-]+)", line)
        if op:
            names[found.group(2)] = short_op_name(op.group(1))
            if found.group(1) or computation not in roots:  # the root's, else the first one's
                roots[computation] = names[found.group(2)]
        else:
            names[found.group(2)] = found.group(2)
            if called:
                calls[found.group(2)] = called.group(1)
    for name, called_name in calls.items():
        names[name] = roots.get(called_name, name)
    return names


def short_op_name(op_name: str) -> str:
    """An ``op_name`` without the outer ``jit(step)/`` and without fpemu's materialization wrappers.

    Example:
      >>> short_op_name("jit(step)/bsd,df->bsf/jit(quantized_dot_core)/jit(_materialized)/jit(_barrier)/cond")
      'bsd,df->bsf/jit(quantized_dot_core)/cond'
    """
    name = re.sub(r"^jit\(step\)/", "", op_name).replace("\\'", "'")  # HLO text escapes quotes
    return re.sub(r"/jit\(_materialized\)/jit\(_barrier\)", "", name)


def report(row: str, temp_bytes: int, peak: int, values: list[tuple[str, int]], names: dict[str, str], top: int) -> str:
    """The printed report of one row."""
    live = sum(size for _, size in values)
    margin = _GLIBC_MMAP_MAX - temp_bytes
    side = "under" if margin > 0 else "over"
    out = [
        f"## {row}",
        f"temp buffer {temp_bytes / _MIB:.2f} MiB ({abs(margin) / _MIB:.2f} MiB {side} glibc's 32 MiB mmap threshold); "
        f"peak at schedule index {peak}: {live / _MIB:.2f} MiB live in all allocations (parameters included), {len(values)} values",
        "",
        "| MiB | values | sizes (KiB) | made by |",
        "|---:|---:|---|---|",
    ]
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for name, size in values:
        groups[names.get(name, name)].append(size)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    for made_by, sizes in ranked[:top]:
        counts = collections.Counter(sizes)
        shown = ", ".join(f"{n}x{_kib(s)}" if n > 1 else _kib(s) for s, n in sorted(counts.items(), reverse=True))
        out.append(f"| {sum(sizes) / _MIB:.2f} | {len(sizes)} | {shown} | `{made_by}` |")
    if len(ranked) > top:
        rest = sum(sum(s) for _, s in ranked[top:])
        out.append(
            f"| {rest / _MIB:.2f} | {sum(len(s) for _, s in ranked[top:])} | | {len(ranked) - top} more groups |"
        )
    return "\n".join(out)


def _kib(size: int) -> str:
    """``size`` bytes in KiB: whole from 100 KiB on, else to three significant digits."""
    return f"{size / 1024:.0f}" if size >= 100 * 1024 else f"{size / 1024:.3g}"


def _named_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` under the name ``step`` (its arguments' names kept): every row's module is then ``jit_step``,
    whose dumps `main` reads, and its op_names start with ``jit(step)/``, which `short_op_name` drops."""

    @functools.wraps(fn)
    def step(*args: Any) -> Any:
        return fn(*args)

    step.__name__ = step.__qualname__ = "step"
    return step


def _dumped(pattern: str) -> str:
    files = sorted(glob.glob(os.path.join(_DUMP, pattern)))
    if not files:
        raise FileNotFoundError(
            f"XLA wrote no {pattern!r} in {_DUMP}: this jaxlib's XLA dumps differently (the script reads "
            "XLA's debugging dumps, whose names and format are XLA's)"
        )
    return pathlib.Path(files[-1]).read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sweep.add_row_arguments(parser)
    parser.add_argument(
        "--top", type=choices.option(choices.integer(1, "groups shown per row")), default=25, metavar="N",
        help="groups shown per row (default 25)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # the models' PrecisionWarnings are not this script's subject
    jax.config.update("jax_enable_compilation_cache", False)  # a program the persistent cache served: no dumps
    for row in args.rows:
        build, row_args = sweep.row(args.model, row)
        for old in glob.glob(os.path.join(_DUMP, "*")):  # the previous row's dumps
            if os.path.isdir(old):
                shutil.rmtree(old)
            else:
                os.remove(old)
        step = _named_step(build())
        jax.clear_caches()
        compiled = jax.jit(step).lower(*row_args).compile()
        memory = compiled.memory_analysis()
        peak, values = peak_values(_dumped("*jit_step.cpu_after_optimizations-live-range.txt"))
        names = op_names(_dumped("*jit_step.cpu_after_optimizations.txt"))
        print(report(row, int(memory.temp_size_in_bytes), peak, values, names, args.top), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
