"""Teleop tests share the train tests' helpers: a tiny diffusion policy trained on 4 Lift demos, and a
calibration of it whose threshold is so small that the first monitor value raises an alarm; and a
factory of in-process servers over a real simulation thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rewind.envs.config import EnvConfig, build_env
from rewind.monitor.conformal import Calibration
from rewind.policies.io import weights_hash
from rewind.store import store_spec_for
from rewind.teleop import SimLoop, TeleopServer, TeleopSession
from rewind.teleop.frames import FrameRenderer
from rewind.train.policy_api import resolve_weights


@pytest.fixture(scope="session")
def tiny_weights(tiny_run: dict[str, Path]) -> Path:
    """The weights folder of the session's tiny diffusion policy (trained on 4 Lift demos)."""
    return resolve_weights(str(tiny_run["train"]))


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
