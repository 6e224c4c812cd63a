"""``fpemu sweep``: its options and their errors, and one run on the digits MLP (`fpemu.tools.sweep`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import fpemu
from fpemu.tools import sweep
from fpemu.tools.cli import main
from fpemu.tools.sweep import _recipes, program_size
from tests.tools.test_cli import run_error

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--recipes", "mxfp8_e4m3"], r"--recipes: unknown training recipe 'mxfp8_e4m3'.*fp8_current.*nvfp4"),
        (["--recipes", "fp8_current,,mxfp8"], r"--recipes: .*empty items"),
        (["--forms", "bf16"], r"--forms: unknown form 'bf16'.*dot, bf16\+dot"),
        (["--rounds", "0"], r"--rounds: must be a positive integer \(interleaved rounds of step calls\), got '0'"),
        (["--compiles", "two"], r"--compiles: must be a positive integer \(fresh builds per row\), got 'two'"),
        (
            ["--model", "cnn"],
            r"--model: invalid choice: 'cnn' \(choose from '?mlp'?, '?transformer'?, '?transformer4'?, '?transformer4-scan'?\)",
        ),
    ],
)
def test_a_bad_option_is_a_usage_error_naming_it_and_the_choices(capsys, argv, expected):
    err = run_error(capsys, "sweep", *argv)
    assert re.search(expected, err, re.S), err


def test_the_training_recipes_are_the_choices():
    """``--recipes`` takes exactly `fpemu.TRAINING_RECIPES` (one word, one thing: not block formats)."""
    assert _recipes(",".join(fpemu.TRAINING_RECIPES)) == list(fpemu.TRAINING_RECIPES)
    with pytest.raises(ValueError, match="unknown training recipe 'mxfp4_e2m1'"):
        _recipes("mxfp4_e2m1")


def test_program_size_counts_the_entry_kernels_and_every_instruction():
    """The ``HLO kernels`` column (also bench/gpu_training_step.py's): the entry computation's instructions
    that launch work (not parameters, constants, tuples, tuple elements or bitcasts), and all instructions."""
    hlo = """HloModule jit_step, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %constant.1 = f32[] constant(2)
  %broadcast.1 = f32[4]{0} broadcast(%constant.1), dimensions={}
  ROOT %multiply.1 = f32[4]{0} multiply(%param_0, %broadcast.1)
}

ENTRY %main (x: f32[4]) -> (f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %constant.2 = f32[] constant(0)
  %fusion = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_computation
  %bitcast.1 = f32[2,2]{1,0} bitcast(%fusion)
  %custom-call.1 = (f32[4]{0}, s8[16]{0}) custom-call(%fusion, %x), custom_call_target="__cublas$gemm"
  %get-tuple-element.1 = f32[4]{0} get-tuple-element(%custom-call.1), index=0
  ROOT %tuple.1 = (f32[4]{0}, f32[4]{0}) tuple(%get-tuple-element.1, %fusion)
}
"""
    assert program_size(hlo) == (2, 11)
    kernels = sweep.hlo_kernels(hlo)  # what bench/kernel_profile.py reports on
    assert {name: result for name, (result, _) in kernels.items()} == {
        "fusion": "f32[4]{0}",
        "custom-call.1": "(f32[4]{0}, s8[16]{0})",
    }
    assert kernels["fusion"][1] == "  %fusion = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_computation"


def test_the_kernels_of_loops_and_conditionals_count_and_their_reducers_do_not():
    """A scanned model's work runs in a ``while`` loop's body, and a materialization's in a conditional's
    branches: their instructions that launch work are kernels too (a ``transformer4-scan`` row would show
    only the loop's driver otherwise), whatever their result types (XLA numbers a long tuple's elements in
    comments, ``/*index=5*/``); a reduction's reducer (``to_apply`` of a ``reduce``) and a fused
    computation's instructions are not."""
    hlo = """HloModule jit_step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  ROOT %negate.1 = f32[4]{0} negate(%param_0)
}

%branch_0 (p0: f32[4]) -> f32[4] {
  ROOT %p0 = f32[4]{0} parameter(0)
}

%branch_1 (p1: f32[4]) -> f32[4] {
  %p1 = f32[4]{0} parameter(0)
  ROOT %copy.1 = f32[4]{0} copy(%p1)
}

%body (c: (s32[], f32[4])) -> (s32[], f32[4]) {
  %c = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %v = f32[4]{0} get-tuple-element(%c), index=1
  %neg_fusion = f32[4]{0} fusion(%v), kind=kLoop, calls=%fused_computation
  %cond.1 = f32[4]{0} conditional(%i, %neg_fusion, %neg_fusion), branch_computations={%branch_0, %branch_1}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %cond.1)
}

%condition (d: (s32[], f32[4])) -> pred[] {
  %d = (s32[], f32[4]{0}) parameter(0)
  %j = s32[] get-tuple-element(%d), index=0
  %four = s32[] constant(4)
  ROOT %lt = pred[] compare(%j, %four), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%zero, %x)
  %loop = (s32[], f32[4]{0}) while(%init), condition=%condition, body=%body
  %six = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, /*index=5*/f32[4]{0}) custom-call(%x), custom_call_target="six"
  %out = f32[4]{0} get-tuple-element(%loop), index=1
  %z = f32[] constant(0)
  ROOT %total = f32[] reduce(%out, %z), dimensions={0}, to_apply=%add
}
"""
    kernels = sweep.hlo_kernels(hlo)
    assert sorted(kernels) == ["cond.1", "copy.1", "loop", "lt", "neg_fusion", "next", "six", "total"]
    assert kernels["six"][0].endswith("/*index=5*/f32[4]{0})")  # a long tuple's type, comment and all
    assert program_size(hlo)[0] == 8


