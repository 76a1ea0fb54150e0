"""The closed loop of one episode: env + policy + failure monitor + checkpoint tracking + rewind.

:class:`MonitoredEpisode` is stepped one control step at a time, so the evaluation CLI, the recovery
loop and the teleop server all drive the same object:

* :meth:`MonitoredEpisode.policy_step`: the policy acts; the monitor scores; the tracker updates.
* :meth:`MonitoredEpisode.external_step`: someone else (scripted operator, person) acts.
* :meth:`MonitoredEpisode.rewind`: go back to the latest (or a chosen) reached rewind checkpoint,
  ``restore`` (exact simulator state, simulation only) or ``drive`` (command the gripper back to the
  checkpoint's pose through the controller, objects stay where they are, as on a robot); then the
  policy's queues and history are cleared.

An alarm raised before any checkpoint is reached rewinds to the episode start (a checkpoint named
``start``; in ``drive`` mode the gripper is driven back to its initial pose). With
``auto_rewind=True`` an alarm rewinds at once while the episode's retry budget lasts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rewind.envs.core.base import MAX_DPOS, MAX_DYAW, TaskEnv
from rewind.monitor.checkpoints import CheckpointTracker, ReachedCheckpoint
from rewind.monitor.features import FeatureExtractor
from rewind.monitor.progress import START, ProgressWatchdog
from rewind.monitor.rules import (  # noqa: F401  (REWIND_MODES, Monitor: importable from here as before)
    REWIND_MODES,
    Monitor,
    RewindConfig,
    check_rewind_mode,
    rewindable,
)
from rewind.monitor.steps import EpisodeLog, PendingStep, RewindPlan, StepResult
from rewind.policies.base import ActionChunkPolicy, to_torch_obs
from rewind.policies.noise import NoiseStream
from rewind.rollout.pool import StepOutcome, step_one


class MonitoredEpisode:
    """One env driven by a policy under a monitor, with rewind to reached checkpoints.

    Args:
        env: a task env (wrapped or not); policy: an action-chunk policy (``B = 1`` is used).
        monitor: failure monitor (``None``: no scores, no alarms).
        tracker: checkpoint tracker (``None``: only the episode start is a checkpoint).
        cfg: rewind settings; device: policy device; generator: the policy's sampling noise.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: ActionChunkPolicy,
        monitor: Monitor | None = None,
        tracker: CheckpointTracker | None = None,
        cfg: RewindConfig | None = None,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
    ) -> None:
        self.env, self.policy, self.monitor, self.tracker = env, policy, monitor, tracker
        self.base: TaskEnv = env.unwrapped  # type: ignore[assignment]
        self.cfg = cfg or RewindConfig()
        self.device, self.generator = torch.device(device), generator
        self.keys = list(getattr(policy, "used_obs_keys", None) or getattr(policy, "obs_keys", None) or [])
        self.log = EpisodeLog(-1)
        self.obs: dict[str, np.ndarray] = {}
        self.info: dict[str, Any] = {}
        self.done = False
        self._start: ReachedCheckpoint | None = None
        #: Control step at which the current segment between checkpoints began (progress watchdog;
        #: ``None`` right after a rewind: its first policy step), and whether the watchdog has alarmed
        #: on it (once per segment).
        self._segment_start: int | None = 0
        self._segment_alarmed = False
        self._rewindable = rewindable(env)
        self._features = FeatureExtractor(policy) if tracker is not None else None
        #: The episode's noise stream when a batched runner samples for it (its episode noise is
        #: cleared with the policy's rollout state).
        self.noise: NoiseStream | None = None
        #: Called with every executed step, in the order the env saw them (policy, drive, external).
        self.on_step: Callable[[StepResult], None] | None = None

    # ----------------------------------------------------------------- episode
    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """Start an episode with env seed ``seed``; returns the first observation."""
        self.obs, self.info = self.env.reset(seed=seed)
        self.keys = self.keys or sorted(self.obs)
        self.done, self.log, self._segment_start, self._segment_alarmed = False, EpisodeLog(seed), 0, False
        self._start = ReachedCheckpoint(-1, START, 0, 1.0, self._rewindable.snapshot(), self.obs)
        if self.tracker is not None:
            self.tracker.reset(self._start)
        self._reset_features()
        self._clear_policy()
        return self.obs

    @property
    def step_count(self) -> int:
        """Control steps taken so far (rewinds in ``restore`` mode set it back)."""
        return self.base.elapsed_steps

    @property
    def success(self) -> bool:
        """The task is completed."""
        return bool(self.info.get("success", False))

    @property
    def checkpoints(self) -> list[ReachedCheckpoint]:
        """Reached rewind checkpoints, oldest first (the episode start first); a copy."""
        return list(self._reached())

    def _latest_name(self) -> str | None:
        """The latest reached rewind checkpoint's name (``None`` before the episode starts)."""
        reached = self._reached()
        return reached[-1].name if reached else None

    def score_threshold(self, step: int) -> float:
        """The score's alarm threshold at ``step`` under the latest reached rewind checkpoint (what
        the monitor compares with; ``inf`` without a calibrated monitor)."""
        return math.inf if self.monitor is None else self.monitor.threshold(step, self._latest_name())

    def _reached(self) -> Sequence[ReachedCheckpoint]:
        """The reached rewind checkpoints without a copy, for the per-step reads (not to be changed)."""
        if self.tracker is not None:
            return self.tracker.reached
        return (self._start,) if self._start is not None else ()

    def _reset_features(self) -> None:
        if self._features is not None:
            self._features.reset()
            self._features.push(self.obs)

    def _clear_policy(self) -> None:
        self.policy.reset()
        if self.noise is not None:
            self.noise.clear()
        if self.monitor is not None:
            self.monitor.score.reset()

    def policy_obs(self) -> dict[str, torch.Tensor]:
        """The current observation as the policy takes it: ``dict[key -> [1, ...]]`` tensors."""
        return to_torch_obs({k: self.obs[k][None] for k in self.keys}, self.device)

    # ----------------------------------------------------------------- stepping
    def _apply(self, action: np.ndarray, source: str) -> StepResult:
        """Step the env with ``action``; a rejected action ends the episode as a simulation error."""
        before = self.before_step()
        return self.after_step(before, action, source, step_one(self.env, action))

    def before_step(self) -> PendingStep:
        """What a step records from before its action (batched runners step the env in between)."""
        return PendingStep(self.step_count, self.obs, self.base.physics_state())

    def after_step(
        self, before: PendingStep, action: np.ndarray, source: str, outcome: StepOutcome
    ) -> StepResult:
        """Take the env's ``outcome`` (a :func:`~rewind.rollout.pool.step_many` row) of ``action``."""
        new_obs, _, terminated, truncated, info = outcome
        self.obs = before.obs if new_obs is None else new_obs
        self.info = info
        self.done = bool(terminated or truncated)
        if self._features is not None:
            self._features.push(self.obs)
        executed = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        return StepResult(before.step, before.obs, executed, source, info, self.done, before.state)

    def policy_step(self) -> StepResult:
        """The policy acts for one control step; the monitor and the tracker observe it."""
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        action = self.policy.select_action(self.policy_obs(), self.num_samples, self.generator)
        res = self._apply(action[0].float().cpu().numpy(), "policy")
        self.observe_policy_step(res)
        if self.wants_rewind(res):
            self.rewind()
        return res

    @property
    def num_samples(self) -> int:
        """Chunks the policy samples per inference (what the monitor's score needs)."""
        return self.monitor.score.num_samples if self.monitor is not None else 1

    def observe_policy_step(self, res: StepResult) -> None:
        """After a policy step: the monitor scores it, the tracker updates, ``on_step`` receives it."""
        t0 = time.perf_counter()
        self._observe(res)
        self.log.monitor_time_s += time.perf_counter() - t0
        self.log.monitor_calls += 1
        self._emit(res)

    def wants_rewind(self, res: StepResult) -> bool:
        """The policy step ``res`` raised an alarm that rewinds now (auto-rewind, budget left, not done)."""
        return bool(
            res.alarm and self.cfg.auto_rewind and self.log.rewinds < self.cfg.max_rewinds and not res.done
        )

    def _observe(self, res: StepResult) -> None:
        """Score the step and track checkpoints (the per-control-step monitor cost)."""
        score = self.monitor.score.update(self.policy) if self.monitor is not None else None
        self.log.scores.append(score)
        if score is not None:
            res.score, res.threshold = score, self.score_threshold(res.step)
            res.alarm = score > res.threshold and self._armed()
            if res.alarm:
                res.alarm_reason = "score"
                self.event(
                    "alarm",
                    res.step,
                    score=round(score, 6),
                    threshold=round(res.threshold, 6),
                    checkpoint=self._latest_name(),
                )
        if self.tracker is not None and self._features is not None and not res.done:
            feats = self._features.features()
            res.checkpoint = self.tracker.update(feats, res.step + 1, self._rewindable, self.obs)
            if res.checkpoint is not None:
                self._segment_start, self._segment_alarmed = res.checkpoint.step, False
                self.event(
                    "checkpoint",
                    res.checkpoint.step,
                    checkpoint=res.checkpoint.name,
                    similarity=round(res.checkpoint.similarity, 4),
                )
        if self.monitor is not None and self.monitor.progress is not None and not res.done:
            self._watch_progress(res, self.monitor.progress)

    def _armed(self) -> bool:
        """The score may alarm now: always, or (``monitor.armed_from=checkpoint``) once a rewind
        checkpoint past the episode start is reached (a rewind to the start disarms it again)."""
        return self.monitor.armed_from == "start" or len(self._reached()) > 1  # type: ignore[union-attr]

    def _watch_progress(self, res: StepResult, watchdog: ProgressWatchdog) -> None:
        """The progress watchdog's alarm (:mod:`rewind.monitor.progress`) when the score raised none."""
        if self._segment_start is None:  # the first policy step after a rewind begins the segment
            self._segment_start = res.step
        if res.alarm or self._segment_alarmed:  # the score alarmed, or the watchdog already did
            return
        latest = self.tracker.latest() if self.tracker is not None else self._start
        elapsed, name = res.step + 1 - self._segment_start, latest.name  # type: ignore[union-attr]
        if watchdog.overdue(name, elapsed):
            res.alarm = self._segment_alarmed = True
            res.alarm_reason = "progress"
            limit = watchdog.limit(name)
            self.event("alarm", res.step, reason="progress", steps=elapsed, limit=limit, checkpoint=name)

    def external_step(self, action: np.ndarray, source: str) -> StepResult:
        """Someone other than the policy acts (``source``: ``correction``, ``human``...). The policy's
        queue is cleared so that it starts fresh when control is handed back."""
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        self.log.external_steps += 1
        self.log.scores.append(None)
        res = self._apply(action, source)
        if self.policy.get_state().obs_history:
            self._clear_policy()
        self._emit(res)
        return res

    def _emit(self, res: StepResult, extra: Callable[[StepResult], None] | None = None) -> None:
        if self.on_step is not None:
            self.on_step(res)
        if extra is not None:
            extra(res)

    def event(self, kind: str, step: int, **fields: Any) -> dict[str, Any]:
        """Append an event to the episode's log and return it."""
        ev = {"kind": kind, "step": int(step), **fields}
        self.log.events.append(ev)
        return ev

    # ----------------------------------------------------------------- rewind
    def rewind(
        self, target: int | None = None, mode: str | None = None, on_step: Any = None
    ) -> dict[str, Any]:
        """Go back to reached checkpoint ``target`` (an index into :attr:`checkpoints`; default the
        latest). ``on_step(StepResult)`` receives the steps of a ``drive`` rewind (source ``recovery``).
        Returns the rewind event (its ``outcome`` is filled in when the episode ends)."""
        plan = self.begin_rewind(target, mode)
        while (action := self.drive_action(plan)) is not None:
            self.drive_step_done(plan, self._apply(action, "recovery"), on_step)
        return self.end_rewind(plan)

    def begin_rewind(self, target: int | None = None, mode: str | None = None) -> RewindPlan:
        """Start a rewind (see :meth:`rewind`): ``restore`` is done here; ``drive`` then takes the
        steps of :meth:`drive_action` until it returns ``None``; :meth:`end_rewind` finishes."""
        mode = mode or self.cfg.mode
        check_rewind_mode(mode, "rewind mode")
        cps = self.checkpoints
        if target is not None and not -len(cps) <= target < len(cps):
            names = ", ".join(f"{i}: {c.name}" for i, c in enumerate(cps))
            raise ValueError(f"rewind target {target} is not a reached checkpoint; reached: {names}")
        cp = cps[self.auto_rewind_target() if target is None else target]
        plan = RewindPlan(cp, mode, self.step_count)
        if mode == "restore":
            self._rewindable.restore(cp.snapshot)
            self.obs, self.done = self.base.observation(), False
            self.info = {"stage": self.base.stage(), "success": self.base.is_success()}
            self._reset_features()
        elif hasattr(self.base, "grip_closed_at"):  # an env that drives back itself (robosuite)
            plan.grip_closed = self.base.grip_closed_at(cp.obs, self.obs)
        else:
            plan.grip_closed = float(cp.obs["gripper"][0]) < float(self.obs["gripper"][0]) - 0.005
        return plan

    def auto_rewind_target(self) -> int:
        """Index into :attr:`checkpoints` of a rewind with no target: the latest reached, or with
        ``rewind.backtrack_after = N > 0`` the one before it once the last ``N`` rewinds all went
        to the latest (retries from a checkpoint that keep failing go further back)."""
        cps = self.checkpoints
        latest, n = len(cps) - 1, self.cfg.backtrack_after
        if n == 0 or latest == 0:
            return latest
        key = (cps[-1].name, cps[-1].step)
        run = 0
        for ev in reversed(self.log.events):
            if ev["kind"] != "rewind":
                continue
            if (ev["checkpoint"], ev["checkpoint_step"]) != key:
                break
            run += 1
        return latest - 1 if run >= n else latest

    def drive_action(self, plan: RewindPlan) -> np.ndarray | None:
        """The next step of a ``drive`` rewind toward the checkpoint's pose and finger command, or
        ``None`` when it has arrived, spent its step budget, or the episode ended (and for ``restore``)."""
        if plan.mode != "drive" or plan.steps >= self.cfg.drive_max_steps or self.done:
            return None
        if hasattr(self.base, "drive_action"):  # the env's own controller (robosuite: OSC_POSE)
            tol = self.cfg.drive_pos_tol, self.cfg.drive_yaw_tol
            return self.base.drive_action(plan.checkpoint.obs, plan.grip_closed, *tol)
        target = np.asarray(plan.checkpoint.obs["eef_pos"], dtype=np.float64)
        cos, sin = plan.checkpoint.obs["eef_yaw"][:2]
        pos_err = target - self.base.gripper_pos()
        yaw_err = math.remainder(math.atan2(float(sin), float(cos)) - self.base.gripper_yaw(), 2 * math.pi)
        if np.linalg.norm(pos_err) < self.cfg.drive_pos_tol and abs(yaw_err) < self.cfg.drive_yaw_tol:
            return None
        a = np.zeros(5, dtype=np.float32)
        a[:3] = np.clip(pos_err / MAX_DPOS, -1, 1)
        a[3] = np.clip(yaw_err / MAX_DYAW, -1, 1)
        a[4] = -1.0 if plan.grip_closed else 1.0
        return a

    def drive_step_done(self, plan: RewindPlan, res: StepResult, on_step: Any = None) -> None:
        """Count and emit a step of a ``drive`` rewind (``on_step`` receives it too)."""
        self.log.external_steps += 1
        self.log.scores.append(None)
        self._emit(res, on_step)
        plan.steps += 1

    def end_rewind(self, plan: RewindPlan) -> dict[str, Any]:
        """Finish a rewind: forget later checkpoints, clear the policy, log the ``rewind`` event."""
        if self.tracker is not None:
            self.tracker.truncate(plan.checkpoint)
        self._clear_policy()
        self.log.rewinds += 1
        self._segment_start, self._segment_alarmed = None, False
        cp = plan.checkpoint
        return self.event(
            "rewind",
            plan.from_step,
            checkpoint=cp.name,
            checkpoint_step=cp.step,
            mode=plan.mode,
            drive_steps=plan.steps,
        )

    def finish(self) -> EpisodeLog:
        """Close the episode's log: every rewind event gets the episode's outcome."""
        outcome = "success" if self.success else "failure"
        for ev in self.log.events:
            if ev["kind"] == "rewind":
                ev["outcome"] = outcome
        return self.log

    def run(self, seed: int, max_steps: int | None = None) -> EpisodeLog:
        """Run a whole episode under the policy (auto-rewinding per :attr:`cfg`)."""
        self.reset(seed)
        limit = max_steps or 10**9
        while not self.done and self.step_count < limit:
            self.policy_step()
        return self.finish()
