"""Env workers that hang (``rollout.step_timeout_s``): a worker that does not answer in time is killed,
the pool stops, and the error is one line naming the worker, its seeds and the timeout; the store keeps
only the episodes that had ended; no process or shared-memory block is left behind. Also the rollout
node's checks (timeouts, Ray only where a command runs on Ray)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.envs import HangingEnvFactory, pid_gone

from rewind.cli.app import is_user_error
from rewind.config import ConfigError, to_dataclass
from rewind.envs.config import EnvConfig
from rewind.eval.observers import StoreRecorder
from rewind.lockstep import run_batch
from rewind.monitor.calibrate import CalibrateConfig
from rewind.rollout.config import RolloutConfig
from rewind.rollout.workers import EnvFactory, EnvWorkers, WorkerError
from rewind.store import ReplayStore, store_spec_for
from rewind.store.verify import verify_store
from rewind.train.policy_api import load_policy

LIFT = EnvFactory(EnvConfig(name="lift", max_steps=16))


def test_a_hung_worker_is_killed_and_named_with_its_seeds_and_the_timeout(
    tmp_path: Path, tiny_run: dict[str, Path]
) -> None:
    env = LIFT()
    loaded = load_policy(tiny_run["train"], env, "lift", torch.device("cpu"))
    env.close()
    gen = torch.Generator().manual_seed(0)
    pool = EnvWorkers(HangingEnvFactory(LIFT, seed=11, after=3), 4, 2, step_timeout_s=3)
    shm = Path("/dev/shm") / pool._res.shm.name.lstrip("/")  # type: ignore[union-attr]
    pids = pool.pids
    with ReplayStore.create(tmp_path / "store", store_spec_for(LIFT())) as store:
        recorder = StoreRecorder(store, loaded.version)
        run_batch(pool, loaded.policy, [0, 1, 2, 3], gen, torch.device("cpu"), [recorder])
        assert len(store) == 4
        with pytest.raises(WorkerError) as info:  # seed 11 hangs in its 3rd step; worker 1 holds 11, 13
            run_batch(pool, loaded.policy, [10, 11, 12, 13], gen, torch.device("cpu"), [recorder])
        assert [e.seed for e in store.episodes()] == [0, 1, 2, 3]
    message = str(info.value)
    assert "\n" not in message and is_user_error(info.value)
    assert re.fullmatch(
        r"environment worker 1 \(pid \d+\) did not answer within 3 s \(rollout.step_timeout_s=3\) while "
        r"running seeds 11, 13; the worker pool was stopped",
        message,
    ), message
    assert pool.closed and all(pid_gone(p) for p in pids) and not shm.exists()
    with pytest.raises(WorkerError, match="did not answer within 3 s"):
        pool[0].reset(seed=0)
    report = verify_store(tmp_path / "store")
    assert report["ok"] and report["episodes"] == 4 and not report["uncommitted_files"]


def test_step_timeout_zero_waits_for_a_slow_worker() -> None:
    with EnvWorkers(HangingEnvFactory(LIFT, seed=5, after=2, seconds=1.0), 2, 2, step_timeout_s=0) as pool:
        pool[0].reset(seed=5)
        for _ in range(3):
            obs, *_ = pool[0].step(np.zeros(5, np.float32))
        assert pool[0].unwrapped.elapsed_steps == 3 and not pool.closed


def test_rollout_node_checks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^rollout.step_timeout_s must be >= 0; got -1$"):
        RolloutConfig(step_timeout_s=-1)
    with pytest.raises(
        ConfigError, match=r"^rollout.workers needs rollout.backend=local; use rollout.actors$"
    ):
        RolloutConfig(backend="ray", workers=2)
    node = {"out_dir": str(tmp_path), "policy_path": "p", "data_path": "d", "rollout": {"backend": "ray"}}
    with pytest.raises(
        ConfigError, match=r"^rollout.backend=ray: rewind-calibrate runs its rollouts in this"
    ):
        to_dataclass(node, CalibrateConfig)
