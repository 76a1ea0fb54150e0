"""Monitor tests share the train tests' helpers (tiny policies, the 4-demo Lift store)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

from _train_helpers import train_tiny_policy  # noqa: E402


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 4-demo Lift store and a tiny diffusion policy trained on it (seconds)."""
    return train_tiny_policy(tmp_path_factory.mktemp("monitor_run"))
