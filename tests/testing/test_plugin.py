"""fpemu's pytest plugin, run in throwaway pytest sessions (pytester): the exhaustive option and
marker, the hypothesis profiles and how they are chosen."""

from __future__ import annotations

import pytest
from hypothesis import settings

from fpemu.testing import plugin

pytest_plugins = ["pytester"]

EXHAUSTIVE_TESTS = """
import pytest

@pytest.mark.fpemu_exhaustive
def test_sweep():
    pass

def test_plain():
    pass
"""

PROFILE_PROBE = """
from hypothesis import settings

def test_profile():
    print("PROFILE", settings.get_current_profile_name(), settings.default.max_examples, settings.default.deadline)
"""


@pytest.fixture(autouse=True)
def keep_profile(monkeypatch):
    """The inner sessions run in this process and may load a profile: restore ours afterwards.

    ``CI`` is removed too (a CI run sets it), so that each test chooses whether its session runs "in CI".
    """
    monkeypatch.delenv(plugin.ENV_PROFILE, raising=False)
    monkeypatch.delenv("CI", raising=False)
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def test_exhaustive_tests_are_skipped_by_default(pytester):
    pytester.makepyfile(EXHAUSTIVE_TESTS)
    result = pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*exhaustive sweep: run with --fpemu-exhaustive*"])


def test_exhaustive_option_runs_them(pytester):
    pytester.makepyfile(EXHAUSTIVE_TESTS)
    result = pytester.runpytest("--strict-markers", "--fpemu-exhaustive")
    result.assert_outcomes(passed=2)


