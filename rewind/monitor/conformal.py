"""Split conformal calibration of a failure score, the calibration artifact, and the alarm rule.

Constant threshold (Rewind-IL): from ``n`` successful calibration rollouts take each episode's
maximum score ``S_i``; the threshold is the ``ceil((n+1)(1-alpha))``-th smallest ``S_i``. On a fresh
successful rollout exchangeable with the calibration ones, ``P(max_t score_t > q) <= alpha``: the
episode-level false-alarm rate is at most ``alpha``.

Time-varying band (``band=true``, in the spirit of FAIL-Detect): the successful rollouts are split
in two halves. The first gives a per-step centre ``m_t`` and scale ``s_t`` of the score; on the
second, each episode's statistic is ``max_t (score_t - m_t) / s_t`` and its split conformal quantile
``q`` gives per-step thresholds ``m_t + q s_t``. The same episode-level guarantee holds (the max over
steps is what is calibrated), while the band follows the score's typical shape over an episode.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewind.config import ConfigError
from rewind.utils.io import atomic_write_text

CALIBRATION_FILE = "calibration.json"
CALIBRATION_KIND = "rewind.calibration"
CALIBRATION_VERSION = 1


class CalibrationError(ConfigError):
    """A calibration cannot be made or does not apply (too few rollouts, other weights, bad file)."""


def min_calibration_size(alpha: float) -> int:
    """Smallest ``n`` for which the split conformal quantile exists: ``ceil((1 - alpha) / alpha)``."""
    if not 0.0 < alpha < 1.0:
        raise CalibrationError(f"alpha must be in (0, 1); got {alpha}")
    return math.ceil((1.0 - alpha) / alpha - 1e-9)


def conformal_quantile(scores: Sequence[float], alpha: float) -> float:
    """The ``ceil((n+1)(1-alpha))``-th smallest of ``scores`` (split conformal threshold)."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    n, need = len(s), min_calibration_size(alpha)
    if n < need:
        raise CalibrationError(
            f"alpha={alpha} needs at least {need} successful calibration rollouts; got {n} "
            f"(run more calibration episodes or raise alpha)"
        )
    if not np.isfinite(s).all():
        raise CalibrationError("calibration scores contain NaN or inf")
    k = math.ceil((n + 1) * (1.0 - alpha) - 1e-9)
    return float(s[k - 1])


def held(trace: Sequence[float | None]) -> np.ndarray:
    """Per-control-step score: each new value held until the next one (0 before the first)."""
    out = np.zeros(len(trace))
    last = 0.0
    for i, v in enumerate(trace):
        if v is not None:
            last = float(v)
        out[i] = last
    return out


def _per_step(traces: list[np.ndarray], length: int, fn: Any) -> np.ndarray:
    """``fn`` over the traces still running at each step, carried forward past the longest one."""
    out = np.zeros(length)
    for t in range(length):
        vals = [tr[t] for tr in traces if len(tr) > t]
        out[t] = fn(vals) if vals else out[t - 1]
    return out


def band_thresholds(
    traces: list[np.ndarray], alpha: float, min_scale: float = 1e-6
) -> tuple[np.ndarray, float]:
    """Per-step thresholds ``m_t + q s_t`` from successful held traces (see the module docstring)."""
    half = len(traces) // 2
    fit, cal = traces[:half], traces[half:]
    if not fit:
        raise CalibrationError("the time-varying band needs at least 2 successful rollouts")
    length = max(len(t) for t in traces)
    centre = _per_step(fit, length, np.mean)
    scale = np.maximum(_per_step(fit, length, np.std), max(min_scale, 1e-3 * float(np.abs(centre).max())))
    stats = [float(np.max((tr - centre[: len(tr)]) / scale[: len(tr)])) for tr in cal]
    try:
        q = conformal_quantile(stats, alpha)
    except CalibrationError as exc:
        raise CalibrationError(f"{exc} (the band uses half of them; need twice as many)") from exc
    return centre + q * scale, q


