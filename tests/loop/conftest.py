"""Loop tests: a tiny Lift policy trained once per session (the train tests' helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _train_helpers import collect_lift_store, train_config  # noqa: E402


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 4-demo Lift store and a tiny diffusion policy trained on it (seconds)."""
    import torch

    from rewind.train import run_train

    root = tmp_path_factory.mktemp("loop_base")
    store = collect_lift_store(root / "store")
    threads = torch.get_num_threads()
    try:
        run_train(train_config(root / "train", store))
    finally:
        torch.set_num_threads(threads)
    return {"store": store, "train": root / "train"}
