"""Monitored rollouts: many episodes of :class:`~rewind.monitor.episode.MonitoredEpisode`, one env at a
time (each env has its own policy queue, so a rewind of one never disturbs another), with a progress
bar, optional videos and optional recording into a replay store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from rewind.lockstep import EpisodeRecord, RolloutObserver
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult
from rewind.monitor.recording import EpisodeRecording
from rewind.store import ReplayStore
from rewind.train.policy_api import LoadedPolicy
from rewind.utils.seeding import episode_noise_seed, torch_generator


@dataclass
class MonitoredRecord(EpisodeRecord):
    """An evaluation record plus what the monitor did.

    Attributes:
        rewinds: rewinds performed; alarms: alarms raised; operator_steps: steps not by the policy.
        events: the event log (alarm / checkpoint / rewind dicts).
        monitor_ms: mean monitor + tracking cost per policy step (ms).
    """

    rewinds: int = 0
    alarms: int = 0
    operator_steps: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    monitor_ms: float = 0.0


def _record(ep: MonitoredEpisode, steps: int, max_stage: int, perturbations: list[str]) -> MonitoredRecord:
    log = ep.finish()
    return MonitoredRecord(
        seed=log.seed,
        success=ep.success,
        length=steps,
        last_stage=int(ep.info.get("stage", -1)),
        max_stage=max_stage,
        sim_error=ep.info.get("sim_error"),
        perturbations=perturbations,
        rewinds=log.rewinds,
        alarms=sum(e["kind"] == "alarm" for e in log.events),
        operator_steps=log.external_steps,
        events=log.events,
        monitor_ms=1e3 * log.monitor_time_s / max(log.monitor_calls, 1),
    )


def run_monitored_episode(
    ep: MonitoredEpisode,
    seed: int,
    recording: EpisodeRecording | None = None,
    observers: Sequence[RolloutObserver] = (),
) -> MonitoredRecord:
    """One episode under the policy, auto-rewinding as configured; every step goes to ``recording``."""
    ep.reset(seed)
    info = {"stage": ep.info.get("stage", 0), "stage_name": ep.info.get("stage_name", "")}
    for ob in observers:
        ob.on_reset(0, ep.env, seed, info)
    steps, max_stage, fired = 0, int(info["stage"]), []

    def on_step(res: StepResult) -> None:
        nonlocal steps, max_stage
        steps += 1
        max_stage = max(max_stage, int(res.info.get("stage", -1)))
        fired.extend(p.get("type", "?") for p in res.info.get("perturbation", ()))
        if recording is not None:
            recording.add(res)
        for ob in observers:
            ob.after_step(0, ep.env, 0.0, res.info)

    ep.on_step = on_step
    while not ep.done:
        ep.policy_step()
    return _record(ep, steps, max_stage, fired)


def run_monitored(
    env: gym.Env,
    loaded: LoadedPolicy,
    monitor: Monitor | None,
    tracker: CheckpointTracker | None,
    rewind: RewindConfig,
    seeds: Sequence[int],
    gen_seed: int,
    store: ReplayStore | None = None,
    round_: int = 0,
    observers: Sequence[RolloutObserver] = (),
    progress: bool = True,
    desc: str = "monitored",
) -> tuple[list[MonitoredRecord], list[list[float | None]]]:
    """Episodes ``seeds`` in order; returns the records and each episode's per-step score trace.

    Episode ``seed`` samples its policy noise from its own stream, seeded by ``(gen_seed, seed)``
    (:func:`~rewind.utils.seeding.episode_noise_seed`): its result does not depend on the episodes run
    before it, so a subset of the seeds (a Ray actor's share) gives the same records."""
    device = next(loaded.policy.parameters()).device
    ep = MonitoredEpisode(env, loaded.policy, monitor, tracker, rewind, device)
    records, traces = [], []
    bar = tqdm(seeds, desc=desc, disable=not progress)
    for seed in bar:
        rec = EpisodeRecording() if store is not None else None
        ep.generator = torch_generator(episode_noise_seed(gen_seed, seed), device)
        records.append(run_monitored_episode(ep, int(seed), rec, observers))
        traces.append(list(ep.log.scores))
        if rec is not None and len(rec):
            extra = {"events": records[-1].events, "rewinds": records[-1].rewinds}
            rec.commit(store, records[-1].success, int(seed), loaded.version, round_, extra)
        for ob in observers:
            ob.on_end(0, records[-1])
        bar.set_postfix(success=f"{np.mean([r.success for r in records]):.2f}")
    return records, traces