@dataclass
class Calibration:
    """A calibrated failure score for one set of policy weights (saved as ``calibration.json``).

    Attributes:
        score: failure score name (:data:`rewind.monitor.scores.SCORES`).
        alpha: target episode-level false-alarm rate on successful rollouts.
        n: successful calibration rollouts used.
        threshold: the constant threshold (with a band: its largest value).
        band: per-control-step thresholds (time-varying band) or ``None``.
        weights_hash: sha256 of the policy weights file it was made for.
        score_params: the score's settings (``num_samples``...).
        env: task name; n_action_steps: the executed actions per chunk it was made with.
        sampler: how the policy sampled chunks (``rewind.train.policy_api.sampler_tag``; ``""``: not
            recorded, calibrations made before 2026-12-05).
        scores: the calibration statistics (per-episode maxima), for plots and audits.
        progress: per reached rewind checkpoint, the segment maxima (steps) of the successful
            rollouts (:mod:`rewind.monitor.progress`; ``{}``: not recorded, calibrations made before
            2026-12-05 or without a checkpoint library).
        progress_tracking: the checkpoint tracking settings the segments were timed with.
        segment_scores: per reached rewind checkpoint, the successful rollouts' maximum score in its
            segment (:mod:`rewind.monitor.segments`, for ``monitor.per_segment``; ``{}``: not
            recorded, calibrations made before 2026-12-07 or without a checkpoint library).
    """

    score: str
    alpha: float
    n: int
    threshold: float
    weights_hash: str
    band: list[float] | None = None
    score_params: dict[str, Any] = field(default_factory=dict)
    env: str = ""
    n_action_steps: int = 0
    sampler: str = ""
    scores: list[float] = field(default_factory=list)
    progress: dict[str, list[int]] = field(default_factory=dict)
    progress_tracking: dict[str, Any] = field(default_factory=dict)
    segment_scores: dict[str, list[float]] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def threshold_at(self, step: int) -> float:
        """The alarm threshold at control step ``step`` of an episode."""
        if self.band is None:
            return self.threshold
        return self.band[min(step, len(self.band) - 1)]

    def check_weights(self, weights_hash: str) -> None:
        """Refuse to monitor weights other than the calibrated ones."""
        if weights_hash != self.weights_hash:
            raise CalibrationError(
                f"calibration was made for policy weights sha256 {self.weights_hash[:12]}..., but the "
                f"policy weights are {weights_hash[:12]}...: recalibrate with rewind-calibrate"
            )

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/calibration.json`` atomically; returns its path."""
        path = Path(folder) / CALIBRATION_FILE
        body = {"kind": CALIBRATION_KIND, "version": CALIBRATION_VERSION, **asdict(self)}
        atomic_write_text(path, json.dumps(body, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration (a ``calibration.json`` or the folder holding one); names what is wrong."""
        p = Path(path)
        if p.is_dir():
            p = p / CALIBRATION_FILE
        try:
            body = json.loads(p.read_text())
        except FileNotFoundError as exc:
            raise CalibrationError(f"{p}: no calibration file (run rewind-calibrate)") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CalibrationError(f"{p}: not a readable calibration JSON ({exc})") from exc
        if not isinstance(body, dict) or body.get("kind") != CALIBRATION_KIND:
            raise CalibrationError(f"{p}: not a rewind calibration file")
        if body.get("version") != CALIBRATION_VERSION:
            raise CalibrationError(
                f"{p}: calibration version {body.get('version')}; this rewind reads {CALIBRATION_VERSION}"
            )
        fields = {k: v for k, v in body.items() if k not in ("kind", "version")}
        try:
            cal = cls(**fields)
        except TypeError as exc:
            raise CalibrationError(f"{p}: {exc}") from exc
        if not (isinstance(cal.threshold, (int, float)) and math.isfinite(cal.threshold)):
            raise CalibrationError(f"{p}: threshold must be a finite number; got {cal.threshold!r}")
        return cal


def calibrate(
    episode_traces: list[list[float | None]],
    score: str,
    alpha: float,
    weights_hash: str,
    band: bool = False,
    **meta: Any,
) -> Calibration:
    """A :class:`Calibration` from the score traces (one value or ``None`` per control step) of
    *successful* rollouts. Cumulative and per-step scores alike use the episode maximum."""
    traces = [held(t) for t in episode_traces if len(t)]
    maxima = [float(t.max()) for t in traces]
    if band:
        thresholds, _ = band_thresholds(traces, alpha)
        return Calibration(
            score,
            alpha,
            len(traces),
            float(thresholds.max()),
            weights_hash,
            band=[float(x) for x in thresholds],
            scores=maxima,
            **meta,
        )
    q = conformal_quantile(maxima, alpha)
    return Calibration(score, alpha, len(traces), q, weights_hash, scores=maxima, **meta)
