"""The action-chunk policy contract shared by every policy, the monitor and the training loop.

Vocabulary (as in diffusion_policy): ``To = n_obs_steps``, ``H = horizon``, ``Ta = n_action_steps``,
``Da = action_dim``, ``B`` batch (one row per env), ``S`` samples per observation.

Timing, for To = 2, H = 16, Ta = 8, with inference at control step t::

    obs used:            |t-1|t |
    chunk predicted:     |t-1|t |t+1| ... |t+14|          (H actions, starting at t - To + 1)
    actions executed:        |t |t+1| ... |t+7|           (Ta actions, chunk indices To-1 .. To-2+Ta)
    next inference at t+8:   the previous chunk's indices To-1+Ta .. H-1 (times t+8 .. t+14)
                             overlap the new chunk's indices To-1 .. H-1-Ta (T = H - Ta - To + 1)

Training windows from :mod:`rewind.store.windows` follow the same alignment: ``obs[key]``
``[B, To, ...]`` for steps ``t-To+1 .. t`` and ``action`` ``[B, H, Da]`` for steps ``t-To+1 ..``.

Everything a policy takes and returns in :meth:`predict_chunk` and :meth:`select_action` is in
*environment units*; normalization is internal (:class:`~rewind.policies.normalizer.Normalizer`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

Obs = dict[str, torch.Tensor]


@dataclass
class ChunkRecord:
    """A chunk the policy computed for the monitor: ``actions`` ``[B, H, Da]`` (env units, sample 0),
    ``samples`` ``[B, S, H, Da]`` when ``num_samples > 1`` was asked for, ``start_step`` the control
    step of the chunk's index 0 (per env, ``[B]``)."""

    actions: torch.Tensor
    start_step: np.ndarray
    samples: torch.Tensor | None = None


@dataclass
class PolicyState:
    """Rollout state of a policy, for rewind: observation history, action queue, recent chunks."""

    obs_history: list[Obs] = field(default_factory=list)
    action_queue: list[torch.Tensor] = field(default_factory=list)
    chunks: list[ChunkRecord] = field(default_factory=list)
    step: np.ndarray | None = None


