"""The loop's batched collection (rewind.loop.batched_collect) with the tiny policy in real MuJoCo: for
operator (RaC, drive rewinds), dagger (stall triggers, hand-back) and retry (restore rewinds), a batch
of 4 gives the same outcomes, events, source report and stored episodes as B = 1; at B = 1 unpadded it
is the sequential collect_episodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers.monitor import MAX_STEPS

from rewind.config import to_dataclass
from rewind.envs.config import EnvConfig
from rewind.envs.registry import make_env
from rewind.loop.batched_collect import collect_batched, collect_round
from rewind.loop.config import RecoveryConfig
from rewind.loop.episodes import CollectRules, collect_episodes, summarize_outcomes
from rewind.loop.sources import make_source
from rewind.monitor import Monitor, MonitoredEpisode, RewindConfig, make_score
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.progress import START, ProgressWatchdog
from rewind.rollout.config import RolloutConfig
from rewind.rollout.workers import EnvFactory
from rewind.store import ReplayStore, store_spec_for

#: TIDE threshold inside the tiny policy's range of scores: episodes alarm at different steps, or never
THRESHOLD = 1.5
SEEDS = list(range(6))  # more than 4: the batch refills
SOURCES = {
    "operator": {"name": "operator", "after": "end", "max_correction_steps": 12},
    "dagger": {
        "name": "dagger",
        "after": "handback",
        "max_interventions": 2,
        "max_correction_steps": 5,
        "stall_steps": 8,
        "keep": "all",
    },
    "retry": {"name": "retry", "rewind_mode": "restore", "max_interventions": 2, "keep": "all"},
}


def _parts(tiny, recovery: dict, threshold: float = THRESHOLD, progress: ProgressWatchdog | None = None):
    rc = to_dataclass(recovery, RecoveryConfig)
    rules = CollectRules(rc.keep, rc.pre_intervention_steps, rc.max_interventions, rc.stall_steps)
    calibration = dataclasses.replace(tiny.monitor.calibration, threshold=threshold)
    monitor = Monitor(make_score("tide"), calibration, progress)
    tracker = CheckpointTracker(tiny.library, min_similarity=0.0, patience=1)
    rewind = RewindConfig(mode=rc.rewind_mode, max_rewinds=10**6, auto_rewind=False, drive_max_steps=10)
    return rc, rules, monitor, tracker, rewind


def _stored(path: Path) -> list[tuple]:
    with ReplayStore.open(path) as store:
        rows = []
        for i in store.episodes():
            ep = store.load(i.id)
            rows.append((i.id, i.seed, i.length, i.success, i.extra, i.source_counts, i.content_sha256))
            rows.append(tuple(ep.source_names))
        return rows


def _collect(
    tiny, recovery: dict, batch: int, store_path: Path, inference_rows: int = 10, seeds=SEEDS, **scoring
):
    rc, rules, monitor, tracker, rewind = _parts(tiny, recovery, **scoring)
    source = make_source(rc, "lift")
    envs = [make_env("lift", max_steps=MAX_STEPS) for _ in range(batch)]
    loaded = tiny.loaded
    try:
        with ReplayStore.create(store_path, store_spec_for(envs[0])) as store:
            outcomes = collect_batched(
                envs,
                loaded.policy,
                monitor,
                tracker,
                rewind,
                source,
                seeds,
                store,
                rules,
                loaded.version,
                1,
                inference_rows,
            )
    finally:
        for env in envs:
            env.close()
    return outcomes, source.report(), _stored(store_path)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_batch_of_4_equals_one_at_a_time(tiny_monitor, tmp_path: Path, name: str) -> None:
    one = _collect(tiny_monitor, SOURCES[name], 1, tmp_path / "b1")
    four = _collect(tiny_monitor, SOURCES[name], 4, tmp_path / "b4")
    outcomes = four[0]
    assert [o.seed for o in outcomes] == SEEDS
    assert four == one  # outcomes with events, the source's report, stored content and labels
    assert sum(o.interventions for o in outcomes) >= 2 and any(o.kept for o in outcomes)
    kinds = {e["kind"] for o in outcomes for e in o.events}
    assert {"alarm", "intervention"} <= kinds
    if name == "operator":
        assert "rewind" in kinds and any(o.source_counts.get("recovery") for o in outcomes)
        assert any(o.ended_by == "source" for o in outcomes) and one[1]["operator_time_s"] > 0
    if name == "dagger":
        assert sum(o.stalls for o in outcomes) > 0 and "rewind" not in kinds
    if name == "retry":
        assert "rewind" in kinds and all(o.operator_steps == 0 for o in outcomes)


def test_the_progress_watchdog_alone_triggers_the_operator(tiny_monitor, tmp_path: Path) -> None:
    """With the score never alarming and no stall trigger, only the progress watchdog can call the
    operator in: its interventions say so, and batched equals one at a time."""
    never = {"threshold": float("inf")}
    limits = {name: 6.0 for name in [START, *tiny_monitor.library.names]}
    watchdog = {"progress": ProgressWatchdog(limits, 0.1), **never}
    recovery = SOURCES["operator"]
    quiet = _collect(tiny_monitor, recovery, 4, tmp_path / "quiet", **never)
    assert all(o.interventions == 0 and o.alarms == 0 for o in quiet[0])
    one = _collect(tiny_monitor, recovery, 1, tmp_path / "b1", **watchdog)
    four = _collect(tiny_monitor, recovery, 4, tmp_path / "b4", **watchdog)
    assert four == one
    triggers = [e.get("trigger") for o in four[0] for e in o.events if e["kind"] == "intervention"]
    assert triggers and set(triggers) == {"progress"}
    assert summarize_outcomes(four[0])["triggers"] == {"progress": len(triggers)}
    alarms = [e for o in four[0] for e in o.events if e["kind"] == "alarm"]
    assert alarms and all(e["reason"] == "progress" and e["steps"] > e["limit"] for e in alarms)
    assert any(o.source_counts.get("correction") for o in four[0])


def test_at_b1_unpadded_it_is_the_sequential_collection(tiny_monitor, tmp_path: Path) -> None:
    recovery = SOURCES["operator"]
    batched = _collect(tiny_monitor, recovery, 1, tmp_path / "batched", inference_rows=0)
    rc, rules, monitor, tracker, rewind = _parts(tiny_monitor, recovery)
    source = make_source(rc, "lift")
    env, loaded = make_env("lift", max_steps=MAX_STEPS), tiny_monitor.loaded

    def make() -> MonitoredEpisode:
        return MonitoredEpisode(env, loaded.policy, monitor, tracker, rewind)

    try:
        with ReplayStore.create(tmp_path / "seq", store_spec_for(env)) as store:
            outcomes = collect_episodes(make, source, SEEDS, store, rules, loaded.version, 1)
    finally:
        env.close()
    assert (outcomes, source.report(), _stored(tmp_path / "seq")) == batched


def test_a_source_that_is_not_batchable_is_refused(tiny_monitor) -> None:
    rc, rules, monitor, tracker, rewind = _parts(tiny_monitor, {"name": "human", "person": "scripted"})
    with pytest.raises(ValueError, match="'human' is not batchable"):
        collect_batched(
            [],
            tiny_monitor.loaded.policy,
            monitor,
            tracker,
            rewind,
            make_source(rc, "lift"),
            SEEDS,
            None,
            rules,
            "v",
            1,
        )


def test_collect_round_over_env_workers_equals_in_process(tiny_monitor, tmp_path: Path) -> None:
    """The operator reads its env through the worker's proxy (RemoteTask) and drives it step by step."""

    recovery = SOURCES["operator"]
    rc, rules, monitor, tracker, rewind = _parts(tiny_monitor, recovery)
    source = make_source(rc, "lift")
    factory = EnvFactory(EnvConfig(name="lift", max_steps=MAX_STEPS))
    env, loaded = factory(), tiny_monitor.loaded
    rollout = RolloutConfig(workers=2, batch_size=2, step_timeout_s=60.0)
    try:
        with ReplayStore.create(tmp_path / "w", store_spec_for(env)) as store:
            outcomes = collect_round(
                env,
                factory,
                rollout,
                loaded.policy,
                monitor,
                tracker,
                rewind,
                source,
                SEEDS[:4],
                store,
                rules,
                loaded.version,
                1,
            )
    finally:
        env.close()
    assert (outcomes, source.report(), _stored(tmp_path / "w")) == _collect(
        tiny_monitor, recovery, 1, tmp_path / "b1", seeds=SEEDS[:4]
    )
    assert any(o.source_counts.get("correction") for o in outcomes)
