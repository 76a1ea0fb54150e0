"""Recording monitored episodes into a replay store with each step's source.

:class:`EpisodeRecording` buffers the :class:`~rewind.monitor.episode.StepResult` of every step, in
the order the env saw them, and commits the episode atomically to a
:class:`~rewind.store.ReplayStore` (nothing is written until :meth:`EpisodeRecording.commit`, so an
episode cut short — a killed process, a closed browser — leaves the store as it was).

Sources follow the store vocabulary: ``policy`` for the policy's steps, ``recovery`` (a rewind driven
back), ``correction`` (completing the stage), ``human`` (a person's free teleop), and
``pre_intervention`` for the last ``pre_intervention_steps`` policy steps before each intervention
(Sirius).

**Segments.** A ``restore`` rewind jumps back in time: the steps after the rewind checkpoint were
executed and then undone. They stay in the record (they are data, e.g. for failure analysis), in the
order the env saw them, but the record is cut into *segments*, runs of physically continuous steps,
and the undone steps form segments of their own. The episode's ``extra`` holds
``segment_starts`` (record indices where a segment begins, the first is 0) and ``undone_segments``
(indices into that list). Training windows never cross a segment boundary and skip undone segments
unless asked to keep them (:meth:`rewind.store.windows.ReplayBuffer.from_store`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rewind.monitor.episode import StepResult
from rewind.store import EpisodeInfo, ReplayStore
from rewind.store.windows import INTERVENTION_SOURCES

#: Sources that count as operator (or person) effort: the cost axis of every comparison.
OPERATOR_SOURCES = frozenset(INTERVENTION_SOURCES)


class EpisodeRecording:
    """Buffered steps of one episode, committed with their sources.

    Args:
        pre_intervention_steps: policy steps before an intervention relabelled ``pre_intervention``.
    """

    def __init__(self, pre_intervention_steps: int = 15) -> None:
        self.pre_intervention_steps = int(pre_intervention_steps)
        self.steps: list[StepResult] = []
        self.sources: list[str] = []
        self.segment_starts: list[int] = []
        self.undone_segments: list[int] = []

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, res: StepResult) -> None:
        """Append a step; an intervention's first step relabels the policy steps just before it.
        A step whose action was rejected (non-finite) is not data and is skipped."""
        if not np.isfinite(res.action).all():
            return
        self._track_segments(res.step)
        if res.source in OPERATOR_SOURCES and (not self.sources or self.sources[-1] not in OPERATOR_SOURCES):
            for i in range(
                len(self.sources) - 1, max(-1, len(self.sources) - 1 - self.pre_intervention_steps), -1
            ):
                if self.sources[i] != "policy":
                    break
                self.sources[i] = "pre_intervention"
        self.steps.append(res)
        self.sources.append(res.source)

    def _track_segments(self, step: int) -> None:
        """Open a new segment when ``step`` does not follow the previous step (a ``restore`` rewind
        went back to the state before ``step``); the previous segment's steps from ``step`` on were
        undone and are split off into a segment of their own."""
        if not self.steps:
            self.segment_starts = [0]
            return
        prev = self.steps[-1].step
        if step == prev + 1:
            return
        begin = self.segment_starts[-1]
        first_step = self.steps[begin].step
        if first_step < step <= prev:  # keep the prefix before the checkpoint as its own segment
            self.segment_starts.append(begin + (step - first_step))
        if step <= prev:
            self.undone_segments.append(len(self.segment_starts) - 1)
        self.segment_starts.append(len(self.steps))

    def trim_segments(self) -> None:
        """Forget segments that start past the last recorded step (after steps were removed)."""
        n = len(self.steps)
        self.segment_starts = [b for b in self.segment_starts if b < n] or ([0] if n else [])
        self.undone_segments = [i for i in self.undone_segments if i < len(self.segment_starts)]

    def segments_extra(self) -> dict[str, list[int]]:
        """What :meth:`commit` adds to the episode's ``extra`` when the record has several segments."""
        if len(self.segment_starts) <= 1:
            return {}
        return {"segment_starts": list(self.segment_starts), "undone_segments": list(self.undone_segments)}

    @property
    def operator_steps(self) -> int:
        """Steps driven by an operator or a person."""
        return sum(src in OPERATOR_SOURCES for src in self.sources)

    def source_counts(self) -> dict[str, int]:
        """Number of steps per source."""
        out: dict[str, int] = {}
        for src in self.sources:
            out[src] = out.get(src, 0) + 1
        return out

    def commit(
        self,
        store: ReplayStore,
        success: bool,
        seed: int | None = None,
        policy_version: str = "",
        round: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> EpisodeInfo:
        """Write the episode (all steps, their sources, its segments) to ``store`` in one atomic commit."""
        extra = {**(extra or {}), **self.segments_extra()}
        with store.episode(
            seed=seed,
            policy_version=policy_version,
            round=round,
            success=bool(success),
            n_operator_steps=self.operator_steps,
            extra=extra,
        ) as writer:
            for res, source in zip(self.steps, self.sources, strict=True):
                writer.add(res.obs, res.action, res.state, source)
        assert writer.info is not None
        return writer.info
