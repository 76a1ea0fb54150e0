"""Rollout observers of ``rewind-eval``: MP4 videos with the stage drawn on, and rollouts into a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.eval.video import annotate, require_rendering, write_video
from rewind.lockstep import EpisodeRecord
from rewind.store import ReplayStore
from rewind.store.store import EpisodeWriter


class VideoRecorder:
    """Records the episodes whose seed is in ``seeds`` to ``<folder>/episode_<seed>.mp4``.

    Frames come from ``env.render()`` (front camera); each shows the seed, step and stage name.
    """

    def __init__(self, folder: Path, seeds: set[int], fps: int = 20) -> None:
        require_rendering()  # one line naming the fix, not a GL traceback at the first frame
        self.folder, self.seeds, self.fps = Path(folder), set(seeds), fps
        self._frames: dict[int, list[np.ndarray]] = {}
        self._seed: dict[int, int] = {}
        self.paths: list[str] = []

    def _frame(self, i: int, env: gym.Env, step: int, stage_name: str) -> None:
        label = f"seed {self._seed[i]}  t={step}  {stage_name}"
        self._frames[i].append(annotate(env.render(), label))

    def on_reset(self, i: int, env: gym.Env, seed: int, info: dict[str, Any]) -> None:
        """Start a video for env ``i`` when its seed is selected."""
        self._frames.pop(i, None)
        if seed in self.seeds:
            self._seed[i] = seed
            self._frames[i] = []
            self._frame(i, env, 0, info["stage_name"])

    def before_step(self, i: int, env: gym.Env, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        """Nothing to do before a step."""

    def after_step(self, i: int, env: gym.Env, reward: float, info: dict[str, Any]) -> None:
        """Add the frame after the step."""
        if i in self._frames:
            name = info.get("stage_name") or ("sim error" if info.get("sim_error") else "?")
            self._frame(i, env, len(self._frames[i]), name)

    def on_end(self, i: int, record: EpisodeRecord) -> None:
        """Encode the episode's MP4 and note its path in the record."""
        frames = self._frames.pop(i, None)
        if frames:
            path = write_video(self.folder / f"episode_{record.seed:06d}.mp4", frames, self.fps)
            record.video = str(path)
            self.paths.append(str(path))


class StoreRecorder:
    """Writes every rollout into a replay store, steps labelled ``policy``.

    Episode metadata: ``seed``, ``policy_version`` (the weights hash), ``round``, ``success``.
    """

    def __init__(self, store: ReplayStore, policy_version: str, round_: int = 0) -> None:
        self.store, self.policy_version, self.round = store, policy_version, round_
        self._writers: dict[int, EpisodeWriter] = {}
        self._pending: dict[int, tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]] = {}
        self.episode_ids: list[int] = []

    def on_reset(self, i: int, env: gym.Env, seed: int, info: dict[str, Any]) -> None:
        """Open a writer for env ``i``'s new episode."""
        meta = {"seed": seed, "policy_version": self.policy_version, "round": self.round, "success": False}
        self._writers[i] = self.store.episode(**meta)

    def before_step(self, i: int, env: gym.Env, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        """Remember the observation, the executed (clipped) action and the simulator state."""
        executed = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        self._pending[i] = (obs, executed, env.unwrapped.physics_state())

    def after_step(self, i: int, env: gym.Env, reward: float, info: dict[str, Any]) -> None:
        """Add the step (dropped when the action was rejected as non-finite)."""
        obs, action, state = self._pending.pop(i)
        if np.isfinite(action).all():
            self._writers[i].add(obs, action, state, "policy", reward)

    def on_end(self, i: int, record: EpisodeRecord) -> None:
        """Commit the episode with its outcome."""
        writer = self._writers.pop(i)
        if len(writer) == 0:
            writer.discard()
            return
        writer.meta["success"] = record.success
        self.episode_ids.append(writer.commit().id)
