"""``rewind-monitor-eval``: compare failure detectors on the same rollouts, nominal and perturbed.

For each condition (``conditions``: perturbation profiles of ``configs/perturb/``) it runs
``episodes`` rollouts (seeds ``seed..``) with every detector recording at once (the policy samples
``monitor.num_samples`` chunks per inference for STAC; the executed chunk is sample 0, so the others
see the same rollouts). Thresholds come from ``cal_episodes`` nominal rollouts (seeds
``cal_seed..``) at ``monitor.alpha``. Per detector and condition: AUROC, balanced accuracy, TPR,
FPR, lead time to the point of no return, cost per control step. Plots: ROC curves and score traces
with the threshold and alarms (``roc.png``, ``traces_<condition>.png``), also sent to W&B.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import MISSING, OmegaConf

from rewind.config import CommandConfig, ConfigError, require
from rewind.envs.config import EnvConfig, build_env, perturbation_config
from rewind.envs.registry import make_operator
from rewind.metrics import MetricsLogger, WandbConfig
from rewind.monitor.conformal import CalibrationError, calibrate
from rewind.monitor.detection import (
    ScoredEpisode,
    ScoreSet,
    detection_metrics,
    point_of_no_return,
    scored_rollouts,
)
from rewind.monitor.episode import MonitoredEpisode
from rewind.monitor.factory import MonitorConfig, build_score, encode_episodes, score_params
from rewind.monitor.monitor_plots import plot_roc, plot_traces
from rewind.monitor.scores import SCORES
from rewind.rollout.config import RolloutConfig, require_local
from rewind.rollout.workers import EnvFactory, open_envs
from rewind.store import ReplayStore
from rewind.train.policy_api import LoadedPolicy, check_sampler_settings, load_policy
from rewind.utils.device import check_device, resolve_device

log = logging.getLogger(__name__)


@dataclass
class MonitorEvalConfig(CommandConfig):
    """Schema of ``rewind-monitor-eval``.

    Attributes:
        policy_path / env / n_action_steps / noise_mode / sampler / inference_steps / ddim_eta / device /
            num_threads: as for ``rewind-eval``.
        data_path: the demo store (reference features of ``embedding_ood``).
        detectors: scores to compare.
        monitor: shared score settings (``alpha``, ``num_samples``, ``knn``).
        cal_episodes / cal_seed: nominal calibration rollouts.
        episodes / seed: test rollouts per condition.
        conditions: perturbation profiles (``configs/perturb/<name>.yaml``) to test under.
        operator_budget: steps the operator gets in the point-of-no-return search.
        bands: also evaluate each detector with a time-varying band (``<name>+band`` rows).
        rollout: ``rollout.batch_size`` rollouts in lockstep (the same results for any size),
            ``rollout.inference_rows``, ``rollout.workers`` (``docs/rollouts.md``).
    """

    policy_path: str = MISSING
    env: EnvConfig = field(default_factory=EnvConfig)
    data_path: str = MISSING
    detectors: list[str] = field(default_factory=lambda: ["tide", "stac", "embedding_ood", "random"])
    monitor: MonitorConfig = field(default_factory=lambda: MonitorConfig(score="tide"))
    cal_episodes: int = 50
    cal_seed: int = 20000
    episodes: int = 50
    seed: int = 10000
    conditions: list[str] = field(default_factory=lambda: ["none", "nudge"])
    operator_budget: int = 300
    bands: bool = True
    n_action_steps: int | None = None
    sampler: str = "policy"
    inference_steps: int | None = None
    ddim_eta: float | None = None
    noise_mode: str = "fresh"
    device: str = "auto"
    num_threads: int = 1
    progress: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def __post_init__(self) -> None:
        bad = [d for d in self.detectors if d not in SCORES]
        require(not bad, f"detectors: unknown '{bad[0] if bad else ''}'; valid: {', '.join(SCORES)}")
        require(bool(self.detectors), "detectors: give at least one")
        require(self.cal_episodes >= 1 and self.episodes >= 1, "cal_episodes and episodes must be >= 1")
        check_device(self.device)
        require_local(self.rollout, "rewind-monitor-eval")
        check_sampler_settings(self.sampler, self.inference_steps, self.ddim_eta)
        for c in self.conditions:
            load_profile(c)


def load_profile(name: str) -> dict[str, Any]:
    """The perturbation profile ``configs/perturb/<name>.yaml`` as a dict."""
    from importlib.resources import files

    path = files("rewind.configs") / "perturb" / f"{name}.yaml"
    if not path.is_file():
        valid = sorted(
            p.name[:-5] for p in (files("rewind.configs") / "perturb").iterdir() if p.name.endswith(".yaml")
        )
        raise ConfigError(f"conditions: unknown perturbation profile '{name}'; valid: {', '.join(valid)}")
    return dict(OmegaConf.to_container(OmegaConf.create(path.read_text())))  # type: ignore[arg-type]


def _rollouts(
    cfg: MonitorEvalConfig,
    loaded: LoadedPolicy,
    scores: ScoreSet,
    condition: str,
    seeds: list[int],
    ponr: bool,
) -> tuple[list[ScoredEpisode], dict[int, int | None]]:
    """Scored rollouts under ``condition`` (``rollout.batch_size`` in lockstep, noise seeded by
    ``(seeds[0], episode seed)``); with ``ponr`` also the failed episodes' point of no return."""
    factory = EnvFactory(cfg.env, perturbation_config(load_profile(condition)))
    with open_envs(factory, min(cfg.rollout.batch_size, len(seeds)), cfg.rollout) as envs:
        out = scored_rollouts(
            envs,
            loaded.policy,
            scores,
            seeds,
            seeds[0],
            cfg.rollout.inference_rows,
            progress=cfg.progress,
            desc=f"{condition} rollouts",
        )
    if not ponr:
        return out, {}
    env = factory()
    try:
        ep = MonitoredEpisode(env, loaded.policy)
        op = make_operator(cfg.env.name)
        nr = {
            rec.seed: point_of_no_return(ep, op, rec, cfg.operator_budget) for rec in out if not rec.success
        }
    finally:
        env.close()
    return out, nr


