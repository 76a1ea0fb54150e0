"""Episodes written where a rollout runs, committed where the store is (the driver of a Ray run).

A Ray actor has no replay store: the driver is its only writer, so a killed actor can never leave a
half-written episode behind. :class:`DeferredStore` stands in for :class:`~rewind.store.ReplayStore`
inside the actor. Everything that records into a store (``store.episode(...)`` writers, e.g.
``rewind.eval.observers.StoreRecorder`` and ``rewind.monitor.recording.EpisodeRecording.commit``)
writes to it unchanged; each commit is checked against the layout there (the same checks as the
real store) and kept as arrays plus metadata (:class:`PendingEpisode`, picklable). Back on the
driver, :meth:`PendingEpisode.commit_into` writes it to the real store in one atomic commit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewind.store import EpisodeInfo, EpisodeWriter, ReplayStore, StoreSpec
from rewind.store.schema import SOURCES, normalize_meta


@dataclass
class PendingEpisode:
    """One episode committed to a :class:`DeferredStore`: checked arrays and metadata, not yet stored.

    Attributes:
        arrays: ``obs`` (key -> ``[T, ...]``), ``actions``, ``states``, ``sources`` (codes), ``rewards``.
        meta: the episode's metadata (``seed``, ``policy_version``, ``round``, ``success``, ...).
    """

    arrays: dict[str, Any]
    meta: dict[str, Any]

    @property
    def seed(self) -> int | None:
        """The episode's env seed."""
        return self.meta.get("seed")

    def commit_into(self, store: ReplayStore) -> EpisodeInfo:
        """Write the episode into ``store`` (validated again there) in one atomic commit."""
        a = self.arrays
        return store.add_episode(a["obs"], a["actions"], a["states"], a["sources"], a["rewards"], self.meta)


class DeferredStore:
    """A write-only stand-in for a :class:`~rewind.store.ReplayStore` with layout ``spec``: commits are
    kept in :attr:`pending`, in commit order (see the module docstring)."""

    def __init__(self, spec: StoreSpec) -> None:
        self._spec = spec
        self.pending: list[PendingEpisode] = []

    @property
    def spec(self) -> StoreSpec:
        """The layout episodes are checked against."""
        return self._spec

    def episode(self, **meta: Any) -> EpisodeWriter:
        """A step-by-step writer, as :meth:`ReplayStore.episode`."""
        return EpisodeWriter(self, meta)

    def _commit(self, arrays: dict[str, Any], meta: dict[str, Any]) -> EpisodeInfo:
        """Keep one checked episode; the returned info has ``id = -1`` (not in a store yet)."""
        length = int(arrays["actions"].shape[0])
        checked = normalize_meta(meta, self._spec, length)
        self.pending.append(PendingEpisode(arrays, dict(meta)))
        codes, counts = np.unique(arrays["sources"], return_counts=True)
        return EpisodeInfo(
            id=-1,
            length=length,
            source_counts={SOURCES[c]: int(n) for c, n in zip(codes, counts, strict=True)},
            created_at=time.time(),
            file="",
            **checked,
        )

    def take(self) -> list[PendingEpisode]:
        """The episodes kept so far (and forget them)."""
        out, self.pending = self.pending, []
        return out
