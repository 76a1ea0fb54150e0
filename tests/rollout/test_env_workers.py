"""Environment workers (``rollout.workers=N``): records identical to in-process stepping, snapshot and
restore bit-exact through the process boundary, a killed worker as a one-line error naming its seeds
with nothing half-written in the store, and no process or shared block left behind."""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.envs import pid_gone

from rewind.cli.app import is_user_error
from rewind.config import ConfigError, to_dataclass
from rewind.envs import make_env
from rewind.envs.config import EnvConfig
from rewind.envs.wrappers import PerturbationConfig
from rewind.eval import EvalConfig, run_eval
from rewind.eval.observers import StoreRecorder
from rewind.lockstep import EpisodeRecord, run_batch
from rewind.rollout.pool import step_many
from rewind.rollout.workers import EnvFactory, EnvWorkers, RolloutConfig, WorkerError
from rewind.store import ReplayStore, store_spec_for
from rewind.store.verify import verify_store
from rewind.train.policy_api import load_policy

NUDGE = PerturbationConfig(nudge_prob=1.0, nudge_window=(2, 6))
LIFT = EnvFactory(EnvConfig(name="lift", max_steps=16), NUDGE)


def _eval_config(out: Path, policy_path: Path, workers: int, **overrides: Any) -> EvalConfig:
    node = {
        "out_dir": str(out),
        "policy_path": str(policy_path),
        "env": {"name": "lift", "max_steps": 16},
        "episodes": 5,
        "num_envs": 4,
        "perturb": {"nudge_prob": 1.0, "nudge_window": [2, 6]},
        "device": "cpu",
        "num_threads": 1,
        "wandb": {"mode": "disabled"},
        "progress": False,
        "rollout": {"workers": workers},
        **overrides,
    }
    return to_dataclass(node, EvalConfig)


def test_eval_with_two_workers_equals_in_process(tmp_path: Path, tiny_run: dict[str, Path]) -> None:
    extra = {"video": {"episodes": 1}}  # rendered in the worker (MUJOCO_GL=osmesa, as in this process)
    here = run_eval(
        _eval_config(tmp_path / "a", tiny_run["train"], 0, store_out=str(tmp_path / "sa"), **extra)
    )
    there = run_eval(
        _eval_config(tmp_path / "b", tiny_run["train"], 2, store_out=str(tmp_path / "sb"), **extra)
    )
    assert there["rollout_workers"] == 2 and here["rollout_workers"] == 0
    assert [r["seed"] for r in there["records"]] == [0, 1, 2, 3, 4]
    assert all(r["perturbations"] == ["object_nudge"] for r in there["records"])
    (video,) = there["videos"]
    assert Path(video).read_bytes() == Path(here["videos"][0]).read_bytes()
    for r in (*here["records"], *there["records"]):
        r["video"] = Path(r["video"]).name if r["video"] else None
    assert there["records"] == here["records"]
    with ReplayStore.open(tmp_path / "sa") as a, ReplayStore.open(tmp_path / "sb") as b:
        assert len(a) == len(b) == 5
        for ea, eb in zip(a.episodes(), b.episodes(), strict=True):
            x, y = a.load(ea.id), b.load(eb.id)
            assert np.array_equal(x.states, y.states) and np.array_equal(x.actions, y.actions)
            assert all(np.array_equal(x.obs[k], y.obs[k]) for k in x.obs)


def _same_obs(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
    return list(x) == list(y) and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x)


def test_snapshot_restore_through_the_boundary_is_bit_exact() -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (24, 5)).astype(np.float32)
    local = [LIFT(), LIFT()]
    with EnvWorkers(LIFT, 2, 2) as pool:
        for i in range(2):
            assert _same_obs(pool[i].reset(seed=7 + i)[0], local[i].reset(seed=7 + i)[0])
        for t in range(8):
            step_many(pool, [0, 1], [actions[t]] * 2)
            step_many(local, [0, 1], [actions[t]] * 2)
        remote_snap, local_snap = pool[0].snapshot(), local[0].snapshot()
        assert not remote_snap.inner.physics.flags.writeable  # read-only on this side too
        first = [pool[0].step(a) for a in actions[8:20]]  # the nudge fires in this stretch's past
        pool[0].restore(remote_snap)
        local[1].restore(remote_snap)  # a worker's snapshot restores an in-process env as well
        assert pool[0].unwrapped.elapsed_steps == 8
        for t, a in enumerate(actions[8:20]):
            again, reference, crossed = pool[0].step(a), local[0].step(a), local[1].step(a)
            assert _same_obs(again[0], first[t][0]) and again[1:] == first[t][1:]
            assert _same_obs(again[0], reference[0]) and again[1:] == reference[1:]
            assert _same_obs(crossed[0], reference[0])
            assert np.array_equal(pool[0].unwrapped.physics_state(), local[0].unwrapped.physics_state())
        pool[1].restore(local_snap)  # and an in-process snapshot restores a worker's env
        assert np.array_equal(pool[1].unwrapped.physics_state(), local_snap.inner.physics)
        assert pool[0].unwrapped.stage() == local[0].unwrapped.stage()
        assert pool[0].unwrapped.stage_names == local[0].unwrapped.stage_names
        with pytest.raises(KeyError):  # an env's own error comes back as itself; the pool stays usable
            pool[0].unwrapped.object_pos("no_such_object")
        bad = step_many(pool, [1], [np.full(5, np.nan, np.float32)])[0]
        assert bad[0] is None and bad[4]["sim_error"].startswith("action rejected:")
        assert step_many(local, [1], [np.full(5, np.nan, np.float32)])[0][4] == bad[4]


