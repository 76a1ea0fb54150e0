"""``rollout.backend=ray`` on a local Ray cluster with 2 CPUs, real MuJoCo and the session's tiny policy:
records and stored episodes equal the local backend's (with and without a monitor); an actor killed
mid-run has its seeds run again and the store gets each episode exactly once; a unit whose actors keep
dying ends in a one-line error; an actor that hangs (in a unit, or while it starts) is killed after
``rollout.unit_timeout_s`` and its seeds run again, within the same bounded retries; an error raised in an
actor reaches the driver as it was."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.train import run_cli

ray = pytest.importorskip("ray")

from rewind.config import ConfigError, to_dataclass  # noqa: E402
from rewind.envs.registry import make_env  # noqa: E402
from rewind.eval.config import EvalConfig  # noqa: E402
from rewind.eval.runner import run_eval  # noqa: E402
from rewind.eval.sharded import EvalJob, UnitResult, units_of  # noqa: E402
from rewind.monitor import Calibration  # noqa: E402
from rewind.rollout import ray_backend  # noqa: E402
from rewind.rollout.ray_backend import RayOptions, RayRolloutError, RayShards  # noqa: E402
from rewind.scripts.eval import main as eval_main  # noqa: E402
from rewind.store import ReplayStore, store_spec_for  # noqa: E402
from rewind.train.policy_api import load_policy  # noqa: E402

MAX_STEPS = 16


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster with 2 CPUs for this module (the backend uses it as it is)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test jobs below
    yield ray
    if started:
        ray.shutdown()


def _cfg(tiny_run: dict[str, Path], out: Path, **overrides: Any) -> EvalConfig:
    node = {
        "policy_path": str(tiny_run["train"]),
        "env": {"name": "lift", "max_steps": MAX_STEPS},
        "episodes": 5,
        "num_envs": 2,
        "device": "cpu",
        "num_threads": 1,
        "store_out": str(out / "store"),
        "out_dir": str(out),
        "wandb": {"mode": "disabled"},
        "progress": False,
        **overrides,
    }
    return to_dataclass(node, EvalConfig)


def _always_alarm(tiny_run: dict[str, Path], folder: Path) -> Path:
    env = make_env("lift")
    loaded = load_policy(str(tiny_run["train"]), env, "lift", torch.device("cpu"))
    env.close()
    n = loaded.policy.n_action_steps
    cal = Calibration("tide", 0.5, 1, 1e-12, loaded.weights_hash, score_params={"dims": None}, env="lift")
    cal.n_action_steps = n
    cal.save(folder)
    return folder


def _comparable(records: list[Any]) -> list[dict[str, Any]]:
    """Records as dicts without the timing field."""
    return [
        {k: v for k, v in (r if isinstance(r, dict) else asdict(r)).items() if k != "monitor_ms"}
        for r in records
    ]


def _stored(path: Path) -> list[tuple[Any, ...]]:
    """Every episode of a store: its metadata and arrays, in store order."""
    with ReplayStore.open(path) as store:
        out = []
        for info in store.episodes():
            ep = store.load(info.id)
            meta = (info.seed, info.success, info.n_operator_steps, info.extra, info.policy_version)
            out.append((meta, ep.actions, ep.states, ep.sources, ep.obs))
        return out


def _assert_same_stores(a: Path, b: Path) -> None:
    sa, sb = _stored(a), _stored(b)
    assert [e[0] for e in sa] == [e[0] for e in sb]
    for ea, eb in zip(sa, sb, strict=True):
        for x, y in zip(ea[1:4], eb[1:4], strict=True):
            np.testing.assert_array_equal(x, y)
        assert all(np.array_equal(ea[4][k], eb[4][k]) for k in ea[4])


def _spec(cfg: EvalConfig):
    env = make_env("lift", max_steps=MAX_STEPS)
    try:
        return store_spec_for(env)
    finally:
        env.close()


def test_rewind_eval_with_a_monitor_on_ray_equals_local(cluster, tiny_run, tmp_path) -> None:
    """The command end to end: 3 episodes batched locally (B=3), one per unit on 2 actors."""
    cal = _always_alarm(tiny_run, tmp_path / "cal")
    args = [
        f"policy_path={tiny_run['train']}",
        "env=lift",
        f"env.max_steps={MAX_STEPS}",
        "episodes=3",
        "device=cpu",
        "monitor=tide",
        f"monitor.calibration={cal}",
        "rewind=restore",
        "rewind.max_rewinds=1",
        "wandb.mode=disabled",
        "progress=false",
    ]
    for name, extra in (("local", []), ("ray", ["rollout.backend=ray"])):
        assert (
            run_cli(
                eval_main,
                [*args, *extra, f"out_dir={tmp_path / name}", f"store_out={tmp_path / name / 'store'}"],
            )
            == 0
        )
    local, on_ray = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("local", "ray"))
    assert _comparable(on_ray["records"]) == _comparable(local["records"])
    assert [r["rewinds"] for r in on_ray["records"]] == [1, 1, 1]  # restore rewinds ran in the actors
    assert on_ray["ray"]["restarts"] == 0 and on_ray["ray"]["actors"] == 2 and "ray" not in local
    assert on_ray["monitor"]["rewinds"] == local["monitor"]["rewinds"] == 3
    _assert_same_stores(tmp_path / "local" / "store", tmp_path / "ray" / "store")


def test_episode_noise_streams_on_ray_equal_local(cluster, tiny_run, tmp_path) -> None:
    """``noise_streams=episode`` without a monitor: the actors draw each episode's own stream."""
    local = run_eval(_cfg(tiny_run, tmp_path / "local", noise_streams="episode", ddim_eta=1.0))
    rollout = {"backend": "ray", "actors": 2}
    on_ray = run_eval(
        _cfg(tiny_run, tmp_path / "ray", noise_streams="episode", ddim_eta=1.0, rollout=rollout)
    )
    assert on_ray["noise_streams"] == "episode" and on_ray["ray"]["actors"] == 2
    assert _comparable(on_ray["records"]) == _comparable(local["records"])
    _assert_same_stores(tmp_path / "local" / "store", tmp_path / "ray" / "store")


