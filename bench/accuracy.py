"""The quantized-matmul accuracy table of docs/accuracy.md: every matmul format against a float64 reference.

Usage::

    .venv/bin/python bench/accuracy.py                        # sizes 256 .. 8192 (the 8192 column takes minutes)
    .venv/bin/python bench/accuracy.py --sizes 256,512,1024   # a quick run
    .venv/bin/python bench/accuracy.py --json accuracy.json   # also keep every row and the run's metadata
    .venv/bin/python bench/accuracy.py --distributions outlier_channels --outer 256 --sizes 256,4096
    .venv/bin/python bench/accuracy.py --data x.npy,w.npy --distributions none   # your own activations and weights

Progress lines (with timings) go to stderr; stdout gets the run's metadata (date, command, machine,
versions, commit) and three Markdown tables: relative error ``||C - C64||_F / ||C64||_F``, the
max-norm error ``max|C - C64| / max|C64|``, and QSNR in dB. The semantics are in
`fpemu.tools.accuracy` and docs/accuracy.md. The errors are deterministic (fixed seeds, fixed formats);
only the fp32 row depends on the backend's float32 summation order.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path

from fpemu.tools import choices
from fpemu.tools.accuracy import DISTRIBUTIONS, MATMUL_FORMATS, SIZES, markdown_table, matmul_accuracy
from fpemu.tools.bench import environment
from fpemu.tools.data import load_matmul_data


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(t) for t in _list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes comma-separated positive ints, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"--sizes takes comma-separated positive ints, got {text!r}")
    return sizes


def metadata(argv: list[str]) -> dict[str, object]:
    """Command and load average of this run, with `fpemu.tools.bench.environment` (date, device, CPU,
    versions, commit, environment variables)."""
    return {
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/accuracy.py", *argv]),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        **{k: v for k, v in environment().items() if k != "schema"},
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=_sizes, default=list(SIZES), help="comma-separated n (default: %(default)s)")
    parser.add_argument(
        "--block-formats",
        "--recipes",
        dest="block_formats",
        type=_list,
        default=None,
        help=f"comma-separated ({', '.join(MATMUL_FORMATS)}); --recipes is its name of earlier releases",
    )
    parser.add_argument(
        "--distributions",
        type=_list,
        default=None,
        help=f"comma-separated ({', '.join(DISTRIBUTIONS)}; default all), or none (only --data)",
    )
    parser.add_argument("--outer", type=choices.option(choices.size), default=None, metavar="M",
                        help="M = N of every product (default: square, M = N = K)")  # fmt: skip
    parser.add_argument("--data", type=choices.option(choices.split_list), default=None, metavar="LHS.npy,RHS.npy",
                        help="also measure these operands (M x K and K x N) at the sizes below K, and K")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the rows and metadata here")
    args = parser.parse_args(argv)

    meta = metadata(argv)
    t0 = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {line}", file=sys.stderr, flush=True)

    distributions = [] if args.distributions == ["none"] else args.distributions
    try:
        if args.data is not None and len(args.data) != 2:
            raise ValueError(f"--data takes two .npy files, LHS,RHS, got {len(args.data)}")
        data = load_matmul_data(*args.data) if args.data is not None else None
        rows = matmul_accuracy(args.block_formats, distributions, args.sizes, seed=args.seed, outer=args.outer, data=data,
                               progress=progress)  # fmt: skip
    except ValueError as e:
        parser.error(str(e))
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    meta["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    for key, value in meta.items():
        print(f"- {key}: {value}")
    tables = {
        "relative error ||C - C64||_F / ||C64||_F": "relative_error",
        "max-norm error max|C - C64| / max|C64|": "max_abs_error",
        "QSNR -20 log10(relative error), dB": "qsnr_db",
    }
    for title, metric in tables.items():
        print(f"\n{title}:\n")
        print(markdown_table(rows, metric=metric))
    if args.json is not None:
        payload = {"metadata": meta, "rows": [dataclasses.asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")  # inf is written as Infinity
        print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
