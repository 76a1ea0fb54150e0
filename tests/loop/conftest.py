"""Loop tests: a tiny Lift policy trained once per session (the train tests' helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _train_helpers import train_tiny_policy  # noqa: E402


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 4-demo Lift store and a tiny diffusion policy trained on it (seconds)."""
    return train_tiny_policy(tmp_path_factory.mktemp("loop_base"))