@pytest.mark.parametrize("name", ["fp32", "emulated bf16", "fp8_delayed", "bf16+nvfp4"])
def test_a_row_by_name_is_the_row_the_sweep_builds(name):
    """`sweep.row` (the bench scripts' rows): the function `rows_for` builds for that name, on the same
    arguments (a delayed recipe's first training state among them)."""
    build, args = sweep.row("mlp", name)
    step, model_args = sweep.MODELS["mlp"]()
    recipes = [] if name in ("fp32", "emulated bf16") else [name.removeprefix("bf16+")]
    expected_build, expected_args = sweep.rows_for(step, model_args, recipes, list(sweep.FORMS))[name]
    leaves, expected_leaves = jax.tree_util.tree_leaves(args), jax.tree_util.tree_leaves(expected_args)
    assert [np.asarray(x).tobytes() for x in leaves] == [np.asarray(x).tobytes() for x in expected_leaves]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MLP's Adam literals under bf16
        assert str(jax.make_jaxpr(build())(*args)) == str(jax.make_jaxpr(expected_build())(*expected_args))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mxfp9", r"training recipe must be one of .*did you mean 'mxfp8'"),
        ("bf16+fp8_weights", r"'fp8_weights' is an inference recipe, not a training recipe"),
        ("bf16+fp32", r"training recipe must be one of"),
        ("e4m3fn", r"training recipe must be one of"),
    ],
)
def test_a_row_name_that_is_none_is_a_value_error_naming_the_recipes(name, expected):
    with pytest.raises(ValueError, match=expected):
        sweep.row_name(name)
    with pytest.raises(ValueError, match=expected):
        sweep.row("mlp", name)


