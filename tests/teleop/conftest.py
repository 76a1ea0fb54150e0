"""Teleop tests share the train tests' helpers: a tiny diffusion policy trained on 4 Lift demos, and a
calibration of it whose threshold is so small that the first monitor value raises an alarm; and a
factory of in-process servers over a real simulation thread."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

from _train_helpers import collect_lift_store, train_config  # noqa: E402

from rewind.envs.config import EnvConfig, build_env  # noqa: E402
from rewind.monitor.conformal import Calibration  # noqa: E402
from rewind.policies.io import weights_hash  # noqa: E402
from rewind.store import store_spec_for  # noqa: E402
from rewind.teleop import SimLoop, TeleopServer, TeleopSession  # noqa: E402
from rewind.teleop.frames import FrameRenderer  # noqa: E402
from rewind.train import run_train  # noqa: E402
from rewind.train.policy_api import resolve_weights  # noqa: E402

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


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., TeleopServer]]:
    """``make_server(token=None, host="127.0.0.1", **server_kwargs)``: a real simulation thread
    (pure-teleop Lift, 64x64 frames, store ``tmp_path/store``) behind a started server on a free port;
    everything is stopped after the test."""
    running: list[Any] = []

    def make(token: str | None = None, host: str = "127.0.0.1", **kwargs: Any) -> TeleopServer:
        env = build_env(EnvConfig(name="lift"))
        session = TeleopSession(env, None, tmp_path / "store", store_spec_for(env))
        loop = SimLoop(session, control_hz=20, renderer=FrameRenderer(env.unwrapped, size=64))
        loop.start()
        running.append(loop)
        srv = TeleopServer(loop, host, 0, token=token, **kwargs)
        srv.start()
        running.append(srv)
        return srv

    yield make
    for item in reversed(running):
        item.stop()
