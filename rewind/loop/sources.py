"""Recovery sources: what happens when the monitor fires during a loop round (``recovery=NAME``).

Every source implements one method, :meth:`RecoverySource.on_trigger`, called (through
:class:`rewind.loop.episodes.TriggerState`, one episode at a time or in lockstep batches) when a
policy step raises an alarm (or the episode stalls).
It acts on the :class:`~rewind.monitor.episode.MonitoredEpisode` through its own API
(``rewind``, ``external_step``), so every executed step reaches the episode's recording with its label,
and returns :data:`CONTINUE` (the policy drives again) or :data:`END` (stop the episode here).

========  =====================================================================  ===================
source    at the alarm                                                            labels written
========  =====================================================================  ===================
retry     rewind (``restore``: the undone steps are dropped from the record)      policy
operator  RaC: rewind in ``drive`` mode, then the scripted operator completes     recovery, correction
          the current stage; then end the episode (``after=end``) or hand back
dagger    HG-DAgger: the operator takes over at once (no rewind) until the        correction
          stage (or the task) is done
human     a :class:`Person` decides and acts (``rewind-teleop`` or a stand-in)    human, recovery
guided    (no alarm handling) the policy is steered by ReGuide guidance           guided
========  =====================================================================  ===================

The policy steps just before an intervention become ``pre_intervention`` (Sirius). Steps of
``recovery``, ``correction`` and ``human`` count as operator steps, the cost axis of every comparison;
``retry`` counts none (its ``drive`` rewinds are the monitored episode's own controller, not a person).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from rewind.config import ConfigError
from rewind.envs import make_operator
from rewind.envs.operators.base import Operator, OperatorNoise
from rewind.envs.operators.demo_distance import DemoDistance
from rewind.envs.operators.human_like import CONTROL_DT, HumanLikeOperator, operator_time_s
from rewind.loop.config import RECOVERY_SOURCES, RecoveryConfig
from rewind.loop.operator_drive import EpisodeAsEnv as EpisodeAsEnv  # re-exported (its old home)
from rewind.loop.operator_drive import drive_operator
from rewind.monitor.episode import MonitoredEpisode, StepResult
from rewind.monitor.recording import OPERATOR_SOURCES, EpisodeRecording

#: Verdicts of :meth:`RecoverySource.on_trigger`.
CONTINUE, END = "continue", "end"


@dataclass
class SourceContext:
    """What a round gives its recovery source to prepare with.

    Attributes:
        env: the round's env; loaded: the current policy weights (``rewind.train.policy_api.LoadedPolicy``).
        demos_path: the demo store; folder: the round's folder for the source's own files.
        round: the round number; progress: show progress bars; seed: the loop's seed.
    """

    env: Any
    loaded: Any
    demos_path: str
    folder: Path
    round: int
    progress: bool = False
    seed: int = 0


def keep_episode(rule: str, success: bool, interventions: int, failed: int = 0) -> bool:
    """Whether an episode is stored under ``rule`` (see :data:`KEEP_RULES`). An episode with a failed
    intervention (the operator could not complete the stage: the state was beyond recovery) is
    only kept by ``all``: the operator's struggle there is not a correction worth learning."""
    intervened = interventions > 0 and failed == 0
    return {
        "all": True,
        "useful": (success and failed == 0) or intervened,
        "success": success and failed == 0,
        "intervened": intervened,
    }[rule]


class LoopRecording(EpisodeRecording):
    """An :class:`EpisodeRecording` whose operator-step count uses the recovery source's ``counted``
    sources and that can drop steps undone by a ``restore`` rewind."""

    def __init__(self, pre_intervention_steps: int, counted: frozenset[str]) -> None:
        super().__init__(pre_intervention_steps)
        self.counted = counted

    @property
    def operator_steps(self) -> int:
        """Steps whose source the recovery source counts as operator effort."""
        return sum(src in self.counted for src in self.sources)

    def drop_from(self, step: int) -> int:
        """Remove the trailing steps taken at control step ``step`` or later; returns how many."""
        n = 0
        while self.steps and self.steps[-1].step >= step:
            self.steps.pop()
            self.sources.pop()
            n += 1
        self.trim_segments()
        return n


