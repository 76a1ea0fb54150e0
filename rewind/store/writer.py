"""Step-by-step episode writer returned by :meth:`rewind.store.ReplayStore.episode`."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol

import numpy as np

from rewind.store.schema import (
    EpisodeInfo,
    StoreError,
    StoreSpec,
    source_code,
    validate_episode_arrays,
    validate_step,
)


class CommitTarget(Protocol):
    """What a writer needs from its store (:class:`rewind.store.ReplayStore`): the layout and the
    atomic commit of a whole episode."""

    @property
    def spec(self) -> StoreSpec:
        """The store's layout."""

    def _commit(self, arrays: dict[str, Any], meta: dict[str, Any]) -> EpisodeInfo:
        """Write and index one episode atomically."""


class EpisodeWriter:
    """Buffers one episode step by step; :meth:`commit` makes it visible atomically.

    :meth:`add` checks keys, shapes, dtypes and the source label at once (a rejected step is not
    buffered); NaN/inf are caught at :meth:`commit`, which then writes nothing. Used as a
    context manager it commits on a clean exit and discards if the block raises.
    """

    def __init__(self, store: CommitTarget, meta: Mapping[str, Any]) -> None:
        """Internal; use :meth:`ReplayStore.episode`."""
        self._store = store
        self.meta: dict[str, Any] = dict(meta)
        self._obs: dict[str, list[np.ndarray]] = {k: [] for k in store.spec.obs}
        self._actions: list[np.ndarray] = []
        self._states: list[np.ndarray] = []
        self._sources: list[int] = []
        self._rewards: list[float] = []
        self._closed = False
        self.info: EpisodeInfo | None = None

    def __len__(self) -> int:
        """Number of buffered steps."""
        return len(self._actions)

    def add(self, obs: Mapping[str, Any], action: Any, state: Any, source: str, reward: float = 0.0) -> None:
        """Append one step: ``obs[k]`` of the spec's per-step shape, action ``[Da]``, state ``[Ds]``.

        Raises:
            StoreError: naming the field, if a shape/dtype/key or the source label is wrong.
        """
        if self._closed:
            raise StoreError("episode: writer already committed or discarded")
        obs_n, action_n, state_n = validate_step(self._store.spec, obs, action, state)
        code = source_code(source)
        reward_f = float(reward)
        if not np.isfinite(reward_f):
            raise StoreError(f"reward: must be finite, got {reward!r}")
        for key, value in obs_n.items():
            self._obs[key].append(value)
        self._actions.append(action_n)
        self._states.append(state_n)
        self._sources.append(code)
        self._rewards.append(reward_f)

    def commit(self) -> EpisodeInfo:
        """Write and commit the buffered steps; returns the new :class:`EpisodeInfo`."""
        if self._closed:
            raise StoreError("episode: writer already committed or discarded")
        if not self._actions:
            raise StoreError("episode: no steps were added; nothing to commit")
        self._closed = True
        arrays = validate_episode_arrays(
            self._store.spec,
            {k: np.stack(v) for k, v in self._obs.items()},
            np.stack(self._actions),
            np.stack(self._states),
            np.asarray(self._sources, np.uint8),
            np.asarray(self._rewards, np.float32),
        )
        self.info = self._store._commit(arrays, self.meta)
        return self.info

    def discard(self) -> None:
        """Drop the buffered steps; nothing is written (idempotent)."""
        self._closed = True
        self._obs = {k: [] for k in self._obs}
        self._actions, self._states, self._sources, self._rewards = [], [], [], []

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.discard()
        elif not self._closed:
            self.commit()
