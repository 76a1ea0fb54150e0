"""Monitored rollouts: many episodes of :class:`~rewind.monitor.episode.MonitoredEpisode`, ``B`` envs in
lockstep (:mod:`rewind.monitor.batched`; ``B = 1`` is sequential, with the same results), with a
progress bar, optional videos and optional recording into a replay store (in seed order)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from rewind.lockstep import EpisodeRecord, RolloutObserver
from rewind.monitor.batched import DEFAULT_INFERENCE_ROWS, BatchedMonitoredRunner, EpisodeSlot, StepMany
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult
from rewind.monitor.recording import EpisodeRecording
from rewind.rollout.pool import step_many
from rewind.store import ReplayStore
from rewind.train.policy_api import LoadedPolicy

log = logging.getLogger(__name__)


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


class _Tally:
    """What one running episode has counted so far (``on_step`` of its monitored episode)."""

    def __init__(
        self, slot: EpisodeSlot, recording: EpisodeRecording | None, observers: Sequence[Any]
    ) -> None:
        self.slot, self.recording, self.observers = slot, recording, observers
        self.steps, self.fired = 0, []
        self.max_stage = int(slot.ep.info.get("stage", 0))

    def on_step(self, res: StepResult) -> None:
        self.steps += 1
        self.max_stage = max(self.max_stage, int(res.info.get("stage", -1)))
        self.fired.extend(p.get("type", "?") for p in res.info.get("perturbation", ()))
        if self.recording is not None:
            self.recording.add(res)
        for ob in self.observers:
            ob.after_step(self.slot.index, self.slot.ep.env, 0.0, res.info)


class _Collector:
    """Records, traces and store commits of a batched run, in seed order (episodes end in any order)."""

    def __init__(
        self,
        store: ReplayStore | None,
        version: str,
        round_: int,
        observers: Sequence[RolloutObserver],
        bar: tqdm,
    ) -> None:
        self.store, self.version, self.round, self.observers, self.bar = (
            store,
            version,
            round_,
            observers,
            bar,
        )
        self.tallies: dict[int, _Tally] = {}
        self.ended: dict[int, tuple[MonitoredRecord, list[float | None], EpisodeRecording | None]] = {}
        self.records: list[MonitoredRecord] = []
        self.traces: list[list[float | None]] = []

    def on_start(self, slot: EpisodeSlot, seed: int) -> None:
        """Count the new episode's steps (and record them when there is a store)."""
        tally = _Tally(slot, EpisodeRecording() if self.store is not None else None, self.observers)
        self.tallies[slot.index] = tally
        slot.ep.on_step = tally.on_step
        info = {"stage": slot.ep.info.get("stage", 0), "stage_name": slot.ep.info.get("stage_name", "")}
        for ob in self.observers:
            ob.on_reset(slot.index, slot.ep.env, seed, info)

    def on_end(self, slot: EpisodeSlot) -> None:
        """Close the episode's record; commit every episode whose predecessors are all committed."""
        tally = self.tallies.pop(slot.index)
        slot.ep.on_step = None
        rec = _record(slot.ep, tally.steps, tally.max_stage, tally.fired)
        for ob in self.observers:
            ob.on_end(slot.index, rec)
        self.ended[slot.order] = (rec, list(slot.ep.log.scores), tally.recording)
        while len(self.records) in self.ended:
            rec, trace, recording = self.ended.pop(len(self.records))
            if recording is not None and len(recording):
                extra = {"events": rec.events, "rewinds": rec.rewinds}
                recording.commit(self.store, rec.success, rec.seed, self.version, self.round, extra)
            self.records.append(rec)
            self.traces.append(trace)
        self.bar.update(1)
        self.bar.set_postfix(success=f"{np.mean([r.success for r in self.records] or [0.0]):.2f}")


def run_monitored(
    envs: gym.Env | Sequence[gym.Env],
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
    inference_rows: int = DEFAULT_INFERENCE_ROWS,
    step: StepMany = step_many,
) -> tuple[list[MonitoredRecord], list[list[float | None]]]:
    """Episodes ``seeds`` on ``envs`` (one env: sequential; ``B`` envs: batched, see
    :mod:`rewind.monitor.batched`); returns the records and per-step score traces in seed order.

    Episode ``seed`` samples its policy noise from its own stream, seeded by ``(gen_seed, seed)``
    (:func:`~rewind.utils.seeding.episode_noise_seed`), and inference runs in blocks of
    ``inference_rows`` rows: an episode's record, events, trace and stored steps depend on neither the
    batch size nor the episodes beside or before it (a Ray actor's share of the seeds gives the same
    records), with one torch thread on CPU (with more, a row's result depends on its place in the
    block at float precision). Episodes are committed to ``store`` in seed order; ``observers`` see
    env index ``i``.
    """
    envs = [envs] if isinstance(envs, gym.Env) else list(envs)
    device = next(loaded.policy.parameters()).device
    if device.type == "cpu" and torch.get_num_threads() > 1 and inference_rows > 1:
        log.info(
            "%d torch threads: results equal other batch sizes at float precision, not bit for bit "
            "(num_threads=1 for that)",
            torch.get_num_threads(),
        )
    batch = envs[: max(1, min(len(envs), len(seeds)))]
    runner = BatchedMonitoredRunner(
        batch, loaded.policy, monitor, tracker, rewind, device, gen_seed, inference_rows, step
    )
    with tqdm(total=len(seeds), desc=desc, disable=not progress) as bar:
        out = _Collector(store, loaded.version, round_, observers, bar)
        runner.on_start, runner.on_end = out.on_start, out.on_end
        runner.run([int(s) for s in seeds])
    return out.records, out.traces