def test_a_persisted_nudge_is_the_same_through_the_boundary() -> None:
    """``nudge_on_restore=persist`` in a worker: the restore re-applies the nudge there, as in process."""
    factory = EnvFactory(
        EnvConfig(name="lift", max_steps=16),
        PerturbationConfig(nudge_prob=1.0, nudge_window=(2, 2), nudge_on_restore="persist"),
    )
    local, zero = factory(), np.zeros(5, np.float32)
    with EnvWorkers(factory, 1, 1) as pool:
        for env in (pool[0], local):
            env.reset(seed=3)
            env.step(zero)
        snaps = [pool[0].snapshot(), local.snapshot()]
        for _ in range(4):  # the nudge fires at step 2
            pool[0].step(zero)
            local.step(zero)
        nudged = local.unwrapped.object_pos("cube").copy()
        pool[0].restore(snaps[0])
        local.restore(snaps[1])
        assert np.array_equal(pool[0].unwrapped.physics_state(), local.unwrapped.physics_state())
        assert np.allclose(pool[0].unwrapped.object_pos("cube")[:2], nudged[:2], atol=2e-3)
        (there,), (here,) = pool[0].step(zero)[4]["perturbation"], local.step(zero)[4]["perturbation"]
        assert there == here and there["persisted"]


class _KillWorker:
    """Observer that SIGKILLs one worker after ``after`` steps of the batch."""

    def __init__(self, pid: int, after: int) -> None:
        self.pid, self.after, self.steps = pid, after, 0

    def on_reset(self, *args: Any) -> None: ...

    def before_step(self, *args: Any) -> None: ...

    def on_end(self, i: int, record: EpisodeRecord) -> None: ...

    def after_step(self, *args: Any) -> None:
        self.steps += 1
        if self.steps == self.after:
            os.kill(self.pid, signal.SIGKILL)


def test_killed_worker_is_one_line_naming_its_seeds_and_commits_nothing_partial(
    tmp_path: Path, tiny_run: dict[str, Path]
) -> None:
    env = LIFT()
    loaded = load_policy(tiny_run["train"], env, "lift", torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    with ReplayStore.create(tmp_path / "store", store_spec_for(env)) as store:
        pool = EnvWorkers(LIFT, 4, 2, start_method="spawn")
        recorder = StoreRecorder(store, loaded.version)
        finished = run_batch(pool, loaded.policy, [0, 1, 2, 3], gen, torch.device("cpu"), [recorder])
        assert len(store) == 4 and [r.seed for r in finished] == [0, 1, 2, 3]
        killer = _KillWorker(pool.pids[1], after=4 * 3)  # worker 1 holds envs 1 and 3
        with pytest.raises(WorkerError) as info:
            run_batch(pool, loaded.policy, [10, 11, 12, 13], gen, torch.device("cpu"), [recorder, killer])
        message = str(info.value)
        assert "\n" not in message and is_user_error(info.value)
        assert message.startswith("environment worker 1 (pid ") and "killed by SIGKILL" in message
        assert message.endswith("while running seeds 11, 13")
        assert pool.closed and all(pid_gone(pid) for pid in pool.pids)  # the other worker stopped too
        with pytest.raises(WorkerError, match="died"):
            pool[0].reset(seed=0)
        assert len(store) == 4 and [e.seed for e in store.episodes()] == [0, 1, 2, 3]
    report = verify_store(tmp_path / "store")
    assert report["ok"] and report["episodes"] == 4 and not report["uncommitted_files"]


def test_close_leaves_no_process_and_no_shared_block() -> None:
    pool = EnvWorkers(LIFT, 3, 2)
    pids, shm = pool.pids, Path("/dev/shm") / pool._res.shm.name.lstrip("/")  # type: ignore[union-attr]
    assert len(pids) == 2 and shm.exists() and not any(pid_gone(p) for p in pids)
    pool[2].reset(seed=1)
    pool.close()
    pool.close()  # twice is fine
    assert all(pid_gone(p) for p in pids) and not shm.exists()
    with pytest.raises(WorkerError, match="closed"):
        pool[2].step(np.zeros(5, np.float32))


def test_rollout_config_and_start_errors() -> None:
    with pytest.raises(ConfigError, match=r"rollout.workers must be in \[0, 256\]; got -1"):
        RolloutConfig(workers=-1)
    with pytest.raises(ConfigError, match=r"rollout.start_method must be one of \[forkserver, spawn\]"):
        RolloutConfig(start_method="fork")
    broken = functools.partial(make_env, "lift", max_steps=-1)
    with pytest.raises(ValueError, match="max_steps must be >= 1; got -1"):  # the worker's error, raised here
        EnvWorkers(broken, 2, 2, start_method="spawn")
