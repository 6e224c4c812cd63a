"""fpemu's pytest plugin, registered by the ``pytest11`` entry point (active wherever fpemu is installed).

It adds:

- hypothesis profiles ``ci`` (60 examples, derandomized, no example database: every run draws the
  same examples, so a CI run cannot fail by chance), ``dev`` (200) and ``thorough`` (5000), all
  without a deadline (the first call of a jitted function compiles). Select one with hypothesis'
  ``--hypothesis-profile NAME`` or the environment variable ``FPEMU_HYPOTHESIS_PROFILE=NAME``
  (the command line wins); with neither, a run under CI (the ``CI`` environment variable set, as
  every CI service does) loads ``ci``, as hypothesis itself does. Otherwise nothing is loaded: the
  plugin does not change the settings of projects that do not choose a profile. An unknown
  profile name is a usage error that lists the profiles. The profiles leave out hypothesis'
  ``explain`` phase: its report lists the lines that ran only in failing examples, which for a
  failed fpemu assertion are fpemu's own lines that format the failure table, not the cause.
- the option ``--fpemu-exhaustive`` and the marker ``fpemu_exhaustive``: tests with the marker
  (exhaustive float32 sweeps take minutes to hours) are skipped unless the option is given.

Disable the plugin with ``-p no:fpemu``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV_PROFILE = "FPEMU_HYPOTHESIS_PROFILE"
OPTION = "--fpemu-exhaustive"
MARKER = "fpemu_exhaustive"

# name -> hypothesis settings. No deadline: a test's first example compiles its jitted functions.
# ``ci`` keeps what hypothesis' own ``ci`` profile promises (it replaces it): derandomized, no database.
PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 60, "deadline": None, "derandomize": True, "database": None, "print_blob": True},
    "dev": {"max_examples": 200, "deadline": None},
    "thorough": {"max_examples": 5000, "deadline": None},
}


def register_profiles() -> bool:
    """Register the ``ci``/``dev``/``thorough`` hypothesis profiles; False if hypothesis is absent."""
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:
        return False
    phases = [phase for phase in Phase if phase is not Phase.explain]
    for name, options in PROFILES.items():
        settings.register_profile(name, suppress_health_check=[HealthCheck.too_slow], phases=phases, **options)
    return True


def profile_from_environment() -> str | None:
    """The profile named by ``FPEMU_HYPOTHESIS_PROFILE``, validated; None if the variable is unset or empty.

    Raises:
      ValueError: for a name that is not one of the plugin's profiles (the message lists them).
    """
    name = os.environ.get(ENV_PROFILE, "").strip()
    if not name:
        return None
    if name not in PROFILES:
        raise ValueError(
            f"{ENV_PROFILE}={name!r} is not a profile of fpemu's pytest plugin; choose one of {', '.join(PROFILES)}"
        )
    return name


def in_ci() -> bool:
    """Whether the ``CI`` environment variable is set (to anything but empty, ``0`` or ``false``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


# Registered at import: hypothesis' own plugin may load `--hypothesis-profile` before our configure hook runs.
_HAVE_HYPOTHESIS = register_profiles()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fpemu", "fpemu (low-precision floating-point testing)")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        help=f"run the tests marked {MARKER} (exhaustive float32 sweeps: minutes to hours)",
    )


def _check_command_line_profile(name: str) -> None:
    """A usage error (not hypothesis' INTERNALERROR) for a ``--hypothesis-profile`` nobody registered."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(name)
    except InvalidArgument:
        raise pytest.UsageError(
            f"--hypothesis-profile {name!r} is not a registered hypothesis profile; fpemu's plugin registers "
            f"{', '.join(PROFILES)} (and hypothesis has 'default')"
        ) from None


@pytest.hookimpl(tryfirst=True)  # before hypothesis' own plugin loads the command line's profile
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: an exhaustive sweep (every float32 input); skipped unless {OPTION} is given"
    )
    try:
        name = profile_from_environment()
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    chosen = config.getoption("hypothesis_profile", default=None)
    if chosen is not None and not chosen.strip():
        raise pytest.UsageError(f"--hypothesis-profile needs a profile name: {', '.join(PROFILES)} or 'default'")
    if chosen:
        if _HAVE_HYPOTHESIS:
            _check_command_line_profile(chosen)
        return  # the command line chose: hypothesis' plugin loads it
    if name is not None and not _HAVE_HYPOTHESIS:
        raise pytest.UsageError(f"{ENV_PROFILE}={name} needs hypothesis: pip install hypothesis")
    if name is None and in_ci() and _HAVE_HYPOTHESIS:
        name = "ci"
    if name is None:
        return  # nothing asked
    from hypothesis import settings

    settings.load_profile(name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption(OPTION):
        return
    skip = pytest.mark.skip(reason=f"exhaustive sweep: run with {OPTION}")
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    profile = "n/a (no hypothesis)"
    if _HAVE_HYPOTHESIS:
        from hypothesis import settings

        profile = repr(settings.get_current_profile_name())
    sweeps = "on" if config.getoption(OPTION) else f"off (enable with {OPTION})"
    return f"fpemu: hypothesis profile {profile}, exhaustive sweeps {sweeps}"
