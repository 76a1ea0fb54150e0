"""Teleop tests share the train tests' helpers: a tiny diffusion policy trained on 4 Lift demos, and a
calibration of it whose threshold is so small that the first monitor value raises an alarm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

from _train_helpers import collect_lift_store, train_config  # noqa: E402

from rewind.eval.runner import resolve_weights  # noqa: E402
from rewind.monitor.conformal import Calibration  # noqa: E402
from rewind.policies.io import weights_hash  # noqa: E402
from rewind.train import run_train  # noqa: E402

SHORT_TRAIN = {
    "steps": 10,
    "batch_size": 8,
    "warmup_steps": 2,
    "save_every": 10,
    "val_every": 10,
    "log_every": 5,
}


@pytest.fixture(scope="session")
def tiny_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The weights folder of a tiny diffusion policy (10 training steps on 4 Lift demos)."""
    root = tmp_path_factory.mktemp("teleop_policy")
    store = collect_lift_store(root / "demos" / "store")
    run_train(train_config(root / "run", store, train=SHORT_TRAIN))
    return resolve_weights(str(root / "run"))


@pytest.fixture(scope="session")
def alarm_calibration(tiny_weights: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TIDE calibration of :func:`tiny_weights` with threshold 1e-12: the first score alarms."""
    folder = tmp_path_factory.mktemp("teleop_calibration")
    Calibration(
        score="tide", alpha=0.1, n=9, threshold=1e-12, weights_hash=weights_hash(tiny_weights), env="lift"
    ).save(folder)
    return folder
