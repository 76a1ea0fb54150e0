"""One score threshold per rewind-checkpoint segment (``monitor.per_segment=true``).

The constant threshold is the conformal quantile of each successful calibration rollout's maximum
score over the whole episode. Where a policy's score is high on successes in one part of the task
only (on NutPeg, the first chunk comparisons before the grasp: ``bench/alarm_timing.py``), that part
sets the threshold for every other part, and alarms there hit successes and failures alike.

Per segment (a Mondrian split of the same calibration by the latest reached rewind checkpoint):
for every successful calibration rollout and every checkpoint ``c`` it reached (``start``
included), the maximum score over the steps scored while ``c`` was the latest reached checkpoint;
per checkpoint, the split conformal quantile of those maxima at ``alpha / K``, where ``K`` is the
number of checkpoints with calibration segments. A fresh successful rollout then alarms in segment
``c`` with probability at most ``alpha / K``, so in the whole episode with probability at most
``alpha`` (union bound): the constant threshold's guarantee, with each part of the task held to its
own typical score. A checkpoint with too few calibration segments for ``alpha / K`` (or none)
keeps the constant threshold.

Which steps belong to which segment follows the online tracker: a checkpoint is reached ``patience``
steps after its peak (the step its ``checkpoint`` event records), and a step's score is compared
before the tracker sees that step, so the score of step ``t`` belongs to the latest checkpoint with
``peak + patience <= t``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewind.monitor.conformal import CalibrationError, conformal_quantile, min_calibration_size
from rewind.monitor.progress import START, checkpoint_peaks


def segment_score_maxima(
    events: Sequence[dict[str, Any]], trace: Sequence[float | None], patience: int
) -> dict[str, float]:
    """Per reached checkpoint of one rollout without rewinds, its segment's maximum score (segments
    without a scored step are left out).

    Args:
        events: the rollout's event log (its ``checkpoint`` events: the peak step of each).
        trace: the score per control step (``None`` where the score was not computed).
        patience: the tracker's ``patience``.

    Raises:
        ValueError: the log has a rewind (segments are calibrated on rollouts without rewinds).
    """
    # the start counts from step 0, a checkpoint from patience steps after its peak (when it is reached)
    starts = [(START, 0)] + [(name, peak + patience) for name, peak in checkpoint_peaks(events)[1:]]
    out: dict[str, float] = {}
    for (name, first), nxt in zip(starts, [*starts[1:], None], strict=True):
        end = nxt[1] if nxt is not None else len(trace)
        values = [float(v) for v in trace[first:end] if v is not None]
        if values:
            out[name] = max(out.get(name, -math.inf), max(values))
    return out


@dataclass
class SegmentThresholds:
    """Per-checkpoint score thresholds, each at level ``alpha / K`` (see the module docstring).

    Attributes:
        thresholds: checkpoint name -> threshold (a checkpoint with too few calibration segments for
            ``level`` is left out and keeps ``fallback``).
        fallback: the constant threshold, for checkpoints without their own.
        alpha: the episode-level level; level: ``alpha / K``, what each segment is held to.
    """

    thresholds: dict[str, float]
    fallback: float
    alpha: float
    level: float

    @classmethod
    def fit(cls, maxima: dict[str, list[float]], alpha: float, fallback: float) -> SegmentThresholds:
        """Thresholds from per-checkpoint segment maxima of successful calibration rollouts."""
        if not maxima:
            raise CalibrationError(
                "monitor.per_segment: the calibration has no per-segment scores (made before "
                "2026-12-07 or without a checkpoint library): recalibrate with rewind-calibrate"
            )
        level = alpha / len(maxima)
        need = min_calibration_size(level)
        fitted = {k: conformal_quantile(v, level) for k, v in maxima.items() if len(v) >= need}
        return cls(fitted, float(fallback), alpha, level)

    def threshold(self, checkpoint: str | None) -> float:
        """The threshold while ``checkpoint`` is the latest reached (``fallback`` when it has none)."""
        return self.thresholds.get(checkpoint or START, self.fallback)
