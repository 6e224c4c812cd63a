"""Where did the NaN come from? `fpemu.find_nonfinite` and `fpemu.PrecisionWarning` (docs/emulate.md)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fpemu

HERE = __file__


def _line_of(fn, text: str) -> int:
    """The line of this file holding ``text`` inside ``fn``'s source."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _quietly(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fpemu.PrecisionWarning)
        return call(*args, **kwargs)


# -- an optax Adam step in bf16: b2 = 0.999 is 1.0 ---------------------------------------------------


def _adam_problem():
    params = {"w": jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32).reshape(4, 2)}
    x = jnp.linspace(0.5, 2.0, 12, dtype=jnp.float32).reshape(3, 4)
    opt = optax.adam(1e-2)

    def step(params, opt_state, x):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"]) ** 2))(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step, params, opt.init(params), x


@pytest.mark.long
def test_an_adam_step_in_bf16_names_the_division_and_the_literal():
    step, params, opt_state, x = _adam_problem()
    promotion = jax.numpy_dtype_promotion("standard")  # optax raises a float to an int32 power
    with promotion, pytest.warns(fpemu.PrecisionWarning, match=r"the literal 0\.999 becomes 1\.0 in bf16") as caught:
        report = fpemu.find_nonfinite(step, "bf16", params, opt_state, x)
    assert report.found and report.primitive == "div" and report.output in ("NaN", "±inf", "NaN and ±inf")
    assert "optax" in report.source  # the line of optax's bias correction that divides by 1 - b2**t = 0
    assert report.format == "bf16" and len(report.input_ranges) == 2
    lo, hi = report.input_ranges[1]
    assert lo == hi == 0.0  # the divisor: 1 - 1.0**t
    assert (0.999, 1.0, "bf16") in [(c.value, c.rounded, c.format) for c in report.literals]  # optax reads it twice
    assert any("optax" in str(w.filename) for w in caught)  # the warning points at optax's line, not fpemu's
    text = str(report)
    assert text.startswith("first non-finite result from finite inputs: div at ")
    assert "0.999 -> 1.0 in bf16 (rounds to exactly 1.0)" in text
    with jax.numpy_dtype_promotion("standard"):  # the same step in fp32 is finite: nothing to report
        assert not fpemu.find_nonfinite(step, "fp32", params, opt_state, x).found


def test_the_warning_is_given_once_per_literal_and_line_per_trace():
    def f(x):
        return x * 0.999 + x * 0.999  # one line, two uses of the literal

    with pytest.warns(fpemu.PrecisionWarning) as caught:
        fpemu.emulate(f, "bf16")(jnp.float32(1.0))
    assert len([w for w in caught if issubclass(w.category, fpemu.PrecisionWarning)]) == 1
    assert caught[0].filename == HERE and caught[0].lineno == _line_of(f, "0.999 + x")


def _traced_twice_warnings(action: str) -> list[str]:
    """The PrecisionWarnings of two traces of one function (a step built twice), under ``action``."""

    def f(x):
        return x * 0.999

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action, fpemu.PrecisionWarning)
        for _ in range(2):
            jax.jit(fpemu.emulate(f, "bf16")).lower(jnp.float32(1.0))  # a fresh function: traced again
    return [str(w.message) for w in caught if issubclass(w.category, fpemu.PrecisionWarning)]


def test_the_default_filter_gives_the_warning_once_however_often_the_function_is_traced():
    given = _traced_twice_warnings("default")
    assert len(given) == 1 and "the literal 0.999 becomes 1.0 in bf16" in given[0]


def test_the_always_filter_gives_the_warning_at_every_trace():
    given = _traced_twice_warnings("always")
    assert len(given) == 2 and given[0] == given[1]


@pytest.mark.parametrize(
    ("fmt", "literal", "says"),
    [
        ("e4m3fn", 1e-5, r"the literal 1e-05 becomes 0\.0 in e4m3fn \(a nonzero value rounds to 0\)"),
        ("fp16", 1e6, r"the literal 1000000\.0 becomes inf in fp16 \(a finite value rounds to inf\)"),
        ("bf16", 1.001, r"the literal 1\.001 becomes 1\.0 in bf16 \(rounds to exactly 1\.0\)"),
    ],
)
def test_a_literal_that_changes_meaning_warns(fmt, literal, says):
    with pytest.warns(fpemu.PrecisionWarning, match=says):
        fpemu.emulate(lambda x: x + literal, fmt)(jnp.float32(2.0))


