"""Shared pytest set-up: headless MuJoCo rendering (must be set before mujoco is imported) and the one
session fixture of the tests that need trained weights: 4 Lift demos and a tiny policy trained on them.

Helpers shared by several test folders live in the ``helpers`` package (``tests/helpers``; pyproject
puts ``tests/`` on pytest's ``pythonpath``)."""

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")

import pytest  # noqa: E402

import rewind  # noqa: E402, F401  (preloads triton before OSMesa; see rewind/__init__.py)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``store`` (4 scripted Lift demos), ``train`` (a tiny diffusion policy trained on them for 30
    steps, seconds) and ``root``, built once per session. Tests read it; a test that changes files
    copies them first."""
    from helpers.train import train_tiny_policy

    return train_tiny_policy(tmp_path_factory.mktemp("tiny_run"))
