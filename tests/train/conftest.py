"""Fixtures of the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def made(tiny_run: dict[str, Path]) -> dict[str, Path]:
    """The session's tiny run: ``store``, ``train`` (a finished 30-step run) and ``root``. Cases copy
    what they tamper with; the run itself is only read."""
    return tiny_run