def test_a_literal_that_only_loses_digits_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", fpemu.PrecisionWarning)
        assert float(fpemu.emulate(lambda x: x * 0.3, "bf16")(jnp.float32(1.0))) == 0.30078125
        fpemu.emulate(lambda x: x * 1.0 + 0.0, "e4m3fn")(jnp.float32(1.0))  # 1.0 and 0.0 keep their meaning


def test_excluded_literals_do_not_warn():
    policy = fpemu.Policy(default="bf16", exclude=("optimizer",))

    def f(x):
        with jax.named_scope("optimizer"):
            return x / (1.0 - 0.999**3)

    with warnings.catch_warnings():
        warnings.simplefilter("error", fpemu.PrecisionWarning)
        y = fpemu.emulate(f, policy)(jnp.float32(1.0))
    assert np.isfinite(float(y))


# -- find_nonfinite ----------------------------------------------------------------------------------------


@pytest.mark.long
def test_layernorm_eps_in_e4m3fn_divides_by_zero_on_a_constant_row():
    def layernorm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5)

    x = jnp.array([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]], jnp.float32)
    report = _quietly(fpemu.find_nonfinite, layernorm, "e4m3fn", x)
    assert report.found and report.primitive == "div" and report.output == "NaN"  # 0 / 0 on the constant row
    assert report.source.startswith(f"{HERE}:{_line_of(layernorm, 'jnp.sqrt(var + 1e-5)')} ")
    assert report.literals[0].value == 1e-5 and report.literals[0].rounded == 0.0


def test_nan_inputs_are_not_a_cause_and_a_finite_run_reports_nothing():
    report = fpemu.find_nonfinite(lambda x: x * 2.0 + 1.0, "bf16", jnp.array([1.0, jnp.nan], jnp.float32))
    assert not report.found and report.primitive is None and report.later == ()
    assert str(report) == "no operation made a NaN or an infinity from finite inputs"
    assert np.isnan(np.asarray(report.value)[1])


def test_overflow_is_found_where_it_happens_and_later_ones_are_listed():
    def f(x):
        y = x * 100.0  # 300 * 100 = 30000 overflows e4m3fn (max 448): NaN, e4m3fn has no infinity
        return y + 1.0, jnp.exp(x)  # exp(300) overflows too, independently

    report = fpemu.find_nonfinite(f, "e4m3fn", jnp.float32(300.0))
    assert report.found and report.primitive == "mul" and report.output == "NaN"
    assert report.source.startswith(f"{HERE}:{_line_of(f, 'x * 100.0')} ")
    assert report.input_ranges == ((288.0, 288.0), (96.0, 96.0))  # the rounded operands it saw
    assert [e.site.primitive for e in report.later] == ["exp"]


def test_inside_a_scan_the_iteration_that_breaks_is_found():
    def f(x):
        def body(c, _):
            c = c * 4.0  # 1, 4, 16, 64, 256, then 1024 overflows e4m3fn at the fifth step
            return c, c

        return jax.lax.scan(body, x, None, length=8)[1]

    report = fpemu.find_nonfinite(f, "e4m3fn", jnp.float32(1.0))
    assert report.found and report.primitive == "mul" and report.input_ranges == ((256.0, 256.0), (4.0, 4.0))
    assert report.source.startswith(f"{HERE}:{_line_of(f, 'c = c * 4.0')} ")
    assert report.later == ()  # after that the carry is NaN: not a cause again


def test_find_nonfinite_checks_its_options_as_emulate_does():
    with pytest.raises(ValueError, match="needs emulate"):
        fpemu.find_nonfinite(lambda x: x, fpemu.Policy(default="bf16", rounding="stochastic"), jnp.float32(1.0))
    with pytest.raises(TypeError, match="fn must be callable"):
        fpemu.find_nonfinite(3, "bf16", jnp.float32(1.0))