class _GatedJob:
    """:class:`EvalJob` whose units holding ``gated`` seeds wait until ``gate`` exists, so the test
    can kill the actor while it is certainly inside that unit (no race with its finishing)."""

    def __init__(self, job: EvalJob, gated: list[int], gate: Path) -> None:
        self.job, self.gated, self.gate = job, gated, gate

    def build(self) -> _GatedJob:
        self.runner = self.job.build()
        return self

    def run(self, seeds: list[int]) -> Any:
        if list(seeds) == self.gated:
            for _ in range(1200):  # at most 60 s, then run anyway (the test then fails on restarts)
                if self.gate.exists():
                    break
                time.sleep(0.05)
        return self.runner.run(seeds)


def test_lockstep_ray_equals_local_with_an_actor_killed_mid_run(cluster, tiny_run, tmp_path) -> None:
    local = run_eval(_cfg(tiny_run, tmp_path / "local", episodes=8, num_envs=2))
    cfg = _cfg(tiny_run, tmp_path / "ray", episodes=8, num_envs=2)  # 4 lockstep batches of 2
    units, gate = units_of(cfg), tmp_path / "gate"
    records: list[Any] = []
    with (
        ReplayStore.create(cfg.store_out, _spec(cfg)) as store,
        RayShards(_GatedJob(EvalJob(cfg), list(units[1]), gate), RayOptions()) as shards,
    ):

        def on_result(i: int, res: UnitResult) -> None:
            if i == 0:  # mid-run: actor 1 is held inside unit 1 by the gate, more units are queued
                assert shards.running[1] == list(units[1])
                cluster.kill(shards.actors[1])
                gate.touch()  # the unit's rerun on the fresh actor goes through
            for episode in res.episodes:  # the driver alone writes
                episode.commit_into(store)
            records.extend(res.records)

        shards.wait_ready()
        shards.run(units, on_result)
        assert shards.restarts == 1
    assert _comparable(records) == _comparable(local["records"])
    assert sorted(e[0][0] for e in _stored(Path(cfg.store_out))) == list(range(8))  # each exactly once
    _assert_same_stores(tmp_path / "local" / "store", Path(cfg.store_out))


