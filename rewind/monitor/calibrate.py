"""``rewind-calibrate``: build the checkpoint library and calibrate a failure score for policy weights.

1. Label the demos of ``data.path`` with ``monitor.labeler``; embed them with the frozen policy
   encoder; save the checkpoint library.
2. (``embedding_ood``) save the demos' encoder features as the reference set.
3. Run ``episodes`` rollouts of the policy (seeds ``seed..``) with the score recorded and no rewinds;
   keep the successful ones; split conformal threshold (or band) at ``monitor.alpha``.
4. Save ``calibration.json`` (score, alpha, n, threshold(s), weights sha256) and a plot of the traces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import MISSING

from rewind.config import CommandConfig, require
from rewind.envs.config import EnvConfig
from rewind.monitor.batched import DEFAULT_INFERENCE_ROWS
from rewind.monitor.checkpoints import CheckpointLibrary, CheckpointTracker, build_library, make_labeler
from rewind.monitor.conformal import Calibration, calibrate, held, min_calibration_size
from rewind.monitor.episode import Monitor, RewindConfig
from rewind.monitor.factory import (
    MonitorConfig,
    build_score,
    encode_episodes,
    save_reference,
    score_params,
    tracking_settings,
)
from rewind.monitor.progress import segment_maxima
from rewind.monitor.rollouts import MonitoredRecord, run_monitored
from rewind.monitor.scores import FailureScore
from rewind.monitor.segments import segment_score_maxima
from rewind.rollout.config import RolloutConfig, require_local
from rewind.rollout.workers import EnvFactory, open_envs
from rewind.store import ReplayStore
from rewind.train.policy_api import LoadedPolicy, check_sampler_settings, load_policy, sampler_tag
from rewind.utils.device import check_device, resolve_device
from rewind.utils.io import atomic_save_figure

log = logging.getLogger(__name__)


@dataclass
class CalibrateConfig(CommandConfig):
    """Schema of ``rewind-calibrate``.

    Attributes:
        policy_path: policy weights (as for ``rewind-eval``).
        env: the task (Hydra group ``env=``).
        data_path: the demo store the policy was trained on (checkpoint labels, reference features).
        max_demos: demos used for the checkpoint library (the first ones of the store).
        monitor: the score and its settings (Hydra group ``monitor=``; ``none`` is refused here).
        episodes: calibration rollouts (only the successful ones calibrate).
        seed: env seed of the first calibration rollout (keep it apart from evaluation seeds).
        n_action_steps: executed actions per chunk (``None``: as trained); must match evaluation.
        sampler / inference_steps / ddim_eta: how chunks are sampled (as for ``rewind-eval``; ``policy``
            / ``None``: as trained); recorded, and must match evaluation.
        device / num_threads / progress: as for ``rewind-eval``.
        rollout: how the rollouts run: ``rollout.batch_size`` episodes in lockstep (the same results
            for any size), ``rollout.inference_rows``, ``rollout.workers`` (``docs/rollouts.md``).
    """

    policy_path: str = MISSING
    env: EnvConfig = field(default_factory=EnvConfig)
    data_path: str = MISSING
    max_demos: int = 50
    monitor: MonitorConfig = field(default_factory=lambda: MonitorConfig(score="tide"))
    episodes: int = 50
    seed: int = 20000
    n_action_steps: int | None = None
    sampler: str = "policy"
    inference_steps: int | None = None
    ddim_eta: float | None = None
    device: str = "auto"
    num_threads: int = 1
    progress: bool = True
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def __post_init__(self) -> None:
        require(
            self.monitor.enabled, "rewind-calibrate needs a score: monitor=tide|stac|embedding_ood|random"
        )
        require(self.episodes >= 1, f"episodes must be >= 1; got {self.episodes}")
        require(self.max_demos >= 1, f"max_demos must be >= 1; got {self.max_demos}")
        require(self.seed >= 0, f"seed must be >= 0; got {self.seed}")
        check_device(self.device)
        require_local(self.rollout, "rewind-calibrate")
        check_sampler_settings(self.sampler, self.inference_steps, self.ddim_eta)


def _plot(path: Path, traces: list[list[float | None]], success: list[bool], cal: Any) -> None:
    """Score traces of the calibration rollouts with the threshold (or band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for tr, ok in zip(traces, success, strict=True):
        ax.plot(held(tr), color="tab:blue" if ok else "tab:red", alpha=0.4, lw=0.8)
    if cal.band is not None:
        ax.plot(cal.band, color="k", lw=1.5, label="band")
    else:
        ax.axhline(cal.threshold, color="k", lw=1.5, label=f"threshold (alpha={cal.alpha})")
    ax.set(
        xlabel="control step",
        ylabel=cal.score,
        title=f"{cal.score}: calibration rollouts (blue ok, red failed)",
    )
    ax.legend(loc="upper right")
    fig.tight_layout()
    atomic_save_figure(path, fig)
    plt.close(fig)


def calibration_rollouts(
    envs: Sequence[gym.Env],
    loaded: LoadedPolicy,
    demos_path: str,
    max_demos: int,
    monitor: MonitorConfig,
    episodes: int,
    seed: int,
    out: Path,
    progress: bool = True,
    inference_rows: int = DEFAULT_INFERENCE_ROWS,
) -> tuple[CheckpointLibrary, FailureScore, list[MonitoredRecord], list[list[float | None]], dict[str, Any]]:
    """Label and save the checkpoint library (and ``embedding_ood``'s reference features) from the
    demos at ``demos_path`` into ``out``, then run ``episodes`` rollouts (seeds ``seed..``, batched
    over ``envs``) with the score recorded and no rewinds (the work of :func:`run_calibration_rollouts`).
    The last item returned is the checkpoint tracking the rollouts ran with (``{}``: none)."""
    with ReplayStore.open(demos_path) as store:
        demos = [store.load(i.id) for i in store.episodes(success=True)[:max_demos]]
    require(bool(demos), f"data_path {demos_path}: no successful episodes to label")
    library = build_library(
        loaded.policy, demos, envs[0].unwrapped, make_labeler(monitor.labeler), loaded.weights_hash
    )
    library.save(out)
    log.info("checkpoint library (%s): %s", monitor.labeler, ", ".join(library.names))
    reference = None
    if monitor.score == "embedding_ood":
        reference = encode_episodes(loaded.policy, demos)
        save_reference(out, reference)
    score = build_score(monitor.score, score_params(monitor.score, monitor, seed), reference)
    seeds = list(range(seed, seed + episodes))
    # tracked only to time the segments between checkpoints (the progress watchdog)
    tracking = tracking_settings(monitor) if monitor.track_checkpoints and library.names else {}
    records, traces = run_monitored(
        envs,
        loaded,
        Monitor(score, None),
        CheckpointTracker(library, **tracking) if tracking else None,
        RewindConfig(max_rewinds=0),
        seeds,
        seed,
        progress=progress,
        desc="calibrate",
        inference_rows=inference_rows,
    )
    return library, score, records, traces, tracking


@dataclass
class CalibrationRollouts:
    """What :func:`run_calibration_rollouts` produced: the weights it loaded, the checkpoint library, the
    score (with its settings) and, per rollout, its record and score trace (``None`` between inferences)."""

    loaded: LoadedPolicy
    library: CheckpointLibrary
    score: FailureScore
    records: list[MonitoredRecord]
    traces: list[list[float | None]]
    tracking: dict[str, Any] = field(default_factory=dict)

    def _per_checkpoint(
        self, per_rollout: Callable[[MonitoredRecord, list[float | None]], dict[str, Any]]
    ) -> dict:
        """Per checkpoint, ``per_rollout(record, trace)``'s values over the successful rollouts (``{}``
        when the rollouts ran without checkpoint tracking)."""
        out: dict[str, list[Any]] = {}
        if self.tracking:
            for r, trace in zip(self.records, self.traces, strict=True):
                if r.success:
                    for name, value in per_rollout(r, trace).items():
                        out.setdefault(name, []).append(value)
        return out

    def segment_maxima(self) -> dict[str, list[int]]:
        """Per checkpoint, the successful rollouts' segment maxima (:mod:`rewind.monitor.progress`;
        ``{}`` when the rollouts ran without checkpoint tracking)."""
        patience = self.tracking.get("patience", 0)
        return self._per_checkpoint(lambda r, _: segment_maxima(r.events, r.length, patience))

    def segment_scores(self) -> dict[str, list[float]]:
        """Per checkpoint, the successful rollouts' segment score maxima (:mod:`rewind.monitor.segments`;
        ``{}`` when the rollouts ran without checkpoint tracking)."""
        patience = self.tracking.get("patience", 0)
        return self._per_checkpoint(lambda r, trace: segment_score_maxima(r.events, trace, patience))

    @property
    def successful_traces(self) -> list[list[float | None]]:
        """The score traces of the successful rollouts (the ones that calibrate)."""
        return [t for t, r in zip(self.traces, self.records, strict=True) if r.success]

    def fit(self, alpha: float, band: bool, env_name: str) -> Calibration:
        """Split conformal calibration of the successful traces at ``alpha`` (``band``: time-varying),
        recording the score's settings, the env, the policy's ``n_action_steps`` and sampler. Raises
        :class:`~rewind.monitor.conformal.CalibrationError` with too few successes for ``alpha``."""
        return calibrate(
            self.successful_traces,
            self.score.name,
            alpha,
            self.loaded.weights_hash,
            band=band,
            score_params=self.score.params(),
            env=env_name,
            n_action_steps=self.loaded.policy.n_action_steps,
            sampler=sampler_tag(self.loaded.policy),
            progress=self.segment_maxima(),
            progress_tracking=self.tracking,
            segment_scores=self.segment_scores(),
        )


def run_calibration_rollouts(cfg: CalibrateConfig) -> CalibrationRollouts:
    """Steps 1-3 of ``rewind-calibrate`` for ``cfg``: load ``cfg.policy_path`` for ``cfg.env``, save the
    checkpoint library (and reference features) from ``cfg.data_path`` into ``cfg.out_dir``, then run
    ``cfg.episodes`` rollouts (seeds ``cfg.seed..``) with the score recorded and no rewinds. The library
    call behind ``rewind-calibrate`` and the recovery loop's calibration (with ``cfg.num_threads`` torch
    threads, restored after)."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    factory = EnvFactory(cfg.env)
    env = factory()
    try:
        loaded = load_policy(
            cfg.policy_path,
            env,
            cfg.env.name,
            resolve_device(cfg.device),
            cfg.n_action_steps,
            sampler=cfg.sampler,
            inference_steps=cfg.inference_steps,
            ddim_eta=cfg.ddim_eta,
        )
        batch = min(cfg.rollout.batch_size, cfg.episodes)
        with open_envs(factory, batch, cfg.rollout, first=env) as envs:
            library, score, records, traces, tracking = calibration_rollouts(
                envs,
                loaded,
                cfg.data_path,
                cfg.max_demos,
                cfg.monitor,
                cfg.episodes,
                cfg.seed,
                out,
                cfg.progress,
                cfg.rollout.inference_rows,
            )
    finally:
        env.close()
        torch.set_num_threads(threads)
    return CalibrationRollouts(loaded, library, score, records, traces, tracking)


def run_calibrate(cfg: CalibrateConfig) -> dict[str, Any]:
    """Entry point of ``rewind-calibrate``; returns the summary."""
    out = Path(cfg.out_dir)
    run = run_calibration_rollouts(cfg)
    ok = [r.success for r in run.records]
    log.info(
        "calibration rollouts: %d/%d successful (alpha=%s needs >= %d)",
        len(run.successful_traces),
        len(ok),
        cfg.monitor.alpha,
        min_calibration_size(cfg.monitor.alpha) * (2 if cfg.monitor.band else 1),
    )
    cal = run.fit(cfg.monitor.alpha, cfg.monitor.band, cfg.env.name)
    cal.save(out)
    _plot(out / "calibration.png", run.traces, ok, cal)
    return {
        "calibration": str(out),
        "score": cal.score,
        "alpha": cal.alpha,
        "n": cal.n,
        "threshold": cal.threshold,
        "band": cal.band is not None,
        "episodes": len(ok),
        "success_rate": float(np.mean(ok)),
        "checkpoints": run.library.names,
        "checkpoint_support": run.library.support,
        "policy_path": str(run.loaded.folder),
        "policy_version": run.loaded.version,
    }