class ActionChunkPolicy(nn.Module, ABC):
    """Base class: maps an observation window to a chunk of future actions.

    Subclasses implement :meth:`encode`, :meth:`compute_loss` and :meth:`_sample_chunk`; the base
    class does the rollout bookkeeping (history, queue, chunks exposed to the monitor).

    Shapes:
        obs window   ``dict[key -> [B, To, *shape_k]]``
        encode       ``-> [B, F]`` (frozen features for checkpoint matching and guidance)
        predict_chunk ``-> [B, S, H, Da]``
        select_action ``dict[key -> [B, *shape_k]] -> [B, Da]``
    """

    n_obs_steps: int
    horizon: int
    n_action_steps: int
    action_dim: int

    def __init__(self, n_obs_steps: int, horizon: int, n_action_steps: int, action_dim: int) -> None:
        super().__init__()
        self.n_obs_steps, self.horizon, self.action_dim = n_obs_steps, horizon, action_dim
        self.set_n_action_steps(n_action_steps)
        self._state = PolicyState()

    def set_n_action_steps(self, n_action_steps: int) -> None:
        """Change how many actions of each chunk are executed (an inference-time choice; training is
        unaffected). Must be in ``[1, horizon - n_obs_steps + 1]``. Call :meth:`reset` afterwards."""
        top = self.horizon - self.n_obs_steps + 1
        if not 1 <= n_action_steps <= top:
            raise ValueError(
                f"n_action_steps must be in [1, horizon - n_obs_steps + 1 = {top}]; got {n_action_steps}"
            )
        self.n_action_steps = int(n_action_steps)

    # ----------------------------------------------------------------- to implement
    @abstractmethod
    def encode(self, obs: Obs) -> torch.Tensor:
        """Observation features ``[B, F]`` from a window ``dict[key -> [B, To, ...]]`` (env units)."""

    @abstractmethod
    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scalar training loss for a window batch (``obs/<key>`` or ``obs`` dict, ``action``,
        optional ``sample_weight`` ``[B]`` and ``action_mask`` ``[B, H]``), in env units."""

    @abstractmethod
    def _sample_chunk(self, obs: Obs, num_samples: int, generator: torch.Generator | None) -> torch.Tensor:
        """``[B, S, H, Da]`` chunks in env units."""

    # ----------------------------------------------------------------- inference
    @torch.no_grad()
    def predict_chunk(
        self, obs: Obs, num_samples: int = 1, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Sample ``num_samples`` action chunks per observation window: ``[B, S, H, Da]``."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1; got {num_samples}")
        return self._sample_chunk(obs, num_samples, generator)

    def reset(self) -> None:
        """Forget the history, the action queue and the recorded chunks (start of episode, rewind)."""
        self._state = PolicyState()

    def get_state(self) -> PolicyState:
        """A copy of the rollout state (tensors are shared, lists are copied)."""
        s = self._state
        return PolicyState(
            list(s.obs_history),
            list(s.action_queue),
            list(s.chunks),
            None if s.step is None else s.step.copy(),
        )

    def set_state(self, state: PolicyState) -> None:
        """Restore a state from :meth:`get_state`."""
        self._state = PolicyState(
            list(state.obs_history),
            list(state.action_queue),
            list(state.chunks),
            None if state.step is None else state.step.copy(),
        )

    @property
    def last_chunks(self) -> list[ChunkRecord]:
        """The last (at most two) chunks computed, oldest first: what the failure monitor compares."""
        return self._state.chunks

    @torch.no_grad()
    def select_action(
        self, obs: Obs, num_samples: int = 1, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Next action ``[B, Da]`` for the current observation ``dict[key -> [B, ...]]``.

        Keeps the last ``To`` observations (the first is repeated at episode start), and when the
        action queue is empty predicts a chunk and queues its ``Ta`` executable actions. The same as
        :meth:`observe`, then :meth:`predict_chunk` + :meth:`accept_chunk` when a window came back, then
        :meth:`next_action`: batched runners call these three themselves, so that the episodes due
        for a chunk share one :meth:`predict_chunk` call (each with its own rollout state).
        """
        window = self.observe(obs)
        if window is not None:
            self.accept_chunk(self.predict_chunk(window, num_samples, generator))
        return self.next_action()

    def observe(self, obs: Obs) -> Obs | None:
        """Add ``obs`` ``dict[key -> [B, ...]]`` to the history; returns the window ``[B, To, ...]`` to
        predict a chunk from when one is due (the action queue is empty), else ``None``."""
        s = self._state
        s.obs_history.append(obs)
        if len(s.obs_history) > self.n_obs_steps:
            s.obs_history.pop(0)
        if s.step is None:
            s.step = np.zeros(next(iter(obs.values())).shape[0], dtype=np.int64)
        return None if s.action_queue else self.history_window()

    def history_window(self) -> Obs:
        """The observation window ``dict[key -> [B, To, ...]]`` of the history (first obs repeated)."""
        hist = self._state.obs_history
        hist = [hist[0]] * (self.n_obs_steps - len(hist)) + hist
        return {k: torch.stack([h[k] for h in hist], dim=1) for k in hist[0]}

    def accept_chunk(self, samples: torch.Tensor) -> None:
        """Take ``samples`` ``[B, S, H, Da]`` predicted from :meth:`observe`'s window: record the chunk
        (sample 0) for the monitor and queue its ``Ta`` executable actions."""
        s = self._state
        chunk = samples[:, 0]
        start = s.step - self.n_obs_steps + 1  # type: ignore[operator]
        s.chunks = [*s.chunks[-1:], ChunkRecord(chunk, start, samples if samples.shape[1] > 1 else None)]
        first = self.n_obs_steps - 1
        s.action_queue = [chunk[:, i] for i in range(first, first + self.n_action_steps)]

    def next_action(self) -> torch.Tensor:
        """The next action ``[B, Da]`` (after :meth:`observe` and, when due, :meth:`accept_chunk`)."""
        s = self._state
        s.step = s.step + 1  # type: ignore[operator]
        return s.action_queue.pop(0)

    def queued_actions(self) -> list[torch.Tensor]:
        """The actions ``[B, Da]`` the next calls of :meth:`select_action` will return whatever they
        observe (the rest of the queued chunk), oldest first; empty when the next call may infer.
        Lockstep runners step these in one go (``rewind.rollout.pool.step_chunks``)."""
        return list(self._state.action_queue)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def to_torch_obs(obs: dict[str, Any], device: torch.device | str = "cpu") -> Obs:
    """Numpy observation dict -> float32 (uint8 images kept) tensors on ``device``."""
    out = {}
    for k, v in obs.items():
        t = torch.as_tensor(np.asarray(v))
        out[k] = (t if t.dtype == torch.uint8 else t.float()).to(device)
    return out