def _thresholds(cfg: MonitorEvalConfig, good: list[ScoredEpisode], weights_hash: str) -> dict[str, Any]:
    """Per detector its constant threshold, plus ``<detector>+band`` (time-varying band) when
    ``bands`` is on and there are enough successful calibration rollouts for it."""
    out: dict[str, Any] = {}
    for d in cfg.detectors:
        traces = [e.traces[d] for e in good]
        out[d] = calibrate(traces, d, cfg.monitor.alpha, weights_hash).threshold
        if cfg.bands:
            try:
                out[f"{d}+band"] = calibrate(traces, d, cfg.monitor.alpha, weights_hash, band=True).band
            except CalibrationError as exc:
                log.warning("no band for %s: %s", d, exc)
    return out


def _policy_and_scores(cfg: MonitorEvalConfig) -> tuple[Any, ScoreSet]:
    """The policy under test and the detectors' scores (``embedding_ood`` referenced to the demos)."""
    env0 = build_env(cfg.env)
    loaded = load_policy(
        cfg.policy_path,
        env0,
        cfg.env.name,
        resolve_device(cfg.device),
        cfg.n_action_steps,
        cfg.noise_mode,
        sampler=cfg.sampler,
        inference_steps=cfg.inference_steps,
        ddim_eta=cfg.ddim_eta,
    )
    env0.close()
    reference = None
    if "embedding_ood" in cfg.detectors:
        with ReplayStore.open(cfg.data_path) as store:
            reference = encode_episodes(
                loaded.policy, [store.load(i.id) for i in store.episodes(success=True)[:50]]
            )
    scores = ScoreSet(
        [build_score(d, score_params(d, cfg.monitor, cfg.seed), reference) for d in cfg.detectors]
    )
    return loaded, scores


def _plots(cfg: MonitorEvalConfig, test_eps: dict[str, list[ScoredEpisode]], thresholds: dict) -> list[Path]:
    """The ROC curves of every detector and, per condition, the traces of the first (TIDE if run)."""
    out = Path(cfg.out_dir)
    traced = "tide" if "tide" in cfg.detectors else cfg.detectors[0]
    plots = [plot_roc(out / "roc.png", test_eps, cfg.detectors)]
    return plots + [
        plot_traces(out / f"traces_{c}.png", test_eps[c], traced, thresholds) for c in cfg.conditions
    ]


def run_monitor_eval(cfg: MonitorEvalConfig) -> dict[str, Any]:
    """Entry point of ``rewind-monitor-eval``; returns the summary (also the W&B run's summary)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    loaded, scores = _policy_and_scores(cfg)
    cal_eps, _ = _rollouts(
        cfg, loaded, scores, "none", list(range(cfg.cal_seed, cfg.cal_seed + cfg.cal_episodes)), False
    )
    good = [e for e in cal_eps if e.success]
    thresholds = _thresholds(cfg, good, loaded.weights_hash)
    names = list(thresholds)
    results: dict[str, Any] = {}
    test_eps: dict[str, list[ScoredEpisode]] = {}
    for cond in cfg.conditions:
        eps, ponr = _rollouts(cfg, loaded, scores, cond, list(range(cfg.seed, cfg.seed + cfg.episodes)), True)
        test_eps[cond] = eps
        results[cond] = {n: detection_metrics(eps, n.split("+")[0], thresholds[n], ponr) for n in names}
        results[cond]["_success_rate"] = float(np.mean([e.success for e in eps]))
        results[cond]["_ponr"] = {str(k): v for k, v in ponr.items()}
    summary = {
        "env": cfg.env.name,
        "policy_version": loaded.version,
        "alpha": cfg.monitor.alpha,
        "calibration": {
            "episodes": len(cal_eps),
            "successful": len(good),
            "thresholds": {d: t if np.isscalar(t) else max(t) for d, t in thresholds.items()},
        },
        "num_samples": scores.num_samples,
        "cost_ms_per_step": {n: 1e3 * scores.seconds[n.split("+")[0]] / max(scores.calls, 1) for n in names},
        "results": results,
        "plots": [str(p) for p in _plots(cfg, test_eps, thresholds)],
    }
    _log(cfg, summary)
    return summary


def _log(cfg: MonitorEvalConfig, summary: dict[str, Any]) -> None:
    """Scalars per condition and detector, the plots, through :mod:`rewind.metrics`."""
    with MetricsLogger(
        cfg.out_dir,
        cfg.wandb.project,
        cfg.wandb.mode,
        asdict(cfg),
        run_name=f"monitor-eval-{cfg.env.name}",
        group=cfg.wandb.group,
    ) as metrics:
        scalars = {}
        for cond, per in summary["results"].items():
            for d, m in per.items():
                if d.startswith("_"):
                    continue
                for k in ("auroc", "balanced_accuracy", "tpr", "fpr"):
                    scalars[f"monitor/{cond}/{d}/{k}"] = m[k]
        scalars.update({f"monitor/cost_ms/{d}": v for d, v in summary["cost_ms_per_step"].items()})
        metrics.log(scalars, step=0)
        for p in summary["plots"]:
            metrics.log_image(f"monitor/{Path(p).stem}", p, step=0)
        metrics.summary(scalars)