class RecoverySource(ABC):
    """What a round does when the monitor fires (see the module docstring).

    Args:
        cfg: the ``recovery`` node; env_name: the task (for its scripted operator).

    Class attributes:
        counted: sources counted as operator steps in this source's episodes.
        reacts_to_alarms: whether :meth:`on_trigger` is called at all.
        policy_source: the source the policy's own steps are stored with (``guided`` for ReGuide).
        train_sample_weights: default per-source sample weights of the source's data
            (``finetune.sample_weights`` empty): RaC and HG-DAgger train on the intervention segments only.
        batchable: the loop collects this source's episodes in lockstep batches
            (:mod:`rewind.loop.batched_collect`): its per-episode state is :meth:`episode_state` alone.
    """

    name: ClassVar[str] = ""
    counted: ClassVar[frozenset[str]] = OPERATOR_SOURCES
    reacts_to_alarms: ClassVar[bool] = True
    policy_source: ClassVar[str] = "policy"
    train_sample_weights: ClassVar[dict[str, float]] = {"policy": 0.0, "pre_intervention": 0.0}
    batchable: ClassVar[bool] = False

    def __init__(self, cfg: RecoveryConfig, env_name: str) -> None:
        self.cfg, self.env_name = cfg, env_name
        model = cfg.operator_model
        if model.name == "human_like":  # the model's noise replaces the operator's own
            inner = make_operator(env_name, noise=OperatorNoise(action_std=0.0))
            self.operator: Operator = HumanLikeOperator(inner, model)
        else:
            self.operator = make_operator(env_name, noise=OperatorNoise(action_std=cfg.operator_noise))
        self._seed, self._count, self.failed = 0, 0, 0
        self.operator_time_s = 0.0

    def prepare(self, ctx: SourceContext) -> dict[str, Any]:
        """Build what the source needs before the round's episodes (default: a human-like operator's
        :class:`DemoDistance`); returns what to record in the round (e.g. the guided source's models)."""
        if not isinstance(self.operator, HumanLikeOperator):
            return {}
        model = self.cfg.operator_model
        dist = DemoDistance.from_store(
            ctx.demos_path,
            quantile=model.ref_quantile,
            seed=ctx.seed,
            scale=model.distance_scale,
            min_scale=model.min_scale,
        )
        self.operator.distance = dist
        return {"demo_distance": self.operator.distance.describe()}

    def begin(self, ep: MonitoredEpisode, seed: int) -> None:
        """A new episode with env seed ``seed`` starts (after ``ep.reset``)."""
        self._seed, self._count, self.failed = seed, 0, 0

    def episode_state(self) -> tuple[int, int, int]:
        """What the source keeps for the running episode (seed, interventions so far, failed ones): a
        batched collection swaps it in and out around every call for one of its episodes."""
        return self._seed, self._count, self.failed

    def set_episode_state(self, state: tuple[int, int, int]) -> None:
        """Take back what :meth:`episode_state` returned."""
        self._seed, self._count, self.failed = state

    def before_step(self, ep: MonitoredEpisode) -> None:  # noqa: B027 (optional hook)
        """Called before every policy step (the guided source sets its guidance target here)."""

    def report(self) -> dict[str, Any]:
        """What the source did over the round (recorded with the round's collection): the operator
        model, the simulated operator time (every operator step at the control rate, plus
        ``operator_model.overhead_s`` per intervention) and a human-like operator's counts."""
        if not self.counted:
            return {}
        model = self.cfg.operator_model
        out: dict[str, Any] = {
            "operator_model": model.name,
            "operator_time_s": round(self.operator_time_s, 3),
            "control_dt_s": CONTROL_DT,
            "overhead_s": model.overhead_s,
        }
        if isinstance(self.operator, HumanLikeOperator):
            out["human_like"] = self.operator.stats.as_dict()
        return out

    def fresh_operator(self) -> Operator:
        """The scripted operator, reset with a generator seeded by (episode seed, intervention index)."""
        self._count += 1
        self.operator.reset(np.random.default_rng(np.random.SeedSequence([self._seed, 0x0FE, self._count])))
        return self.operator

    @abstractmethod
    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: LoopRecording) -> str:
        """React to an alarm (or stall) at policy step ``res``; return :data:`CONTINUE` or :data:`END`."""

    def finish(self, ep: MonitoredEpisode) -> None:
        """The episode is over (undo per-episode changes to the policy); adds its operator time: every
        non-policy step (all of them counted here), including any a ``restore`` later dropped."""
        self.operator_time_s += self.episode_operator_time(ep)

    def episode_operator_time(self, ep: MonitoredEpisode) -> float:
        """The simulated operator time of ``ep`` (0 when the source counts no operator steps)."""
        if not self.counted:
            return 0.0
        n = sum(ev["kind"] == "intervention" for ev in ep.log.events)
        return operator_time_s(ep.log.external_steps, n, self.cfg.operator_model.overhead_s)