def test_marker_and_option_are_documented(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.fpemu_exhaustive: *skipped unless --fpemu-exhaustive*"])
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--fpemu-exhaustive*"])


def test_plugin_can_be_disabled(pytester):
    pytester.makepyfile(EXHAUSTIVE_TESTS)
    result = pytester.runpytest("-p", "no:fpemu", "--fpemu-exhaustive")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --fpemu-exhaustive*"])


@pytest.mark.parametrize("name", ["ci", "dev", "thorough"])
def test_environment_selects_a_profile(pytester, monkeypatch, name):
    pytester.makepyfile(PROFILE_PROBE)
    monkeypatch.setenv(plugin.ENV_PROFILE, name)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    examples = plugin.PROFILES[name]["max_examples"]
    result.stdout.fnmatch_lines([f"*PROFILE {name} {examples} None*"])
    result.stdout.fnmatch_lines([f"fpemu: hypothesis profile '{name}', exhaustive sweeps off*"])


def test_command_line_wins_over_the_environment(pytester, monkeypatch):
    pytester.makepyfile(PROFILE_PROBE)
    monkeypatch.setenv(plugin.ENV_PROFILE, "thorough")
    result = pytester.runpytest("-s", "--hypothesis-profile", "dev")
    result.stdout.fnmatch_lines(["*PROFILE dev 200 None*"])


DERANDOMIZED_PROBE = """
from hypothesis import settings

def test_profile():
    print("PROFILE", settings.get_current_profile_name(), settings.default.derandomize, settings.default.database)
"""


def test_ci_loads_the_derandomized_ci_profile(pytester, monkeypatch):
    """Under CI, with no profile chosen, examples are the same on every run: CI cannot fail by chance."""
    pytester.makepyfile(DERANDOMIZED_PROBE)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROFILE ci True None*"])


def test_the_environment_wins_over_ci(pytester, monkeypatch):
    pytester.makepyfile(PROFILE_PROBE)
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv(plugin.ENV_PROFILE, "dev")
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*PROFILE dev 200 None*"])


def test_unknown_command_line_profile_is_a_usage_error(pytester):
    pytester.makepyfile(PROFILE_PROBE)
    result = pytester.runpytest("--hypothesis-profile", "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--hypothesis-profile 'nope' is not a registered hypothesis profile*ci, dev, thorough*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_no_choice_changes_nothing(pytester):
    """Projects that choose no profile keep whatever hypothesis has (the plugin loads nothing)."""
    settings.load_profile("default")
    pytester.makepyfile(PROFILE_PROBE)
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*PROFILE default 100 *"])


def test_bad_environment_value_lists_the_profiles(pytester, monkeypatch):
    pytester.makepyfile(PROFILE_PROBE)
    monkeypatch.setenv(plugin.ENV_PROFILE, "fast")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*FPEMU_HYPOTHESIS_PROFILE='fast' is not a profile*choose one of ci, dev, thorough*"])


def test_profiles_are_registered_on_import():
    assert plugin.register_profiles()
    for name, options in plugin.PROFILES.items():
        profile = settings.get_profile(name)
        assert profile.max_examples == options["max_examples"] and profile.deadline is None
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None  # what hypothesis' own ci profile promises
    assert plugin.PROFILES["thorough"]["max_examples"] >= 1000 > plugin.PROFILES["ci"]["max_examples"]


def test_empty_command_line_profile_is_a_usage_error(pytester):
    pytester.makepyfile(PROFILE_PROBE)
    result = pytester.runpytest("--hypothesis-profile=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hypothesis-profile needs a profile name: ci, dev, thorough or 'default'*"])


def test_profile_registered_by_a_conftest_is_accepted(pytester):
    """A project's own profile, registered in its conftest.py, is not refused."""
    pytester.makeconftest("from hypothesis import settings\nsettings.register_profile('mine', max_examples=7)\n")
    pytester.makepyfile(PROFILE_PROBE)
    result = pytester.runpytest("-s", "--hypothesis-profile", "mine")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROFILE mine 7 *"])


@pytest.mark.long
def test_unknown_profile_in_a_fresh_process_is_a_usage_error(pytester):
    """In a new process the plugins load in their installed order (entry points), as when a user runs pytest."""
    pytester.makepyfile(PROFILE_PROBE)
    result = pytester.runpytest_subprocess("--hypothesis-profile", "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hypothesis-profile 'nope' is not a registered hypothesis profile*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_the_public_namespace_holds_only_public_names():
    """dir(fpemu.testing) lists __all__ and the public submodules: no typing helpers (Any), no private modules."""
    import types

    import fpemu.testing

    public = [name for name in dir(fpemu.testing) if not name.startswith("_")]
    assert set(fpemu.testing.__all__) <= set(public)
    extra = [name for name in public if name not in fpemu.testing.__all__]
    assert all(isinstance(getattr(fpemu.testing, name), types.ModuleType) for name in extra), extra
    assert "Any" not in dir(fpemu.testing) and not hasattr(fpemu.testing, "Any")
    assert not any(name.startswith("_") for name in dir(fpemu.testing))


FAILING_ASSERTIONS = """
import numpy as np
import fpemu.testing as ft
import fpemu.testing.scaled_reference

def test_close():
    ft.assert_close(np.float32([1.0, 2.0]), np.float32([1.0, 2.5]), fmt="bf16", ulps=0)

def test_bits():
    ft.assert_bit_exact(np.float32([1.0, -0.0]), np.float32([1.0, 0.0]))

def test_representable():
    ft.assert_representable(np.float32([0.1]), "e4m3fn")

def test_scaled():
    fpemu.testing.scaled_reference.assert_equal(np.float32([1.0]), np.float32([2.0]))
"""


def test_a_failing_assertion_shows_the_callers_line_not_fpemus_source(pytester):
    """fpemu's assertion functions hide their frames (``__tracebackhide__``): a failure shows the test's
    line and the message, not about 100 lines of fpemu's own source."""
    pytester.makepyfile(FAILING_ASSERTIONS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    for name in ("assert_close", "assert_bit_exact", "assert_representable", "assert_equal"):
        assert f"def {name}(" not in out, name
    assert "fpemu/testing/" not in out.replace("\\\\", "/")
    result.stdout.fnmatch_lines(["*ft.assert_close(np.float32*", "E *AssertionError*"])
    assert "TypeError" not in out and out.count("First mismatches") >= 2  # each failed on its values


FAILING_PROPERTY = """
import numpy as np
from hypothesis import given, settings, strategies as st
import fpemu.testing as ft

@settings(derandomize=True, database=None)
@given(st.floats(1.0, 2.0))
def test_property(v):
    ft.assert_close(np.float32([v]), np.float32([v * 1.5 if v > 1.5 else v]), fmt="bf16", ulps=0)
"""


@pytest.mark.long
def test_profiles_leave_out_the_explain_phase(pytester, monkeypatch):
    """Hypothesis' explanation of a failed fpemu assertion listed fpemu's failure-formatting lines (without
    a profile it still does: hypothesis' defaults); fpemu's profiles leave the explain phase out."""
    from hypothesis import Phase

    for name in plugin.PROFILES:
        assert Phase.explain not in settings.get_profile(name).phases
        assert Phase.shrink in settings.get_profile(name).phases
    pytester.makepyfile(FAILING_PROPERTY)
    default = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # hypothesis as it comes, no profile
    default.assert_outcomes(failed=1)
    assert "Explanation:" in default.stdout.str() and "_assertions.py" in default.stdout.str()
    monkeypatch.setenv(plugin.ENV_PROFILE, "ci")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "First mismatches" in out and "Explanation:" not in out and "_assertions.py" not in out
