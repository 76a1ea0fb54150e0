"""The progress watchdog: an alarm when a segment between rewind checkpoints takes too long.

TIDE (a consistency score) rises when the policy's chunks disagree; a policy that is consistently
slow, e.g. hovering over the last placement until the episode times out, never raises it. The
watchdog is a second, conformal alarm on the time the episode has spent since its latest reached
rewind checkpoint (or since the rewind that brought it there), using only what the monitor already
has: the online checkpoint tracker's reached checkpoints and the step clock. No simulator state.

Calibration (:func:`segment_maxima`, :func:`progress_thresholds`): for every *successful*
calibration rollout and every checkpoint it reached (``start`` included), the most steps it spent
after reaching it before the next was reached or the episode ended; per checkpoint, the split
conformal quantile of those maxima at ``alpha`` is that segment's time limit. On a new successful
rollout, each segment then alarms with probability at most ``alpha`` (exchangeability as for TIDE).

Online (:class:`ProgressWatchdog`), the episode compares ``steps since the segment began`` with the
limit of its latest reached checkpoint after every policy step that did not end the episode; a
segment begins at the checkpoint's peak step (when it is reached or restored to) or when a ``drive``
rewind arrives. A checkpoint with too few calibration segments for ``alpha`` has no limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewind.monitor.conformal import CalibrationError, conformal_quantile, min_calibration_size

START = "start"


def checkpoint_peaks(events: Sequence[dict[str, Any]]) -> list[tuple[str, int]]:
    """``(START, 0)``, then each reached checkpoint's ``(name, peak step)`` from a rollout's event log:
    where its segments begin, for the progress watchdog and the per-segment score thresholds.

    Raises:
        ValueError: the log has a rewind (segments are calibrated on rollouts without rewinds).
    """
    if any(e["kind"] == "rewind" for e in events):
        raise ValueError("segment calibration needs rollouts without rewinds")
    return [(START, 0)] + [(e["checkpoint"], int(e["step"])) for e in events if e["kind"] == "checkpoint"]


def segment_maxima(events: Sequence[dict[str, Any]], length: int, patience: int) -> dict[str, int]:
    """Per reached checkpoint of one rollout without rewinds, the most steps the watchdog would have
    counted in its segment (see the module docstring).

    Args:
        events: the rollout's event log (its ``checkpoint`` events: the peak step of each).
        length: steps the rollout executed; patience: the tracker's ``patience`` (a checkpoint is
            reached ``patience`` steps after its peak, so its predecessor's segment lasts until then).

    Raises:
        ValueError: the log has a rewind (segments are calibrated on rollouts without rewinds).
    """
    peaks = checkpoint_peaks(events)
    out: dict[str, int] = {}
    for (name, peak), nxt in zip(peaks, [*peaks[1:], None], strict=True):
        # the last state checked in the segment: one before the next is reached, or the last non-final
        last = nxt[1] + patience - 1 if nxt is not None else length - 1
        if last > peak:
            out[name] = max(out.get(name, 0), last - peak)
    return out


def progress_thresholds(maxima: dict[str, list[int]], alpha: float) -> dict[str, float]:
    """The conformal time limit of each checkpoint's segment (``inf`` with too few segments)."""
    need = min_calibration_size(alpha)
    return {
        name: conformal_quantile(values, alpha) if len(values) >= need else math.inf
        for name, values in maxima.items()
    }


@dataclass
class ProgressWatchdog:
    """Per-checkpoint segment time limits (steps); ``alpha`` as calibrated.

    Attributes:
        limits: checkpoint name -> steps a segment from it may last (``inf``: no limit).
        alpha: the conformal level the limits were fitted at.
    """

    limits: dict[str, float]
    alpha: float

    @classmethod
    def fit(cls, maxima: dict[str, list[int]], alpha: float) -> ProgressWatchdog:
        """Limits from per-checkpoint segment maxima of successful calibration rollouts."""
        if not maxima:
            raise CalibrationError(
                "monitor.progress_alpha: the calibration has no checkpoint timings "
                "(made before 2026-12-05 or without a checkpoint library): recalibrate with rewind-calibrate"
            )
        return cls(progress_thresholds(maxima, alpha), alpha)

    def limit(self, checkpoint: str) -> float:
        """Steps a segment that began at ``checkpoint`` may last (``inf`` when it has none)."""
        return self.limits.get(checkpoint, math.inf)

    def overdue(self, checkpoint: str, elapsed: int) -> bool:
        """The segment from ``checkpoint`` has lasted ``elapsed`` steps, more than its limit."""
        return elapsed > self.limit(checkpoint)
