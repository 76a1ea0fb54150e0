"""Batched monitored rollouts over environment workers: the same records, events, score traces and
stored episodes as in-process envs, with restore and drive rewinds through the process boundary; a
worker killed mid-run commits nothing of the unfinished episodes."""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rewind.config import to_dataclass
from rewind.envs.registry import make_env
from rewind.eval import EvalConfig, run_eval
from rewind.monitor import Calibration, Monitor, RewindConfig, build_library, make_score
from rewind.monitor.checkpoints import CheckpointTracker, StageLabeler
from rewind.monitor.rollouts import run_monitored
from rewind.rollout.workers import EnvWorkers, WorkerError
from rewind.store import ReplayStore, store_spec_for
from rewind.store.verify import verify_store
from rewind.train.policy_api import load_policy

MAX_STEPS = 30
SEEDS = list(range(6))
LIFT = functools.partial(make_env, "lift", max_steps=MAX_STEPS)


@pytest.fixture(scope="module")
def parts(tiny_run: dict[str, Path]) -> tuple[Any, Any, Monitor]:
    """The tiny policy, a checkpoint library from its demos, and a monitor that alarms often."""
    env = LIFT()
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    with ReplayStore.open(tiny_run["store"]) as store:
        demos = [store.load(i.id) for i in store.episodes()]
    lib = build_library(loaded.policy, demos, env.unwrapped, StageLabeler(), loaded.weights_hash)
    env.close()
    monitor = Monitor(make_score("tide"), Calibration("tide", 0.5, 1, 2e-3, loaded.weights_hash))
    return loaded, lib, monitor


def _run(parts: tuple, envs: Any, mode: str, store: Any = None, observers: Any = ()) -> tuple[list, list]:
    loaded, lib, monitor = parts
    records, traces = run_monitored(
        envs,
        loaded,
        monitor,
        CheckpointTracker(lib, min_similarity=0.0, patience=1),
        RewindConfig(mode=mode, max_rewinds=2, drive_max_steps=10),
        SEEDS,
        7,
        store,
        observers=observers,
        progress=False,
    )
    return [dataclasses.replace(r, monitor_ms=0.0) for r in records], traces


@pytest.mark.parametrize("mode", ["restore", "drive"])
def test_monitored_batch_over_workers_equals_in_process(parts: tuple, mode: str, tmp_path: Path) -> None:
    env = LIFT()
    spec = store_spec_for(env)
    local = [env, LIFT(), LIFT()]
    with ReplayStore.create(tmp_path / "here", spec) as store:
        here = _run(parts, local, mode, store)
    with EnvWorkers(LIFT, 3, 2) as pool, ReplayStore.create(tmp_path / "there", spec) as store:
        there = _run(parts, pool, mode, store)
    for e in local:
        e.close()
    assert there == here  # records (success, lengths, stages, alarms, checkpoints, rewinds) and traces
    rewinds = [e for r in there[0] for e in r.events if e["kind"] == "rewind"]
    assert rewinds and all(e["mode"] == mode for e in rewinds)
    with ReplayStore.open(tmp_path / "here") as a, ReplayStore.open(tmp_path / "there") as b:
        assert len(a) == len(b) == len(SEEDS)
        for ea, eb in zip(a.episodes(), b.episodes(), strict=True):
            x, y = a.load(ea.id), b.load(eb.id)
            assert np.array_equal(x.states, y.states) and np.array_equal(x.actions, y.actions)
            assert list(x.sources) == list(y.sources)


class _Kill:
    """Observer that SIGKILLs worker ``w`` of ``pool`` at the ``after``-th step it sees."""

    def __init__(self, pool: EnvWorkers, w: int, after: int) -> None:
        self.pool, self.w, self.after, self.steps = pool, w, after, 0

    def on_reset(self, *args: Any) -> None: ...

    def on_end(self, *args: Any) -> None: ...

    def after_step(self, *args: Any) -> None:
        self.steps += 1
        if self.steps == self.after:
            os.kill(self.pool.pids[self.w], signal.SIGKILL)


def test_killed_worker_in_a_monitored_run_commits_no_unfinished_episode(parts: tuple, tmp_path: Path) -> None:
    env = LIFT()
    with EnvWorkers(LIFT, 3, 2) as pool, ReplayStore.create(tmp_path / "s", store_spec_for(env)) as store:
        with pytest.raises(
            WorkerError, match=r"^environment worker 0 \(pid \d+\) died \(killed by SIGKILL\)"
        ):
            _run(parts, pool, "restore", store, observers=[_Kill(pool, 0, after=3 * 5)])
        committed = [e.seed for e in store.episodes()]
    env.close()
    assert committed == []  # no episode had ended: none reaches the store, not even in part
    report = verify_store(tmp_path / "s")
    assert report["ok"] and not report["uncommitted_files"]


def test_monitored_eval_with_two_workers_equals_in_process(
    parts: tuple, tmp_path: Path, tiny_run: dict
) -> None:
    loaded = parts[0]
    cal = tmp_path / "cal"  # a threshold every score crosses: alarms and drive rewinds in every episode
    Calibration(
        "tide",
        0.5,
        1,
        1e-12,
        loaded.weights_hash,
        score_params={"dims": None},
        env="lift",
        n_action_steps=loaded.policy.n_action_steps,
    ).save(cal)
    summaries = []
    for workers in (0, 2):
        (tmp_path / f"ev{workers}").mkdir()  # the CLI makes out_dir; run_eval writes the rewind plots there
        node = {
            "out_dir": str(tmp_path / f"ev{workers}"),
            "policy_path": str(tiny_run["train"]),
            "env": {"name": "lift", "max_steps": 16},
            "episodes": 4,
            "monitor": {"score": "tide", "calibration": str(cal)},
            "rewind": {"mode": "drive", "max_rewinds": 2, "drive_max_steps": 5},
            "rollout": {"workers": workers, "batch_size": 3},
            "store_out": str(tmp_path / f"store{workers}"),
            "device": "cpu",
            "wandb": {"mode": "disabled"},
            "progress": False,
        }
        summaries.append(run_eval(to_dataclass(node, EvalConfig)))
    here, there = ([dict(r) for r in s["records"]] for s in summaries)
    for r in (*here, *there):
        r.pop("monitor_ms", None)
    assert there == here and any(r["rewinds"] for r in there)
    assert summaries[1]["monitor"]["rewinds"] == summaries[0]["monitor"]["rewinds"] > 0
    with ReplayStore.open(tmp_path / "store0") as a, ReplayStore.open(tmp_path / "store2") as b:
        assert [e.content_sha256 for e in a.episodes()] == [e.content_sha256 for e in b.episodes()]