@pytest.mark.long
def test_the_command_compiles_with_the_persistent_cache_off(tmp_path):
    """A compile that JAX's persistent compilation cache serves is not a compile (with a cache directory set,
    the MLP's fp32 row read 0.01 s of XLA). Run as a user runs it, with ``JAX_COMPILATION_CACHE_DIR`` set
    and every program eligible, ``fpemu sweep`` leaves the cache empty: it never used it."""
    cache = tmp_path / "cache"
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }  # fmt: skip
    argv = ["sweep", "--model", "mlp", "--recipes", "fp8_current", "--forms", "dot", "--rounds", "1"]
    run = subprocess.run(
        [sys.executable, "-m", "fpemu", *argv], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr
    assert "persistent cache off" in run.stdout.splitlines()[1]
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.long
def test_a_run_prints_the_machine_the_table_and_writes_the_json(capsys, tmp_path):
    """The MLP with two recipes (one of them with delayed scaling's state), one form, two rounds: the
    machine and allocator line, a row per policy in order, fp32's compile and emulated bf16's step as
    the units of their columns, and the JSON file with the same rows."""
    path = tmp_path / "results" / "sweep.json"  # its folder is made
    argv = ["sweep", "--model", "mlp", "--recipes", "fp8_current,fp8_delayed", "--forms", "dot", "--rounds", "2"]
    with pytest.warns(fpemu.PrecisionWarning, match="0.999"):  # the emulated bf16 row's Adam literal
        assert main([*argv, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("machine: ") and "GLIBC_TUNABLES=" in lines[0] and "XLA_FLAGS=" in lines[0]
    assert lines[1] == (
        "model mlp; compile: a fresh function, caches cleared, persistent cache off, minimum of 1; "
        "step: 2 interleaved rounds"
    )
    assert lines[2].startswith("| row | trace s | lower s | XLA s | compile vs fp32 |")
    assert lines[-1] == f"wrote {path}"
    rows = [line.split(" | ") for line in lines[4:-1] if line.startswith("| ")]  # not a page-fault note
    assert [r[0].lstrip("| ") for r in rows] == ["fp32", "emulated bf16", "fp8_current", "fp8_delayed"]
    assert rows[0][4] == "1.00x"  # fp32's compile is the unit
    assert rows[1][-1] == "1.00x |"  # emulated bf16's step is the unit

    document = json.loads(path.read_text())
    assert document["schema"] == "fpemu.sweep/1"
    assert document["meta"]["model"] == "mlp" and document["meta"]["rounds"] == 2
    assert document["meta"]["recipes"] == ["fp8_current", "fp8_delayed"] and document["meta"]["forms"] == ["dot"]
    assert "schema" not in document["meta"] and "GLIBC_TUNABLES" in document["meta"]["env"]
    by_name = {row["name"]: row for row in document["rows"]}
    assert list(by_name) == ["fp32", "emulated bf16", "fp8_current", "fp8_delayed"]
    assert by_name["fp32"]["compile_vs_fp32"] == 1.0 and by_name["emulated bf16"]["step_vs_emulated_bf16"] == 1.0
    for row, cells in zip(document["rows"], rows, strict=True):
        assert cells[5] == str(row["kernels"]) and cells[6] == str(row["instructions"])
        assert 0 < row["kernels"] <= row["instructions"]
        assert min(row["trace_s"], row["lower_s"], row["xla_s"], row["step_ms"], row["temp_mib"]) >= 0


def _row(name: str, faults: float, temp_mib: float = 30.0) -> sweep.SweepRow:
    return sweep.SweepRow(
        name=name, trace_s=0.1, lower_s=0.1, xla_s=1.0, compile_vs_fp32=2.0, kernels=90, instructions=3000,
        temp_mib=temp_mib, faults=faults, step_ms=20.0, step_vs_emulated_bf16=1.1,
    )  # fmt: skip


def test_the_faults_note_names_each_row_at_or_over_the_threshold_in_order():
    """Rows faulting in 4 MiB of pages per call or more are named with their faults and buffer; fewer, none."""
    assert sweep.FAULTS_NOTED == 1024
    assert sweep.faults_note([_row("fp32", 0), _row("mxfp8", 1023.4)]) is None
    note = sweep.faults_note([_row("fp32", 11511, 38.0), _row("mxfp8", 3), _row("nvfp4", 1024, 35.1)])
    assert note is not None
    assert note.startswith("note: page faults per call: fp32 11511 (temp 38.0 MiB), nvfp4 1024 (temp 35.1 MiB); ")
    assert "mxfp8" not in note and note.endswith('(docs/training.md, "Page faults").')


def test_the_faults_note_gives_the_allocator_setting_of_the_docs():
    """One setting, the one docs/training.md's "Page faults" gives (and docs/benchmarks.md points to)."""
    note = sweep.faults_note([_row("nvfp4", 9773)])
    assert note is not None and sweep.KEEP_MEMORY in note
    assert f"`{sweep.KEEP_MEMORY}`" in (ROOT / "docs" / "training.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("faults", "noted"), [(0.0, False), (9773.0, True)])
def test_the_command_prints_the_faults_note_below_the_table(monkeypatch, capsys, faults, noted):
    rows = [_row("fp32", 0), _row("emulated bf16", 0), _row("nvfp4", faults)]
    monkeypatch.setattr(sweep, "run", lambda *args, **kwargs: rows)
    assert main(["sweep", "--model", "mlp", "--recipes", "nvfp4", "--forms", "dot", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    last_row = max(i for i, line in enumerate(lines) if line.startswith("| nvfp4 |"))
    assert lines[last_row + 1 :] == ([sweep.faults_note(rows)] if noted else [])
