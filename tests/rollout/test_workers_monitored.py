"""Batched monitored rollouts over environment workers: the same records, events, score traces and
stored episodes as in-process envs, with restore and drive rewinds through the process boundary; a
worker killed mid-run commits nothing of the unfinished episodes."""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.monitor import ALWAYS, MAX_STEPS, TinyMonitor, run_tiny_monitored

from rewind.config import to_dataclass
from rewind.envs.registry import make_env
from rewind.eval import EvalConfig, run_eval
from rewind.rollout.workers import EnvWorkers, WorkerError
from rewind.store import ReplayStore, store_spec_for
from rewind.store.verify import verify_store

SEEDS = list(range(6))
LIFT = functools.partial(make_env, "lift", max_steps=MAX_STEPS)


def _run(
    tiny: TinyMonitor, envs: Any, mode: str, store: Any = None, observers: Any = ()
) -> tuple[list, list]:
    return run_tiny_monitored(tiny, envs, mode, SEEDS, store, observers=observers)


@pytest.mark.parametrize("mode", ["restore", "drive"])
def test_monitored_batch_over_workers_equals_in_process(
    tiny_monitor: TinyMonitor, mode: str, tmp_path: Path
) -> None:
    env = LIFT()
    spec = store_spec_for(env)
    local = [env, LIFT(), LIFT()]
    with ReplayStore.create(tmp_path / "here", spec) as store:
        here = _run(tiny_monitor, local, mode, store)
    with EnvWorkers(LIFT, 3, 2) as pool, ReplayStore.create(tmp_path / "there", spec) as store:
        there = _run(tiny_monitor, pool, mode, store)
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


def test_killed_worker_in_a_monitored_run_commits_no_unfinished_episode(
    tiny_monitor: TinyMonitor, tmp_path: Path
) -> None:
    env = LIFT()
    with EnvWorkers(LIFT, 3, 2) as pool, ReplayStore.create(tmp_path / "s", store_spec_for(env)) as store:
        with pytest.raises(
            WorkerError, match=r"^environment worker 0 \(pid \d+\) died \(killed by SIGKILL\)"
        ):
            _run(tiny_monitor, pool, "restore", store, observers=[_Kill(pool, 0, after=3 * 5)])
        committed = [e.seed for e in store.episodes()]
    env.close()
    assert committed == []  # no episode had ended: none reaches the store, not even in part
    report = verify_store(tmp_path / "s")
    assert report["ok"] and not report["uncommitted_files"]


def test_monitored_eval_with_two_workers_equals_in_process(
    tiny_monitor: TinyMonitor, tmp_path: Path, tiny_run: dict
) -> None:
    cal = tiny_monitor.calibrations[
        ALWAYS
    ]  # every score crosses it: alarms and drive rewinds in every episode
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
