"""One round's data collection: monitored episodes of the current policy, with a recovery source
acting on alarms, recorded step by step and committed to the round's replay store.

The monitored episode (:class:`~rewind.monitor.episode.MonitoredEpisode`) runs with
``auto_rewind=False``: what an alarm does is the recovery source's decision
(:mod:`rewind.loop.sources`), taken by :class:`TriggerState` after every policy step. Each episode's
policy noise is seeded by its env seed, so an episode does not depend on which episodes came before
it. This module runs episodes one at a time (:func:`collect_episodes`: the path of ``human`` and
``guided``); :mod:`rewind.loop.batched_collect` runs the batchable sources' episodes in lockstep with
the same decisions and results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rewind.loop.sources import END, LoopRecording, RecoverySource, keep_episode
from rewind.monitor.episode import MonitoredEpisode, StepResult
from rewind.store import ReplayStore
from rewind.utils.seeding import torch_generator

log = logging.getLogger(__name__)


@dataclass
class EpisodeOutcome:
    """What one collected episode gave.

    Attributes:
        seed: env seed; success: the task was completed; steps: recorded steps.
        interventions: times the source was triggered; alarms: monitor alarms; stalls: stall triggers.
        failed_interventions: interventions whose correction did not complete its stage (or task).
        operator_steps: steps counted as operator effort; source_counts: recorded steps per source.
        ended_by: ``env`` (success, failure or step limit) or ``source`` (``after=end``).
        kept: stored in the round's store; episode_id: its id there (``None`` if not kept).
    """

    seed: int
    success: bool
    steps: int
    interventions: int
    alarms: int
    stalls: int
    operator_steps: int
    source_counts: dict[str, int]
    ended_by: str
    failed_interventions: int = 0
    kept: bool = False
    episode_id: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CollectRules:
    """What a round's collection applies to every episode (from the ``recovery`` node).

    Attributes:
        keep: the keep rule (:func:`~rewind.loop.sources.keep_episode`).
        pre_intervention_steps: policy steps before an intervention labelled ``pre_intervention``.
        max_interventions: times the source may act per episode.
        stall_steps: policy steps without stage progress that trigger the source (0: off).
    """

    keep: str = "useful"
    pre_intervention_steps: int = 15
    max_interventions: int = 1
    stall_steps: int = 0


class TriggerState:
    """One episode's trigger bookkeeping (alarms, stalls, interventions): what
    :func:`run_episode` and the batched collection (:mod:`rewind.loop.batched_collect`) do after every
    policy step, so both take the same decisions.

    Args:
        max_interventions: times the source may act; stall_steps: policy steps without stage progress
            that count as a stall (0: off).
    """

    def __init__(self, max_interventions: int, stall_steps: int = 0) -> None:
        self.max_interventions, self.stall_steps = max_interventions, stall_steps
        self.interventions = self.alarms = self.stalls = 0
        self.best, self.since, self.ended_by = 0, 0, "env"

    def start(self, ep: MonitoredEpisode) -> None:
        """The episode was reset: stage progress is measured from here."""
        self.best, self.since = ep.base.stage(), ep.step_count

    def after_policy_step(
        self, ep: MonitoredEpisode, res: StepResult, source: RecoverySource, recording: LoopRecording
    ) -> bool:
        """Count the policy step ``res``; on an alarm (or a stall) let ``source`` act, at most
        ``max_interventions`` times. Returns whether the source ended the episode (``after=end``)."""
        self.alarms += int(res.alarm)
        stage = int(res.info.get("stage", 0))
        if stage > self.best:
            self.best, self.since = stage, ep.step_count
        stalled = bool(self.stall_steps) and ep.step_count - self.since >= self.stall_steps
        if stalled:
            self.stalls += 1
            ep.event("stall", res.step, stage=stage)
        if not (res.alarm or stalled) or ep.done or not source.reacts_to_alarms:
            return False
        if self.interventions >= self.max_interventions:
            self.since = ep.step_count
            return False
        self.interventions += 1
        ep.event("intervention", res.step, source=source.name, trigger=_trigger(res))
        verdict = source.on_trigger(ep, res, recording)
        self.best, self.since = max(self.best, ep.base.stage()), ep.step_count
        if verdict == END:
            self.ended_by = "source"
            return True
        return False


def _trigger(res: StepResult) -> str:
    """What raised an intervention: ``alarm`` (the failure score), ``progress`` (the progress watchdog)
    or ``stall``."""
    if not res.alarm:
        return "stall"
    return "progress" if res.alarm_reason == "progress" else "alarm"


def episode_outcome(
    ep: MonitoredEpisode, source: RecoverySource, seed: int, recording: LoopRecording, state: TriggerState
) -> EpisodeOutcome:
    """Close ``ep``'s log and relabel the policy's steps (``policy_source``); its outcome (after
    ``source.finish``: ``failed`` is the source's count for this episode)."""
    log_ = ep.finish()
    if source.policy_source != "policy":
        recording.sources = [source.policy_source if s == "policy" else s for s in recording.sources]
    return EpisodeOutcome(
        seed,
        ep.success,
        len(recording),
        state.interventions,
        state.alarms,
        state.stalls,
        recording.operator_steps,
        recording.source_counts(),
        state.ended_by,
        getattr(source, "failed", 0),
        events=log_.events,
    )


def run_episode(
    ep: MonitoredEpisode,
    source: RecoverySource,
    seed: int,
    recording: LoopRecording,
    max_interventions: int,
    stall_steps: int = 0,
) -> EpisodeOutcome:
    """One episode: the policy acts; on an alarm (or ``stall_steps`` policy steps without stage
    progress) the source acts, at most ``max_interventions`` times; every step goes to ``recording``."""
    ep.generator = torch_generator(seed, ep.device)
    ep.reset(seed)
    ep.on_step = recording.add
    source.begin(ep, seed)
    state = TriggerState(max_interventions, stall_steps)
    state.start(ep)
    try:
        while not ep.done:
            source.before_step(ep)
            if state.after_policy_step(ep, ep.policy_step(), source, recording):
                break
    finally:
        source.finish(ep)
        ep.on_step = None
    return episode_outcome(ep, source, seed, recording, state)


def keep_and_commit(
    o: EpisodeOutcome,
    recording: LoopRecording,
    store: ReplayStore | None,
    keep: str,
    source_name: str,
    policy_version: str,
    round_: int,
) -> None:
    """Apply the keep rule to ``o``; a kept episode is committed to ``store`` (``o.episode_id`` set)."""
    o.kept = keep_episode(keep, o.success, o.interventions, o.failed_interventions) and len(recording) > 0
    if o.kept and store is not None:
        extra = {
            "events": o.events,
            "recovery": source_name,
            "interventions": o.interventions,
            "ended_by": o.ended_by,
        }
        o.episode_id = recording.commit(store, o.success, o.seed, policy_version, round_, extra).id


def collect_episodes(
    make_episode: Callable[[], MonitoredEpisode],
    source: RecoverySource,
    seeds: Sequence[int],
    store: ReplayStore | None,
    rules: CollectRules,
    policy_version: str,
    round_: int,
    progress: bool = False,
) -> list[EpisodeOutcome]:
    """Episodes ``seeds`` in order, one at a time (the path of the sources that are not batched, see
    :func:`rewind.loop.batched_collect.collect_batched`) under ``rules``; the ones ``rules.keep`` selects
    are committed to ``store`` atomically."""
    ep = make_episode()
    out: list[EpisodeOutcome] = []
    bar = tqdm(seeds, desc=f"round {round_} {source.name}", disable=not progress)
    with torch.no_grad():
        for seed in bar:
            rec = LoopRecording(rules.pre_intervention_steps, source.counted)
            o = run_episode(ep, source, int(seed), rec, rules.max_interventions, rules.stall_steps)
            keep_and_commit(o, rec, store, rules.keep, source.name, policy_version, round_)
            out.append(o)
            bar.set_postfix(success=f"{np.mean([x.success for x in out]):.2f}", kept=sum(x.kept for x in out))
    return out


def _count_triggers(outcomes: Sequence[EpisodeOutcome]) -> dict[str, int]:
    """Interventions by what raised them (``alarm``, ``progress``, ``stall``: :func:`_trigger`)."""
    counts: dict[str, int] = {}
    for o in outcomes:
        for e in o.events:
            if e["kind"] == "intervention":
                counts[e["trigger"]] = counts.get(e["trigger"], 0) + 1
    return dict(sorted(counts.items()))


def summarize_outcomes(outcomes: Sequence[EpisodeOutcome]) -> dict[str, Any]:
    """Counts over a round's episodes: success, interventions, operator steps, steps per source (of the
    kept episodes)."""
    kept = [o for o in outcomes if o.kept]
    source_counts: dict[str, int] = {}
    for o in kept:
        for k, v in o.source_counts.items():
            source_counts[k] = source_counts.get(k, 0) + v
    n = max(len(outcomes), 1)
    return {
        "episodes": len(outcomes),
        "success_rate": sum(o.success for o in outcomes) / n,
        "episodes_with_alarm": sum(o.alarms > 0 for o in outcomes),
        "interventions": sum(o.interventions for o in outcomes),
        "failed_interventions": sum(o.failed_interventions for o in outcomes),
        "stalls": sum(o.stalls for o in outcomes),
        "triggers": _count_triggers(outcomes),
        "kept": len(kept),
        "kept_steps": sum(o.steps for o in kept),
        "operator_steps": sum(o.operator_steps for o in outcomes),
        "operator_steps_kept": sum(o.operator_steps for o in kept),
        "source_counts": dict(sorted(source_counts.items())),
        "episode_ids": [o.episode_id for o in kept if o.episode_id is not None],
        "per_episode": [{k: v for k, v in asdict(o).items() if k != "events"} for o in outcomes],
    }
