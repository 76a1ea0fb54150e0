"""A round's collection in lockstep batches: ``B`` episodes of the current policy under the monitor,
with a recovery source acting on alarms, one batched policy inference per tick.

The episodes run on :class:`~rewind.monitor.batched.BatchedMonitoredRunner` (its rollout state, noise
stream, score state and checkpoint tracking per episode; inference in blocks of ``inference_rows``).
After every policy step the runner hands the step to this module, which takes the decisions of the
sequential :func:`~rewind.loop.episodes.run_episode` with the same
:class:`~rewind.loop.episodes.TriggerState`: count alarms and stalls and, on a trigger, let the source
act. An intervention (a rewind, the scripted operator's correction) runs to its end inside that tick,
on its own env, with the episode's policy state and the source's per-episode state
(:meth:`~rewind.loop.sources.RecoverySource.episode_state`) swapped in; the other episodes are not
touched and take their next step in the next tick. Episodes are kept and committed in seed order.

**Equality.** Episode ``seed``'s noise stream is seeded by ``seed`` (as the sequential path's
generator), so for the same seeds and ``inference_rows`` the outcomes (events included), the source's
report and the stored episodes (content, labels, ``extra``, ids) are bit-identical for every batch
size; at ``B = 1`` with ``inference_rows = 0`` this is step for step
:func:`~rewind.loop.episodes.collect_episodes` (``tests/loop/test_batched_collect.py``). Sources with
``batchable = False`` (``human``, ``guided``) keep the sequential path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from rewind.loop.episodes import (
    CollectRules,
    EpisodeOutcome,
    TriggerState,
    collect_episodes,
    episode_outcome,
    keep_and_commit,
)
from rewind.loop.sources import LoopRecording, RecoverySource
from rewind.monitor.batched import DEFAULT_INFERENCE_ROWS, BatchedMonitoredRunner, EpisodeSlot, StepMany
from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult
from rewind.policies.base import ActionChunkPolicy
from rewind.rollout.config import RolloutConfig
from rewind.rollout.pool import step_many
from rewind.rollout.workers import open_envs
from rewind.store import ReplayStore


@dataclass
class _Running:
    """What the collection keeps for the episode running on one env."""

    seed: int
    recording: LoopRecording
    trigger: TriggerState
    source_state: tuple[int, int, int]


@dataclass
class _Ended:
    """An ended episode waiting for its predecessors (commits go in seed order)."""

    outcome: EpisodeOutcome
    recording: LoopRecording
    operator_time_s: float


class _LoopCollector:
    """The runner's hooks: per-episode recording and triggers, the source's state swapped per episode,
    keep rules and store commits in seed order."""

    def __init__(
        self,
        source: RecoverySource,
        rules: CollectRules,
        store: ReplayStore | None,
        policy_version: str,
        round_: int,
        bar: tqdm,
    ) -> None:
        self.source, self.rules, self.store, self.bar = source, rules, store, bar
        self.version, self.round = policy_version, round_
        self.running: dict[int, _Running] = {}
        self.ended: dict[int, _Ended] = {}
        self.outcomes: list[EpisodeOutcome] = []

    @contextlib.contextmanager
    def _source_of(self, run: _Running) -> Iterator[None]:
        """The source holds ``run``'s per-episode state inside the block (and gives it back after)."""
        self.source.set_episode_state(run.source_state)
        try:
            yield
        finally:
            run.source_state = self.source.episode_state()

    def on_start(self, slot: EpisodeSlot, seed: int) -> None:
        """A new episode on ``slot`` (after its reset): recording, triggers, the source's ``begin``."""
        rec = LoopRecording(self.rules.pre_intervention_steps, self.source.counted)
        trigger = TriggerState(self.rules.max_interventions, self.rules.stall_steps)
        run = _Running(seed, rec, trigger, self.source.episode_state())
        self.running[slot.index] = run
        slot.ep.on_step = rec.add
        with self._source_of(run):
            self.source.begin(slot.ep, seed)
        trigger.start(slot.ep)

    def on_policy_step(self, slot: EpisodeSlot, res: StepResult) -> bool:
        """After a policy step: count it; on a trigger the source acts (to the end of its intervention)."""
        run = self.running[slot.index]
        with self._source_of(run):
            return run.trigger.after_policy_step(slot.ep, res, self.source, run.recording)

    def on_end(self, slot: EpisodeSlot) -> None:
        """Close the episode's outcome; keep and commit every episode whose predecessors are done."""
        run, ep = self.running.pop(slot.index), slot.ep
        ep.on_step = None
        with self._source_of(run):
            outcome = episode_outcome(ep, self.source, run.seed, run.recording, run.trigger)
        self.ended[slot.order] = _Ended(outcome, run.recording, self.source.episode_operator_time(ep))
        while len(self.outcomes) in self.ended:
            done = self.ended.pop(len(self.outcomes))
            self.source.operator_time_s += done.operator_time_s  # in seed order, as the sequential sum
            keep_and_commit(
                done.outcome,
                done.recording,
                self.store,
                self.rules.keep,
                self.source.name,
                self.version,
                self.round,
            )
            self.outcomes.append(done.outcome)
        self.bar.update(1)
        kept = sum(o.kept for o in self.outcomes)
        self.bar.set_postfix(success=f"{np.mean([o.success for o in self.outcomes] or [0.0]):.2f}", kept=kept)


