"""Shared pytest set-up: headless MuJoCo rendering (must be set before mujoco is imported) and the
session fixtures of the tests that need trained weights: 4 Lift demos and a tiny policy trained on them
(``tiny_run``), and that policy's calibrated monitor set-up (``tiny_monitor``).

Helpers shared by several test folders live in the ``helpers`` package (``tests/helpers``; pyproject
puts ``tests/`` on pytest's ``pythonpath``)."""

import os
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("MUJOCO_GL", "osmesa")

import pytest  # noqa: E402

import rewind  # noqa: E402, F401  (preloads triton before OSMesa; see rewind/__init__.py)

if TYPE_CHECKING:
    from helpers.monitor import TinyMonitor


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``store`` (4 scripted Lift demos), ``train`` (a tiny diffusion policy trained on them for 30
    steps, seconds) and ``root``, built once per session. Tests read it; a test that changes files
    copies them first."""
    from helpers.train import train_tiny_policy

    return train_tiny_policy(tmp_path_factory.mktemp("tiny_run"))


@pytest.fixture(scope="session")
def tiny_monitor(tiny_run: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> "TinyMonitor":
    """The calibrated monitor set-up of ``tiny_run``'s policy (:class:`helpers.monitor.TinyMonitor`:
    loaded policy, checkpoint library, a TIDE monitor that alarms often, calibration folders), built
    once per session. Tests read it; a test that changes a calibration folder copies it first."""
    from helpers.monitor import build_tiny_monitor

    return build_tiny_monitor(tiny_run, tmp_path_factory.mktemp("tiny_monitor"))
