"""Failure monitoring and rewind: scores, conformal calibration, the checkpoint library, the monitored episode.

``rewind.monitor.scores`` (TIDE, STAC, embedding OOD, random), ``rewind.monitor.conformal`` (split
conformal thresholds and the calibration artifact), ``rewind.monitor.checkpoints`` (labelers, the
library of rewind checkpoints and its online tracker), ``rewind.monitor.episode`` (one monitored
episode with rewind).
"""

from rewind.monitor.checkpoints import CheckpointLibrary, CheckpointTracker, ReachedCheckpoint, build_library
from rewind.monitor.conformal import Calibration, CalibrationError, calibrate, conformal_quantile
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig, StepResult
from rewind.monitor.scores import SCORES, FailureScore, make_score

__all__ = [
    "SCORES",
    "Calibration",
    "CalibrationError",
    "CheckpointLibrary",
    "CheckpointTracker",
    "FailureScore",
    "Monitor",
    "MonitoredEpisode",
    "ReachedCheckpoint",
    "RewindConfig",
    "StepResult",
    "build_library",
    "calibrate",
    "conformal_quantile",
    "make_score",
]
