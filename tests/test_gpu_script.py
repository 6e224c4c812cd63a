"""bench/gpu.sh, the script a lent GPU machine runs, checked where CI can: that it parses, that every
step has a time limit and the default steps' limits fit the 8.5 minutes a 15-minute lease leaves after
a machine's start, that FPEMU_GPU_SH_STEPS is checked, and that pytest runs
there without pytest-benchmark (which refuses xdist). `FPEMU_GPU_SH_ALLOW_CPU=1 bench/gpu.sh` runs
the whole script on CPU (about a minute); docs/kernels.md says what it found on a GPU."""

import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu.sh"


def test_gpu_sh_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def _limits(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"\btimeout (\d+) ", text)]


def test_every_step_has_a_time_limit_and_the_default_steps_fit_in_eight_and_a_half_minutes():
    text = SCRIPT.read_text()
    steps = re.findall(r"^ *summary (\w+) ", text, re.MULTILINE)
    assert steps == ["device", "tests", "exhaustive", "fp8", "kernels", "training", "scalify"]
    default = re.search(r"FPEMU_GPU_SH_STEPS:-([a-z ]+)\}", text).group(1).split()
    assert default == ["tests", "kernels", "training", "scalify"]
    blocks = dict(re.findall(r"^if wants (\w+); then\n(.*?)^fi$", text, re.MULTILINE | re.DOTALL))
    assert sorted(blocks) == sorted(steps[1:])
    for step, block in blocks.items():
        assert _limits(block), step
    device = _limits(text.split("if wants")[0])
    assert len(device) == 1
    total = device[0] + sum(sum(_limits(blocks[step])) for step in default)
    assert total <= 8.5 * 60, total
    for line in text.splitlines():  # every Python run that does real work is under a limit
        if '"$python" bench/' in line and "--export" not in line:
            assert "timeout" in line, line


def test_an_unknown_step_is_refused_with_the_valid_ones(tmp_path):
    run = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path)],
        env={"PATH": "/usr/bin:/bin", "FPEMU_GPU_SH_STEPS": "tests trainig"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert "names 'trainig'; the steps are: tests exhaustive fp8 kernels training scalify" in run.stderr
    assert not list(tmp_path.iterdir())


def test_pytest_runs_without_pytest_benchmark():
    lines = [line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#")]
    shared = [line for line in lines if line.startswith("pytest=(")]
    assert len(shared) == 1 and "-p no:benchmark" in shared[0]
    runs = [run.split(")")[0] for run in "\n".join(lines).split("-m pytest")[1:]]  # to the array's end
    assert len(runs) == 3
    for run in runs:
        assert "-p no:benchmark" in run or '"${pytest[@]}"' in run, run


def _training_step_script():
    import importlib.util

    path = SCRIPT.parent / "gpu_training_step.py"
    spec = importlib.util.spec_from_file_location("gpu_training_step", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_time_sums_the_device_timelines_per_step():
    """``--profile``'s breakdown (bench/gpu_training_step.py), on a stand-in for
    ``jax.profiler.ProfileData`` laid out as a GPU trace is: the device plane's "XLA Ops" line and
    its streams, per step; host planes and other device lines (modules) left out."""
    from types import SimpleNamespace as NS

    def line(name, *events):
        return NS(name=name, events=[NS(name=n, duration_ns=d) for n, d in events])

    data = NS(planes=[
        NS(name="/host:CPU", lines=[line("python", ("PjitFunction(step)", 9_000_000))]),
        NS(name="/device:GPU:0", lines=[
            line("XLA Modules", ("jit_step", 4_000_000)),
            line("XLA Ops", ("fusion.1", 300_000), ("fusion.1", 100_000), ("custom-call.2", 1_000_000)),
            line("Stream #13(Compute)", ("loop_fusion_1", 250_000), ("cutlass_gemm", 900_000)),
            line("Stream #14(MemcpyD2H)", ("MemcpyD2H", 2_000)),
        ]),
    ])  # fmt: skip
    timelines, counts = _training_step_script().device_time(data, steps=2)
    assert timelines == {
        "XLA Ops": {"fusion.1": 200.0, "custom-call.2": 500.0},
        "streams": {"loop_fusion_1": 125.0, "cutlass_gemm": 450.0, "MemcpyD2H": 1.0},
    }
    assert counts["XLA Ops", "fusion.1"] == 2 and counts["streams", "MemcpyD2H"] == 1
