"""bench/gpu.sh, the script a lent GPU machine runs, checked where CI can: that it parses, that every
step has a time limit and the limits fit the 8 minutes a 15-minute lease leaves, and that pytest runs
there without pytest-benchmark (which refuses xdist). `FPEMU_GPU_SH_ALLOW_CPU=1 bench/gpu.sh` runs
the whole script on CPU (about a minute); docs/kernels.md says what it found on a GPU."""

import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu.sh"


def test_gpu_sh_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_step_has_a_time_limit_and_all_fit_in_eight_minutes():
    text = SCRIPT.read_text()
    steps = re.findall(r"^summary (\w+) ", text, re.MULTILINE)
    assert steps == ["device", "tests", "fp8", "kernels", "training"]
    limits = [int(s) for s in re.findall(r"\btimeout (\d+) ", text)]
    assert len(limits) >= len(steps) and sum(limits) <= 8 * 60, limits
    for line in text.splitlines():  # every Python run that does real work is under a limit
        if '"$python" bench/' in line and "--export" not in line:
            assert "timeout" in line, line


def test_pytest_runs_without_pytest_benchmark():
    code = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    assert code.count("-m pytest") == 2 and code.count("-p no:benchmark") == 2