class _DyingJob:
    """A job whose actor process dies in every unit (as if killed by the OS)."""

    def build(self) -> _DyingJob:
        return self

    def run(self, seeds: list[int]) -> None:
        os._exit(1)


def test_retries_are_bounded(cluster) -> None:
    with RayShards(_DyingJob(), RayOptions(actors=1, max_retries=1)) as shards:
        with pytest.raises(RayRolloutError, match=r"seeds \[7\]: their Ray actor died 2 time\(s\)") as exc:
            shards.run([[7], [8]], lambda i, r: None)
        assert shards.restarts == 1
    assert "\n" not in str(exc.value)


class _HangingJob:
    """A job whose actor hangs in the units holding ``seed`` (with ``once``, a marker file: only the first
    time, so the rerun on a fresh actor finishes), or, with ``in_build``, while it starts."""

    def __init__(self, seed: int = -1, once: Path | None = None, in_build: bool = False) -> None:
        self.seed, self.once, self.in_build = seed, once, in_build

    def build(self) -> _HangingJob:
        if self.in_build:
            time.sleep(3600)
        return self

    def run(self, seeds: list[int]) -> list[int]:
        if self.seed in seeds and not (self.once and self.once.exists()):
            if self.once:
                self.once.touch()
            time.sleep(3600)
        return [10 * s for s in seeds]


def test_a_hung_actor_is_killed_and_its_seeds_run_again(cluster, tmp_path) -> None:
    results: list[Any] = []
    options = RayOptions(actors=2, unit_timeout_s=2)
    with RayShards(_HangingJob(8, once=tmp_path / "hung"), options) as shards:
        shards.run([[7], [8], [9]], lambda i, r: results.append((i, r)))
        assert shards.restarts == 1
    assert (tmp_path / "hung").exists()  # unit [8] did hang once
    assert results == [(0, [70]), (1, [80]), (2, [90])]  # each unit once, in order, the rerun's result


def test_an_actor_that_keeps_hanging_is_one_line_naming_its_seeds(cluster) -> None:
    with RayShards(_HangingJob(7), RayOptions(actors=1, max_retries=1, unit_timeout_s=1)) as shards:
        first = shards.actors[0]
        with pytest.raises(RayRolloutError) as exc:
            shards.run([[7], [8]], lambda i, r: None)
        assert shards.restarts == 1
        with pytest.raises(ray.exceptions.RayActorError):  # the hung actor was killed, not left running
            ray.get(first.ready.remote(), timeout=60)
    assert str(exc.value) == (
        "seeds [7]: their Ray actor hung 2 time(s) (no result within rollout.unit_timeout_s=1 s; "
        "killed), more than rollout.max_retries=1"
    )


def test_an_actor_that_never_starts_is_killed_within_the_start_timeout(cluster, monkeypatch) -> None:
    monkeypatch.setattr(ray_backend, "ACTOR_START_S", 1.0)
    with RayShards(
        _HangingJob(in_build=True), RayOptions(actors=1, max_retries=0, unit_timeout_s=1)
    ) as shards:
        with pytest.raises(RayRolloutError) as exc:
            shards.run([[3]], lambda i, r: None)
    assert str(exc.value) == (
        "seeds [3]: their Ray actor did not start 1 time(s) (not ready within 1 s; killed), "
        "more than rollout.max_retries=0"
    )


class _FailingJob:
    """A job whose build fails as it would on a node without the run folder."""

    def build(self) -> None:
        raise ConfigError("policy_path does not exist: /not/on/this/node")


def test_an_error_in_the_actor_arrives_as_it_was(cluster) -> None:
    with RayShards(_FailingJob(), RayOptions(actors=1)) as shards:
        with pytest.raises(ConfigError, match="policy_path does not exist: /not/on/this/node"):
            shards.run([[0]], lambda i, r: None)
        assert shards.restarts == 0