class RetrySource(RecoverySource):
    """Rewind and let the policy try again; in ``restore`` mode the undone steps leave the record, so a
    kept episode is one continuous successful trajectory of the policy (``keep=success``)."""

    name = "retry"
    batchable = True
    counted = frozenset()
    train_sample_weights: ClassVar[dict[str, float]] = {}

    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: LoopRecording) -> str:
        """Rewind to the latest reached checkpoint."""
        ev = ep.rewind(mode=self.cfg.rewind_mode)
        if self.cfg.rewind_mode == "restore":
            recording.drop_from(int(ev["checkpoint_step"]))
        return CONTINUE


class OperatorSource(RecoverySource):
    """RaC: recovery (rewind, ``drive`` mode: the drive back is recorded as ``recovery``), then
    correction (the scripted operator completes the current stage), then end or hand back.

    The drive back is the rewind's own controller retracing to the checkpoint, not an operator's
    choice, so it is stored but not trained on by default (``recovery`` weight 0; on PickPlace, 2 loop
    seeds, the first round's policy gained 12-18 points from this, docs/loop.md). Train on it with
    ``'+finetune.sample_weights={recovery: 1.0}'``."""

    name = "operator"
    batchable = True
    train_sample_weights: ClassVar[dict[str, float]] = {
        "policy": 0.0,
        "pre_intervention": 0.0,
        "recovery": 0.0,
    }

    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: LoopRecording) -> str:
        """Recover, correct (``recovery.until``: the stage the rewind lands in, the task, or through the
        stage the episode ``failed`` in), then ``recovery.after``."""
        failed = ep.base.stage()
        ep.rewind(mode=self.cfg.rewind_mode)
        if self.cfg.rewind_mode == "restore":
            recording.drop_from(ep.step_count)
        if not ep.done:
            _, ok = drive_operator(
                ep, self.fresh_operator(), "correction", self.cfg.until, self.cfg.max_correction_steps, failed
            )
            self.failed += int(not ok)
        return END if self.cfg.after == "end" else CONTINUE


class DaggerSource(RecoverySource):
    """HG-DAgger: the operator takes over where the policy is (no rewind) and corrects until the stage
    (``until=stage``) or the task (``until=task``) is done; then end or hand back."""

    name = "dagger"
    batchable = True

    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: LoopRecording) -> str:
        """Take over, correct, then ``recovery.after`` (``until=failed`` is ``stage`` here: no rewind)."""
        _, ok = drive_operator(
            ep,
            self.fresh_operator(),
            "correction",
            self.cfg.until,
            self.cfg.max_correction_steps,
            ep.base.stage(),
        )
        self.failed += int(not ok)
        return END if self.cfg.after == "end" else CONTINUE


class Person(Protocol):
    """Someone who takes over at an alarm: the plug of ``recovery=human``.

    ``intervene`` acts on the episode only through its API: ``ep.rewind(mode=...)`` (a
    ``drive`` rewind is recorded as ``recovery``) and ``ep.external_step(action, "human")``; it returns
    ``"handback"`` (the policy drives again) or ``"end"``. The teleop tool (``rewind-teleop``) is this
    protocol with a person in a browser: it writes its episodes into the round's store itself, so
    the loop runs it out of process (see :class:`HumanSource`).
    """

    def begin(self, seed: int) -> None:
        """A new episode with env seed ``seed`` starts."""

    def intervene(self, ep: MonitoredEpisode, alarm: StepResult) -> str:
        """Take over at ``alarm``; return ``"handback"`` or ``"end"``."""