def collect_batched(
    envs: Sequence[gym.Env],
    policy: ActionChunkPolicy,
    monitor: Monitor | None,
    tracker: CheckpointTracker | None,
    rewind: RewindConfig,
    source: RecoverySource,
    seeds: Sequence[int],
    store: ReplayStore | None,
    rules: CollectRules,
    policy_version: str,
    round_: int,
    inference_rows: int = DEFAULT_INFERENCE_ROWS,
    progress: bool = False,
    step: StepMany = step_many,
) -> list[EpisodeOutcome]:
    """Episodes ``seeds`` on ``envs`` in lockstep (see the module docstring) under ``rules``; ``rewind``
    must not auto-rewind (what an alarm does is the source's decision). Returns the outcomes in seed order; the
    kept episodes are committed to ``store`` in seed order.

    Raises:
        ValueError: ``source`` is not batchable, or ``rewind.auto_rewind`` is on.
    """
    if not source.batchable:
        raise ValueError(f"recovery source '{source.name}' is not batchable; use collect_episodes")
    if rewind.auto_rewind:
        raise ValueError("a loop collection needs rewind.auto_rewind=false (the source decides)")
    device = next(policy.parameters()).device
    batch = list(envs)[: max(1, min(len(envs), len(seeds)))]
    runner = BatchedMonitoredRunner(
        batch, policy, monitor, tracker, rewind, device, 0, inference_rows, step, noise_seed=int
    )
    with tqdm(total=len(seeds), desc=f"round {round_} {source.name}", disable=not progress) as bar:
        out = _LoopCollector(source, rules, store, policy_version, round_, bar)
        runner.on_start, runner.on_policy_step, runner.on_end = out.on_start, out.on_policy_step, out.on_end
        with torch.no_grad():
            runner.run([int(s) for s in seeds])
    return out.outcomes


def collect_round(
    env: gym.Env,
    factory: Callable[[], gym.Env],
    rollout: RolloutConfig,
    policy: ActionChunkPolicy,
    monitor: Monitor | None,
    tracker: CheckpointTracker | None,
    rewind: RewindConfig,
    source: RecoverySource,
    seeds: Sequence[int],
    store: ReplayStore | None,
    rules: CollectRules,
    policy_version: str,
    round_: int,
    progress: bool = False,
) -> list[EpisodeOutcome]:
    """A loop round's collection: a batchable source's episodes in batches of ``rollout.batch_size``
    (``env`` and envs from ``factory``, in ``rollout.workers`` processes when set), with
    ``rollout.inference_rows``; any other source's one at a time on ``env`` (:func:`collect_episodes`)."""
    if not source.batchable:
        device = next(policy.parameters()).device

        def make() -> MonitoredEpisode:
            return MonitoredEpisode(env, policy, monitor, tracker, rewind, device)

        return collect_episodes(make, source, seeds, store, rules, policy_version, round_, progress)
    batch = max(1, min(rollout.batch_size, len(seeds)))
    with open_envs(factory, batch, rollout, first=env) as envs:
        return collect_batched(
            envs,
            policy,
            monitor,
            tracker,
            rewind,
            source,
            seeds,
            store,
            rules,
            policy_version,
            round_,
            rollout.inference_rows,
            progress,
        )
