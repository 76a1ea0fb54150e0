"""Building a monitor from configuration and a calibration folder (what every command shares).

A *calibration folder* (written by ``rewind-calibrate``) holds:

* ``calibration.json``: the calibrated score (:class:`~rewind.monitor.conformal.Calibration`);
* ``checkpoint_library.json`` + ``.safetensors``: the rewind checkpoint templates;
* ``reference_features.safetensors``: training features, for the ``embedding_ood`` score only.

All three are data (JSON, safetensors); loading them executes nothing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from rewind.config import ConfigError, check_choice, check_range, require
from rewind.monitor.checkpoints import (
    LABELERS,
    LIBRARY_JSON,
    MATCH_MODES,
    CheckpointLibrary,
    CheckpointTracker,
)
from rewind.monitor.conformal import Calibration, CalibrationError, min_calibration_size
from rewind.monitor.episode import Monitor
from rewind.monitor.progress import ProgressWatchdog
from rewind.monitor.rules import ARMED_FROM
from rewind.monitor.scores import SCORES, FailureScore, make_score
from rewind.monitor.segments import SegmentThresholds
from rewind.policies.base import ActionChunkPolicy
from rewind.store import Episode
from rewind.train.policy_api import sampler_tag

log = logging.getLogger(__name__)

REFERENCE_FILE = "reference_features.safetensors"


def check_tracking(prefix: str, min_similarity: float, patience: int) -> None:
    """The one check of the checkpoint-tracking settings (``monitor.*`` and teleop's ``tracking.*``)."""
    check_range(f"{prefix}min_similarity", min_similarity, -1, 1)
    check_range(f"{prefix}patience", patience, 1)


def check_progress_alpha(prefix: str, alpha: float | None) -> None:
    """The one check of the progress watchdog's level (``monitor.*`` and teleop's ``tracking.*``)."""
    require(
        alpha is None or 0.0 < alpha < 1.0, f"{prefix}progress_alpha must be null or in (0, 1); got {alpha}"
    )


@dataclass
class TrackingConfig:
    """Rewind checkpoint tracking alone (``rewind-teleop``'s ``tracking`` node: the score and its
    settings come from the calibration folder); the same fields as in :class:`MonitorConfig`.

    Attributes:
        min_similarity: cosine similarity a checkpoint's peak must exceed to count as reached.
        patience: steps without improvement after which a peak counts as reached.
        progress_alpha: the progress watchdog's level (``null``: off), as ``monitor.progress_alpha``.
        armed_from: ``start`` or ``checkpoint``: when the score may alarm, as ``monitor.armed_from``.
        per_segment: one score threshold per rewind-checkpoint segment, as ``monitor.per_segment``.
    """

    min_similarity: float = 0.7
    patience: int = 3
    progress_alpha: float | None = None
    armed_from: str = "start"
    per_segment: bool = False

    def __post_init__(self) -> None:
        check_tracking("tracking.", self.min_similarity, self.patience)
        check_progress_alpha("tracking.", self.progress_alpha)
        check_choice("tracking.armed_from", self.armed_from, ARMED_FROM)


@dataclass
class MonitorConfig:
    """The failure monitor (Hydra group ``monitor=none|tide|stac|embedding_ood|random``).

    Attributes:
        score: failure score name, or ``none`` (no monitor).
        calibration: calibration folder from ``rewind-calibrate`` (needed to raise alarms).
        alpha: target false-alarm rate on successful rollouts (calibration).
        band: calibrate a time-varying band instead of one threshold.
        num_samples: chunks sampled per inference (``stac`` only).
        action_dims: action dimensions ``tide`` and ``stac`` compare (``null``: all). Default: the
            continuous motion ``[dx, dy, dz, dyaw]``, leaving out the binary grip command.
        tide_window: TIDE averaged over the last this many chunk pairs (1: strictly per step).
        tide_samples: TIDE compares the mean of this many chunks sampled per inference (1: the
            executed chunks, Rewind-IL; > 1 for stochastic samplers, e.g. DDIM ``eta = 1``).
        knn: neighbours averaged by ``embedding_ood``.
        labeler: rewind checkpoint labeler (``stage`` or ``gripper``).
        min_similarity: cosine similarity a checkpoint's peak must exceed to count as reached.
        patience: steps without improvement after which a peak counts as reached.
        match: compare with each checkpoint's ``nearest`` labelled example or its single KDE ``template``.
        track_checkpoints: track the library (else only the episode start is a checkpoint).
        armed_from: ``start`` (default): the score alarms from the first step; ``checkpoint``: only
            once a rewind checkpoint past the episode start has been reached (Rewind-IL cannot rewind
            before it). Task-dependent, hence off by default: on NutPeg the alarms before the first
            checkpoint hit successes and failures alike, on Stack3 they are the first sign of a
            failure (docs/loop.md, "What calls RaC's operator in on NutPeg";
            ``bench/alarm_timing.py``). Needs checkpoint tracking. The calibration is unchanged:
            its threshold is the maximum over every step, so the false-alarm bound still holds.
        per_segment: one score threshold per rewind-checkpoint segment: the conformal quantile, at
            ``alpha / K`` for ``K`` segments, of the successful calibration rollouts' maximum score
            while that checkpoint was the latest reached (:mod:`rewind.monitor.segments`); the
            episode-level bound ``alpha`` still holds. Needs checkpoint tracking with the settings
            the calibration ran with, and a calibration without ``band``.
        progress_alpha: also alarm when a segment between reached rewind checkpoints lasts longer
            than the successful calibration rollouts' segments, at this conformal level (the progress
            watchdog, :mod:`rewind.monitor.progress`; needs a calibration made with checkpoint
            tracking and the same tracking settings); ``null`` (default): the score alone alarms.
    """

    score: str = "none"
    calibration: str | None = None
    alpha: float = 0.05
    band: bool = False
    num_samples: int = 32
    action_dims: list[int] | None = field(default_factory=lambda: [0, 1, 2, 3])
    tide_window: int = 2
    tide_samples: int = 1
    knn: int = 5
    labeler: str = "stage"
    min_similarity: float = TrackingConfig.min_similarity
    patience: int = TrackingConfig.patience
    match: str = "nearest"
    track_checkpoints: bool = True
    progress_alpha: float | None = None
    armed_from: str = "start"
    per_segment: bool = False

    def __post_init__(self) -> None:
        valid = ("none", *SCORES)
        require(self.score in valid, f"monitor.score must be one of [{', '.join(valid)}]; got '{self.score}'")
        require(0.0 < self.alpha < 1.0, f"monitor.alpha must be in (0, 1); got {self.alpha}")
        require(self.num_samples >= 2, f"monitor.num_samples must be >= 2; got {self.num_samples}")
        require(self.knn >= 1, f"monitor.knn must be >= 1; got {self.knn}")
        require(
            self.labeler in LABELERS,
            f"monitor.labeler must be one of [{', '.join(LABELERS)}]; got '{self.labeler}'",
        )
        require(
            self.action_dims is None or (len(self.action_dims) > 0 and min(self.action_dims) >= 0),
            f"monitor.action_dims must be null or non-empty indices >= 0; got {self.action_dims}",
        )
        require(self.tide_window >= 1, f"monitor.tide_window must be >= 1; got {self.tide_window}")
        require(self.tide_samples >= 1, f"monitor.tide_samples must be >= 1; got {self.tide_samples}")
        require(
            self.match in MATCH_MODES,
            f"monitor.match must be one of [{', '.join(MATCH_MODES)}]; got '{self.match}'",
        )
        check_tracking("monitor.", self.min_similarity, self.patience)
        check_progress_alpha("monitor.", self.progress_alpha)
        check_choice("monitor.armed_from", self.armed_from, ARMED_FROM)
        require(
            self.armed_from == "start" or self.track_checkpoints,
            "monitor.armed_from=checkpoint needs checkpoint tracking (monitor.track_checkpoints=true)",
        )
        require(
            not self.per_segment or self.track_checkpoints,
            "monitor.per_segment=true needs checkpoint tracking (monitor.track_checkpoints=true)",
        )

    @property
    def enabled(self) -> bool:
        """A score is selected."""
        return self.score != "none"


def tracking_settings(cfg: MonitorConfig) -> dict[str, Any]:
    """The checkpoint tracking settings of ``cfg`` (``CheckpointTracker``'s keyword arguments, and
    what a calibration records its segment timings with)."""
    return {"min_similarity": cfg.min_similarity, "patience": cfg.patience, "match": cfg.match}


def score_params(name: str, cfg: MonitorConfig, seed: int = 0) -> dict[str, Any]:
    """Constructor arguments of score ``name`` from ``cfg`` (what a calibration saves)."""
    return {
        "tide": {"dims": cfg.action_dims, "window": cfg.tide_window, "samples": cfg.tide_samples},
        "stac": {"num_samples": cfg.num_samples, "dims": cfg.action_dims},
        "embedding_ood": {"k": cfg.knn},
        "random": {"seed": seed},
    }[name]


def build_score(name: str, params: dict[str, Any], reference: np.ndarray | None = None) -> FailureScore:
    """The score ``name`` with ``params`` (see :func:`score_params`); ``reference``: ``embedding_ood``."""
    if name == "embedding_ood":
        if reference is None:
            raise ConfigError("monitor.score=embedding_ood needs reference features (calibrate it first)")
        return make_score(name, reference=reference, **params)
    try:
        return make_score(name, **params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"monitor score '{name}': {exc}") from exc


def encode_episodes(policy: ActionChunkPolicy, episodes: list[Episode], stride: int = 2) -> np.ndarray:
    """Encoder features ``[N, F]`` of every ``stride``-th window of ``episodes`` (``embedding_ood``)."""
    keys = list(getattr(policy, "used_obs_keys", None) or episodes[0].obs)
    to = policy.n_obs_steps
    feats = []
    with torch.no_grad():
        for ep in episodes:
            t = np.arange(0, ep.info.length, stride)
            idx = np.clip(t[:, None] + np.arange(-to + 1, 1)[None], 0, None)
            window = {k: torch.as_tensor(ep.obs[k][idx]).float() for k in keys}
            feats.append(policy.encode(window).float().numpy())
    return np.concatenate(feats)


def save_reference(folder: str | Path, features: np.ndarray) -> None:
    """Write ``reference_features.safetensors`` atomically."""
    tmp = Path(folder) / (REFERENCE_FILE + ".tmp")
    save_file({"features": np.ascontiguousarray(features, dtype=np.float32)}, str(tmp))
    tmp.replace(Path(folder) / REFERENCE_FILE)


def load_reference(folder: str | Path) -> np.ndarray | None:
    """The reference features of a calibration folder, or ``None`` when it has none."""
    path = Path(folder) / REFERENCE_FILE
    if not path.exists():
        return None
    try:
        return load_file(str(path))["features"]
    except Exception as exc:  # safetensors raises its own error type on a corrupted header
        raise CalibrationError(f"{path}: not readable reference features ({exc})") from exc


def _checked_calibration(cfg: MonitorConfig, policy: ActionChunkPolicy, weights_hash: str) -> Calibration:
    """``cfg.calibration`` loaded and checked against the score, the weights, ``n_action_steps``,
    ``tide_samples`` and the sampler (a :class:`CalibrationError` that says what differs)."""
    folder = Path(cfg.calibration)  # type: ignore[arg-type]
    cal = Calibration.load(folder)
    if cal.score != cfg.score:
        raise CalibrationError(f"{folder}: calibrated for score '{cal.score}', but monitor.score={cfg.score}")
    cal.check_weights(weights_hash)
    if cal.n_action_steps and cal.n_action_steps != policy.n_action_steps:
        raise CalibrationError(
            f"{folder}: calibrated with n_action_steps={cal.n_action_steps}, but the policy "
            f"executes {policy.n_action_steps}: use the same setting or recalibrate"
        )
    cal_samples = int(cal.score_params.get("samples", 1)) if cal.score == "tide" else cfg.tide_samples
    if cal_samples != cfg.tide_samples:
        raise CalibrationError(
            f"{folder}: calibrated with monitor.tide_samples={cal_samples}, but monitor.tide_samples="
            f"{cfg.tide_samples}: use the same setting or recalibrate"
        )
    if cal.sampler and cal.sampler != sampler_tag(policy):
        raise CalibrationError(
            f"{folder}: calibrated with the policy sampling {cal.sampler}, but it samples "
            f"{sampler_tag(policy)} now: use the same sampler (sampler / inference_steps / ddim_eta) or recalibrate"
        )
    return cal


def load_monitor(
    cfg: MonitorConfig, policy: ActionChunkPolicy, weights_hash: str, seed: int = 0
) -> tuple[Monitor | None, CheckpointTracker | None, dict[str, Any]]:
    """The monitor and checkpoint tracker that ``cfg`` asks for, checked against the policy weights.

    Returns ``(monitor, tracker, info)``; ``monitor`` is ``None`` when ``cfg.score == 'none'``.

    Raises:
        CalibrationError: the calibration is missing, unreadable, for another score or other weights.
    """
    if not cfg.enabled:
        return None, None, {}
    if not cfg.calibration:
        raise CalibrationError(
            f"monitor.score={cfg.score} needs monitor.calibration=FOLDER (from rewind-calibrate)"
        )
    folder = Path(cfg.calibration)
    cal = _checked_calibration(cfg, policy, weights_hash)
    score = build_score(cfg.score, cal.score_params, load_reference(folder))
    tracker = None
    if cfg.track_checkpoints and (folder / LIBRARY_JSON).exists():
        library = CheckpointLibrary.load(folder)
        if library.weights_hash != weights_hash:
            raise CalibrationError(
                f"{folder}: checkpoint library made with other policy weights; recalibrate"
            )
        tracker = CheckpointTracker(library, **tracking_settings(cfg))
    needs_tracker = [
        key
        for key, on in (
            ("monitor.progress_alpha", cfg.progress_alpha is not None),
            (f"monitor.armed_from={cfg.armed_from}", cfg.armed_from != "start"),
            ("monitor.per_segment=true", cfg.per_segment),
        )
        if on
    ]
    if needs_tracker and tracker is None:
        raise ConfigError(
            f"{needs_tracker[0]} needs checkpoint tracking: monitor.track_checkpoints=true and a checkpoint "
            f"library in {folder} (recalibrate)"
        )
    progress = _progress_watchdog(cfg, cal, folder) if cfg.progress_alpha is not None else None
    segments = _segment_thresholds(cfg, cal, folder) if cfg.per_segment else None
    info = {
        "score": cal.score,
        "alpha": cal.alpha,
        "n": cal.n,
        "threshold": cal.threshold,
        "band": cal.band is not None,
        "checkpoints": tracker.library.names if tracker else [],
    }
    if progress is not None:
        info["progress_limits"] = {k: v if math.isfinite(v) else None for k, v in progress.limits.items()}
    if cfg.armed_from != "start":
        info["armed_from"] = cfg.armed_from
    if segments is not None:
        info["segment_thresholds"] = segments.thresholds
    return Monitor(score, cal, progress, cfg.armed_from, segments), tracker, info


def _check_segment_tracking(cfg: MonitorConfig, cal: Calibration, folder: Path, recorded: bool) -> None:
    """Segments (timings or scores) ``recorded`` in ``cal`` must have been cut with ``cfg``'s
    checkpoint tracking settings."""
    want = tracking_settings(cfg)
    if recorded and cal.progress_tracking != want:
        raise CalibrationError(
            f"{folder}: segments cut with checkpoint tracking {cal.progress_tracking}, but the monitor "
            f"tracks with {want}: use the same settings or recalibrate"
        )


def _segment_thresholds(cfg: MonitorConfig, cal: Calibration, folder: Path) -> SegmentThresholds:
    """The per-segment score thresholds (``monitor.per_segment``) from the calibration's segment maxima."""
    _check_segment_tracking(cfg, cal, folder, bool(cal.segment_scores))
    if cal.band is not None:
        raise CalibrationError(
            f"{folder}: calibrated with a time-varying band; monitor.per_segment=true replaces a constant "
            "threshold: recalibrate without monitor.band, or leave monitor.per_segment off"
        )
    segments = SegmentThresholds.fit(cal.segment_scores, cal.alpha, cal.threshold)
    log.info(
        "per-segment thresholds (alpha=%s, each segment at %.4f): %s; constant threshold %.4g elsewhere",
        cal.alpha,
        segments.level,
        {k: round(v, 4) for k, v in segments.thresholds.items()},
        cal.threshold,
    )
    return segments


def _progress_watchdog(cfg: MonitorConfig, cal: Calibration, folder: Path) -> ProgressWatchdog:
    """The progress watchdog at ``cfg.progress_alpha`` from the calibration's segment timings, which
    must have been timed with the same checkpoint tracking settings."""
    _check_segment_tracking(cfg, cal, folder, bool(cal.progress))
    watchdog = ProgressWatchdog.fit(cal.progress, float(cfg.progress_alpha))  # type: ignore[arg-type]
    log.info("progress watchdog (alpha=%s): segment limits %s", watchdog.alpha, watchdog.limits)
    unlimited = [k for k, v in watchdog.limits.items() if not math.isfinite(v)]
    if unlimited:
        log.warning(
            "progress watchdog: no time limit after %s: fewer than %d successful calibration rollouts "
            "reached them (alpha=%s); run more calibration episodes or raise monitor.progress_alpha",
            ", ".join(unlimited),
            min_calibration_size(watchdog.alpha),
            watchdog.alpha,
        )
    return watchdog