class ScriptedPerson:
    """A stand-in person: rewinds like RaC, then the scripted operator completes the stage, labelled
    ``human``. Used by tests and to dry-run a human round without a browser."""

    def __init__(self, operator: Operator, rewind_mode: str, after: str, budget: int) -> None:
        self.operator, self.rewind_mode, self.after, self.budget = operator, rewind_mode, after, budget
        self._seed, self._count = 0, 0

    def begin(self, seed: int) -> None:
        """Remember the episode seed (the operator's style is drawn from it)."""
        self._seed, self._count = seed, 0

    def intervene(self, ep: MonitoredEpisode, alarm: StepResult) -> str:
        """Rewind (``drive``: recorded as ``recovery``), then drive the stage to completion as ``human``."""
        self._count += 1
        self.operator.reset(np.random.default_rng(np.random.SeedSequence([self._seed, 0x4A, self._count])))
        ep.rewind(mode=self.rewind_mode)
        if not ep.done:
            drive_operator(ep, self.operator, "human", "stage", self.budget)  # a person decides what to keep
        return "end" if self.after == "end" else "handback"


class HumanSource(RecoverySource):
    """A :class:`Person` takes over at each alarm. With ``person=teleop`` the round's episodes come from
    ``rewind-teleop`` (out of process, see :func:`teleop_command`); ``person=scripted`` runs the
    stand-in in process."""

    name = "human"

    def __init__(self, cfg: RecoveryConfig, env_name: str, person: Person | None = None) -> None:
        super().__init__(cfg, env_name)
        self.person: Person = person or ScriptedPerson(
            self.operator, cfg.rewind_mode, cfg.after, cfg.max_correction_steps
        )

    def begin(self, ep: MonitoredEpisode, seed: int) -> None:
        """Tell the person a new episode starts."""
        super().begin(ep, seed)
        self.person.begin(seed)

    def on_trigger(self, ep: MonitoredEpisode, res: StepResult, recording: LoopRecording) -> str:
        """Let the person intervene."""
        verdict = self.person.intervene(ep, res)
        if verdict not in ("handback", "end"):
            raise ValueError(f"Person.intervene must return 'handback' or 'end'; got {verdict!r}")
        return END if verdict == "end" else CONTINUE


def is_external(cfg: RecoveryConfig) -> bool:
    """The round's data comes from another program (a person with ``rewind-teleop``)."""
    return cfg.name == "human" and cfg.person == "teleop"


def teleop_command(
    env: str,
    policy_path: str,
    calibration: str | None,
    store: str,
    round_: int,
    seed: int,
    episodes: int,
    rewind_mode: str,
) -> str:
    """The ``rewind-teleop`` command that fills a human round's store."""
    parts = [
        "rewind-teleop",
        f"env={env}",
        f"policy_path={policy_path}",
        f"store={store}",
        f"round={round_}",
        f"seed={seed}",
        f"max_episodes={episodes}",
        f"rewind_mode={rewind_mode}",
        "auto_pause=true",
    ]
    if calibration:
        parts.insert(3, f"calibration={calibration}")
    return " ".join(parts)


def source_class(name: str) -> type[RecoverySource]:
    """The class of recovery source ``name``; an unknown name lists the valid ones."""
    if name not in RECOVERY_SOURCES:
        raise ConfigError(f"recovery.name must be one of [{', '.join(RECOVERY_SOURCES)}]; got '{name}'")
    module, _, cls = RECOVERY_SOURCES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_source(cfg: RecoveryConfig, env_name: str, **kwargs: Any) -> RecoverySource:
    """The recovery source ``cfg.name`` (see :func:`source_class`)."""
    return source_class(cfg.name)(cfg, env_name, **kwargs)
