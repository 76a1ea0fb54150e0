"""Recording monitored episodes into a replay store with per-step source labels.

:class:`EpisodeRecording` buffers the :class:`~rewind.monitor.runner.StepResult` of every step, in
the order the env saw them, and commits the episode atomically to a
:class:`~rewind.store.ReplayStore` (nothing is written until :meth:`EpisodeRecording.commit`, so an
episode cut short — a killed process, a closed browser — leaves the store as it was).

Labels follow the store vocabulary: ``policy`` for the policy's steps, ``recovery`` (a rewind driven
back), ``correction`` (completing the stage), ``human`` (a person's free teleop), and
``pre_intervention`` for the last ``pre_intervention_steps`` policy steps before each intervention
(Sirius). Steps undone by a ``restore`` rewind stay in the record: they were executed and are data;
the episode's ``extra`` holds the event log so they can be told apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rewind.monitor.runner import StepResult
from rewind.store import EpisodeInfo, ReplayStore

#: Sources that count as operator (or person) effort: the cost axis of every comparison.
OPERATOR_SOURCES = frozenset({"recovery", "correction", "human"})


class EpisodeRecording:
    """Buffered steps of one episode, committed with their labels.

    Args:
        pre_intervention_steps: policy steps before an intervention relabelled ``pre_intervention``.
    """

    def __init__(self, pre_intervention_steps: int = 15) -> None:
        self.pre_intervention_steps = int(pre_intervention_steps)
        self.steps: list[StepResult] = []
        self.labels: list[str] = []

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, res: StepResult) -> None:
        """Append a step; an intervention's first step relabels the policy steps just before it.
        A step whose action was rejected (non-finite) is not data and is skipped."""
        if not np.isfinite(res.action).all():
            return
        if res.source in OPERATOR_SOURCES and (not self.labels or self.labels[-1] not in OPERATOR_SOURCES):
            for i in range(
                len(self.labels) - 1, max(-1, len(self.labels) - 1 - self.pre_intervention_steps), -1
            ):
                if self.labels[i] != "policy":
                    break
                self.labels[i] = "pre_intervention"
        self.steps.append(res)
        self.labels.append(res.source)

    @property
    def operator_steps(self) -> int:
        """Steps driven by an operator or a person."""
        return sum(lbl in OPERATOR_SOURCES for lbl in self.labels)

    def label_counts(self) -> dict[str, int]:
        """Number of steps per label."""
        out: dict[str, int] = {}
        for lbl in self.labels:
            out[lbl] = out.get(lbl, 0) + 1
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
        """Write the episode (all steps, their labels) to ``store`` in one atomic commit."""
        with store.episode(seed=seed, policy_version=policy_version, round=round, success=bool(success),
                           n_operator_steps=self.operator_steps, extra=extra or {}) as writer:  # fmt: skip
            for res, label in zip(self.steps, self.labels, strict=True):
                writer.add(res.obs, res.action, res.state, label)
        assert writer.info is not None
        return writer.info
