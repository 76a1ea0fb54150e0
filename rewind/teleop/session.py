"""The teleop session: one monitored episode at a time, driven by a policy or a person, recorded.

:class:`TeleopSession` knows nothing about HTTP: a front end calls :meth:`TeleopSession.command` with a
command name from :data:`~rewind.teleop.commands.COMMANDS` and :meth:`TeleopSession.tick` once per
control step, from one thread. The person's held keys arrive through :attr:`TeleopSession.input`
(thread-safe). The command handlers live in :mod:`rewind.teleop.session_commands` (a mixin); this
module keeps the episodes, stepping, recording, commits and the page's state.

Modes (:data:`~rewind.teleop.commands.MODES`)::

    autonomous --(alarm with auto_pause, P)--> paused --(P: resume, H: hand back)--> autonomous
    autonomous/paused --(T)--> human --(T or H: hand back)--> autonomous
    any --(rewind)--> paused;  end / discard --> the next episode starts

* ``autonomous``: the policy acts each tick; the monitor scores it.
* ``paused``: nothing moves (after an alarm, a rewind, the end of the task, or ``pause``).
* ``human``: the person's input acts each tick (label ``human``); with ``step_when_idle=False`` the
  simulation waits while there is no input, so no no-op steps are recorded.

Every executed step (policy, the ``recovery`` steps of a ``drive`` rewind, human) goes through one
:class:`~rewind.monitor.recording.EpisodeRecording`; ``end`` commits it atomically to the store,
``discard`` drops it. Nothing reaches the store before ``end``, except after a fatal error of the
simulation thread: :meth:`TeleopSession.salvage` then writes the unfinished episode as a ``failure``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult
from rewind.monitor.recording import EpisodeRecording
from rewind.policies.base import ActionChunkPolicy, PolicyState
from rewind.store import ReplayStore, StoreSpec
from rewind.teleop.commands import SessionSettings
from rewind.teleop.controls import ControlSettings, HumanInput, current_grip_command
from rewind.teleop.session_commands import SessionCommands
from rewind.utils.seeding import torch_generator

log = logging.getLogger(__name__)


class _NoPolicy:
    """Stands in for the policy in pure teleop (no ``policy_path``): nothing to reset, no history."""

    n_obs_steps = 1

    def reset(self) -> None:
        """Nothing to forget."""

    def get_state(self) -> PolicyState:
        """An empty rollout state."""
        return PolicyState()


class TeleopSession(SessionCommands):
    """One env under a policy, a monitor and a person, episode after episode, recorded to a store.

    Args:
        env: the task env; policy: the policy (``None``: pure teleop, every step is ``human``).
        monitor / tracker: failure monitor and checkpoint tracker (``None``: no alarms / only the
            episode start is a checkpoint).
        store: replay store folder (opened per commit, so the server never holds the writer lock).
        spec: the store spec of ``env``; policy_version: recorded with each episode.
        settings / controls: session and input settings; device: the policy's device.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: ActionChunkPolicy | None,
        store: str | Path,
        spec: StoreSpec,
        monitor: Monitor | None = None,
        tracker: CheckpointTracker | None = None,
        settings: SessionSettings | None = None,
        controls: ControlSettings | None = None,
        policy_version: str = "",
        device: str = "cpu",
    ) -> None:
        self.settings = settings or SessionSettings()
        self.has_policy, self.store_path, self.spec = policy is not None, Path(store), spec
        self.policy_version = policy_version or ("" if policy is not None else "human")
        cfg = RewindConfig(mode=self.settings.rewind_mode, auto_rewind=False)  # checks the mode
        driver = policy or _NoPolicy()
        self.episode = MonitoredEpisode(env, driver, monitor, tracker, cfg, device)  # type: ignore[arg-type]
        self.input = HumanInput(controls)
        self.cameras = [env.unwrapped.model.camera(i).name for i in range(env.unwrapped.model.ncam)]
        self.camera = self.cameras[0] if self.cameras else ""
        self.auto_pause = self.settings.auto_pause
        self.step_hook: Callable[[StepResult], None] | None = None
        self.version, self.input_seq = 0, 0
        self.episode_index, self.committed, self.discarded = -1, 0, 0
        self.last_commit: dict[str, Any] | None = None
        self.messages: deque[str] = deque(maxlen=12)
        self.error: str | None = None  # the last internal error of this episode
        self._device = device
        self._start_episode()

    # ----------------------------------------------------------------- episodes
    def _start_episode(self) -> None:
        self.episode_index += 1
        seed = self.settings.seed + self.episode_index
        self.episode.generator = torch_generator(seed, self._device) if self.has_policy else None
        self.episode.reset(seed)
        self.recording = EpisodeRecording(self.settings.pre_intervention_steps)
        self.scores: deque[tuple[int, int, float, float]] = deque(maxlen=self.settings.score_history)
        self.alarms, self.last_alarm, self._score_seq = 0, None, 0
        self.error = None
        self.grip, self._grip_settle = current_grip_command(self.episode.base), 0
        self.input.release()
        first = "human" if not self.has_policy else "autonomous"
        self.mode, self.resume_mode = ("paused", first) if self.settings.start_paused else (first, first)
        self.reason = "episode started" + (" paused: press P to start" if self.settings.start_paused else "")
        self._note(f"episode {self.episode_index} started (seed {seed})")

    def _note(self, text: str) -> None:
        self.messages.append(f"{time.strftime('%H:%M:%S')} {text}")
        log.info("teleop: %s", text)
        self.version += 1

    def _set_mode(self, mode: str, reason: str) -> None:
        if mode != "paused":
            self.resume_mode = mode
        self.mode, self.reason = mode, reason
        self._note(f"{mode.upper()}: {reason}")

    def pause(self, reason: str) -> None:
        """Pause with ``reason`` shown to the person (a front end's own trouble, say)."""
        self._set_mode("paused", reason)

    def report_error(self, text: str) -> None:
        """An internal error the session survives: pause and show ``text`` (state ``error``, until the
        next episode); the episode is kept and can still be ended, discarded or rewound."""
        self.error = text
        if self.mode != "paused":
            self._set_mode("paused", text)
        else:
            self.reason = text
            self._note(text)

    def close(self) -> None:
        """End the session: an unfinished episode is dropped (it was never written)."""
        if len(self.recording):
            log.warning(
                "teleop: episode %d left unfinished: %d steps not written",
                self.episode_index,
                len(self.recording),
            )

    # ----------------------------------------------------------------- stepping
    def tick(self) -> StepResult | None:
        """One control step of the current mode; ``None`` when nothing moved (paused, idle, over)."""
        ep = self.episode
        if ep.done or self.mode == "paused":
            return None
        if self.mode == "autonomous":
            return self._record(ep.policy_step())
        motion, self.input_seq = self.input.motion()
        if not motion.any() and not self.settings.step_when_idle and self._grip_settle <= 0:
            return None
        self._grip_settle = max(0, self._grip_settle - 1)
        return self._record(ep.external_step(self.human_action(motion), "human"))

    def human_action(self, motion: np.ndarray) -> np.ndarray:
        """The env action ``[dx, dy, dz, dyaw, grip]`` for ``motion`` and the person's gripper command."""
        return np.array([*motion, self.grip], dtype=np.float32)

    def _record(self, res: StepResult) -> StepResult:
        self.recording.add(res)
        self.version += 1
        if res.score is not None and res.threshold is not None:
            self._score_seq += 1
            self.scores.append((self._score_seq, res.step, float(res.score), float(res.threshold)))
        if res.alarm:
            self._on_alarm(res)
        if res.done:
            self._set_mode("paused", f"episode over: {self._outcome_text()}; end it, discard it or rewind")
        if self.step_hook is not None:
            self.step_hook(res)
        return res

    def _on_alarm(self, res: StepResult) -> None:
        self.alarms += 1
        if res.alarm_reason == "progress":  # the progress watchdog: no score at this step
            ev = next(e for e in reversed(self.episode.log.events) if e["kind"] == "alarm")
            what = f"{ev['steps']} steps since checkpoint '{ev['checkpoint']}' > limit {ev['limit']:g}"
        else:
            what = f"score {res.score:.3g} > threshold {res.threshold:.3g}"
        self.last_alarm = {"step": res.step, "score": res.score, "threshold": res.threshold, "text": what}
        text = f"alarm at step {res.step}: {what}"
        if self.auto_pause and self.mode == "autonomous" and not res.done:
            self._set_mode("paused", text + ": rewind, take over (T) or resume (P)")
        else:
            self._note(text)

    def _stage_name(self) -> str:
        """The current stage's name (``done`` once the task is complete)."""
        stage, names = int(self.episode.info.get("stage", 0)), self.episode.base.stage_names
        return names[stage] if 0 <= stage < len(names) else ("done" if stage >= len(names) else "error")

    def _outcome_text(self) -> str:
        info = self.episode.info
        if info.get("sim_error"):
            return f"simulation error ({info['sim_error']})"
        if self.episode.success:
            return "the task succeeded"
        return "time limit reached"

    # ----------------------------------------------------------------- commits
    def _commit(self, outcome: str, ended_by: str, **extra: Any) -> None:
        """Write the episode to the store as ``outcome`` (the next one is not started)."""
        log_ = self.episode.finish()
        extra = {
            "teleop": True,
            "ended_by": ended_by,
            "env_success": self.episode.success,
            "alarms": self.alarms,
            "rewinds": log_.rewinds,
            "events": log_.events,
            **extra,
        }
        with ReplayStore.open_or_create(self.store_path, self.spec) as store:
            info = self.recording.commit(
                store,
                outcome == "success",
                self.episode.log.seed,
                self.policy_version,
                self.settings.round,
                extra,
            )
        self.committed += 1
        self.last_commit = {
            "id": info.id,
            "outcome": outcome,
            "length": info.length,
            "source_counts": info.source_counts,
        }
        self._note(f"committed episode {info.id} as {outcome}: {info.length} steps {info.source_counts}")

    def salvage(self, reason: str) -> dict[str, Any] | None:
        """After a fatal error: write the unfinished episode as a ``failure`` (``extra.ended_by`` is
        ``crash``, ``extra.error`` the reason) so no executed step is lost; returns
        :attr:`last_commit`, or ``None`` when there was nothing to write or the write failed."""
        if not len(self.recording):
            return None
        try:
            self._commit("failure", "crash", error=reason)
        except Exception:  # noqa: BLE001 - already failing; say what is lost instead
            log.exception(
                "teleop: the unfinished episode %d (%d steps) could not be written",
                self.episode_index,
                len(self.recording),
            )
            return None
        self.recording = EpisodeRecording(self.settings.pre_intervention_steps)
        return self.last_commit

    # ----------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """Everything the page shows, JSON-able."""
        ep, mon = self.episode, self.episode.monitor
        return {
            "version": self.version,
            "mode": self.mode,
            "reason": self.reason,
            "resume_mode": self.resume_mode,
            "has_policy": self.has_policy,
            "has_monitor": mon is not None and mon.calibration is not None,
            "auto_pause": self.auto_pause,
            "rewind_mode": self.settings.rewind_mode,
            "camera": self.camera,
            "cameras": self.cameras,
            "grip": "open" if self.grip >= 0 else "closed",
            "episode": {
                "index": self.episode_index,
                "seed": ep.log.seed,
                "step": ep.step_count,
                "max_steps": ep.base.max_steps,
                "done": ep.done,
                "success": ep.success,
                "stage": self._stage_name(),
                "recorded": len(self.recording),
                "source_counts": self.recording.source_counts(),
            },
            "threshold": None
            if mon is None or mon.calibration is None
            else ep.score_threshold(ep.step_count),
            "scores": [list(s) for s in self.scores],
            "alarms": self.alarms,
            "last_alarm": self.last_alarm,
            "checkpoints": [
                {"index": i, "name": c.name, "step": c.step, "similarity": round(c.similarity, 3)}
                for i, c in enumerate(ep.checkpoints)
            ],
            "committed": self.committed,
            "discarded": self.discarded,
            "last_commit": self.last_commit,
            "messages": list(self.messages),
            "error": self.error,
        }
