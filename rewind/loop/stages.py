"""The steps of a loop round, each a library call with the typed config of the command it stands for
(in process, one folder each): demos (:class:`CollectConfig`), training (:class:`TrainConfig`),
calibration (:class:`CalibrateConfig`, with a fallback for weak policies) and evaluation
(:class:`EvalConfig`). Each config is derived from the loop's own typed config (its ``env`` node, device,
threads, progress), so an option of the loop reaches every stage. Every step writes ``summary.json``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rewind.collect import CollectConfig, run_collect
from rewind.eval.config import EvalConfig
from rewind.eval.runner import run_eval
from rewind.loop.config import LoopConfig
from rewind.loop.record import CalibrationOutcome, EvalOutcome
from rewind.metrics import WandbConfig
from rewind.monitor.calibrate import CalibrateConfig, run_calibration_rollouts
from rewind.monitor.conformal import CalibrationError
from rewind.monitor.episode import RewindConfig
from rewind.monitor.factory import MonitorConfig
from rewind.store import ReplayStore
from rewind.train import DataConfig, OptimConfig, TrainConfig, run_train
from rewind.train.config import InitConfig
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)

#: ``hook(round, stage)`` called before each stage (tests use it to stand in for a kill).
StageHook = Callable[[int, str], None]


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str, hook: StageHook | None, r: int) -> Iterator[None]:
    """Call ``hook(r, name)``, then time the block into ``timings[name]`` (seconds, 2 decimals)."""
    if hook is not None:
        hook(r, name)
    t0 = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - t0, 2)


def collect_demos(cfg: LoopConfig, folder: Path) -> dict[str, Any]:
    """``cfg.base.demos`` scripted demos (seeds ``0..``) into ``folder/store``."""
    ccfg = CollectConfig(
        out_dir=str(folder),
        env=cfg.env,
        episodes=cfg.base.demos,
        seed=0,
        out=str(folder / "store"),
        progress=cfg.progress,
    )
    summary = run_collect(ccfg)
    atomic_write_json(folder / "summary.json", summary)
    return summary


def train_config(
    cfg: LoopConfig,
    folder: Path,
    data: DataConfig,
    policy: dict[str, Any],
    seed: int,
    optim: OptimConfig,
    init: InitConfig | None = None,
) -> TrainConfig:
    """The :class:`TrainConfig` of one loop training run in ``folder`` (the loop's env, device, threads
    and progress; W&B off: the loop has its own run)."""
    return TrainConfig(
        out_dir=str(folder),
        env=cfg.env,
        data=data,
        policy=dict(policy),
        train=optim,
        device=cfg.device,
        seed=seed,
        num_threads=cfg.num_threads,
        wandb=WandbConfig(mode="disabled"),
        progress=cfg.progress,
        init=init or InitConfig(),
    )


def train(tcfg: TrainConfig) -> dict[str, Any]:
    """One training run (:func:`rewind.train.run_train`); its summary also goes to ``summary.json``."""
    summary = run_train(tcfg)
    atomic_write_json(Path(tcfg.out_dir) / "summary.json", summary)
    return summary


def optim_config(steps: int, batch_size: int, lr: float, warmup: int) -> OptimConfig:
    """The optimisation of a loop training run (one save at the end, no intermediate validation)."""
    return OptimConfig(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=min(warmup, steps - 1),
        save_every=steps,
        val_every=0,
        log_every=max(1, min(50, steps)),
    )


def calibrate_config(cfg: LoopConfig, weights: Path, demos_path: str, folder: Path) -> CalibrateConfig:
    """The :class:`CalibrateConfig` of a round's calibration in ``folder``: ``weights``, the loop's env
    node, monitor (a copy), ``calibration`` settings (episodes, seed, demos), device, threads,
    progress and ``rollout`` node (on the local backend: calibration does not run on Ray), the loop's
    ``ddim_eta``; ``n_action_steps`` as trained."""
    c = cfg.calibration
    return CalibrateConfig(
        out_dir=str(folder),
        policy_path=str(weights),
        env=cfg.env,
        data_path=demos_path,
        max_demos=c.max_demos,
        monitor=dataclasses.replace(cfg.monitor),
        episodes=c.episodes,
        seed=c.seed,
        device=cfg.device,
        num_threads=cfg.num_threads,
        progress=cfg.progress,
        rollout=dataclasses.replace(cfg.rollout, backend="local"),
        ddim_eta=cfg.ddim_eta,
    )


def calibrate_policy(cfg: LoopConfig, weights: Path, demos_path: str, folder: Path) -> CalibrationOutcome:
    """Calibrate ``cfg.monitor`` for ``weights`` into ``folder`` (``rewind-calibrate``'s rollouts with
    :func:`calibrate_config`).

    With fewer successful rollouts than ``monitor.alpha`` needs and ``calibration.fallback``, the
    smallest alpha they allow (``1/(n+1)``: the threshold is their maximum score) is used and recorded.
    Without any success there is no calibration: ``calibrated=False`` (no alarms this round).
    """
    ccfg = calibrate_config(cfg, weights, demos_path, folder)
    run = run_calibration_rollouts(ccfg)
    good = run.successful_traces
    out = CalibrationOutcome(
        episodes=len(run.records), successes=len(good), alpha_requested=ccfg.monitor.alpha, calibrated=False
    )
    alpha, band = ccfg.monitor.alpha, ccfg.monitor.band
    try:
        cal = run.fit(alpha, band, ccfg.env.name)
    except CalibrationError as exc:
        if not (cfg.calibration.fallback and good):
            if cfg.calibration.fallback:
                log.warning(
                    "calibration: no successful rollout of %d; this round runs without alarms",
                    len(run.records),
                )
                out.reason = str(exc)
                atomic_write_json(folder / "summary.json", out.to_json())
                return out
            raise
        alpha, band = 1.0 / (len(good) + 1), False
        log.warning(
            "calibration: %s; falling back to alpha=%.3f (the largest score of the %d successes)",
            exc,
            alpha,
            len(good),
        )
        cal = run.fit(alpha, False, ccfg.env.name)
    cal.save(folder)
    out = dataclasses.replace(
        out, calibrated=True, folder=str(folder), alpha=alpha, band=band, n=cal.n, threshold=cal.threshold
    )
    atomic_write_json(folder / "summary.json", out.to_json())
    return out


def eval_config(
    cfg: LoopConfig,
    weights: Path,
    folder: Path,
    calibration: str | None = None,
    seeds: tuple[int, int] | None = None,
) -> EvalConfig:
    """The :class:`EvalConfig` of a round's evaluation: the loop's env node (every option: ``max_steps``,
    ``rgb``, ``image_size``, ``camera``), seeds, device, threads and ``rollout`` node (workers, batch
    size, Ray); with ``calibration`` the loop's
    monitor and test-time rewind (``restore``, at most 3 per episode). ``seeds``: ``(first seed, episodes)``
    instead of the evaluation seeds."""
    e = cfg.eval
    seed, episodes = seeds or (e.seed, e.episodes)
    monitored = calibration is not None
    return EvalConfig(
        out_dir=str(folder),
        policy_path=str(weights),
        env=cfg.env,
        episodes=episodes,
        seed=seed,
        num_envs=e.num_envs,
        device=cfg.device,
        num_threads=cfg.num_threads,
        wandb=WandbConfig(mode="disabled"),
        progress=cfg.progress,
        monitor=dataclasses.replace(cfg.monitor, calibration=calibration) if monitored else MonitorConfig(),
        rewind=RewindConfig(mode="restore", max_rewinds=3) if monitored else RewindConfig(),
        rollout=dataclasses.replace(cfg.rollout),
        ddim_eta=cfg.ddim_eta,
    )


def evaluate(
    cfg: LoopConfig,
    weights: Path,
    folder: Path,
    calibration: str | None = None,
    seeds: tuple[int, int] | None = None,
) -> EvalOutcome:
    """``rewind-eval`` of ``weights`` on the loop's evaluation seeds (``seeds``: ``(first seed,
    episodes)`` instead; with ``calibration``: test-time rewind, ``restore``); returns success, its 95%
    Wilson interval and the stage histogram."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = run_eval(eval_config(cfg, weights, folder, calibration, seeds))
    keep = ("episodes", "successes", "success_rate", "success_ci95", "max_stage_histogram", "mean_length")
    out = EvalOutcome(**{k: summary[k] for k in keep})
    if "monitor" in summary:
        out.monitor = {k: v for k, v in summary["monitor"].items() if isinstance(v, (int, float, str))}
    sampled = {k: summary.get(k) for k in ("sampler", "denoising_steps", "ddim_eta")}
    atomic_write_json(folder / "summary.json", {**out.to_json(), **sampled, "records": summary["records"]})
    return out


def store_counts(path: str | Path) -> dict[str, Any]:
    """Episodes, steps, steps per source, operator steps and ids of a store."""
    with ReplayStore.open(path) as store:
        s = store.summary()
        ids = [e.id for e in store.episodes()]
    source_counts = {k: v for k, v in s["steps_by_source"].items() if v}
    return {
        "episodes": s["episodes"],
        "steps": s["steps"],
        "source_counts": source_counts,
        "operator_steps": s["n_operator_steps"],
        "episode_ids": ids,
    }


def mix_shares(
    demo_share: float | None, steps: list[int], max_passes: float | None = None, samples: int = 0
) -> list[float]:
    """``data.mix`` for ``[demos, *rounds]``: the demo share, the rest split by the rounds' step counts
    (``[]`` when ``demo_share`` is ``None``: every window equally likely).

    With ``max_passes``, a fine-tuning that draws ``samples`` windows in all sees the rounds' data at
    most ``max_passes`` times over in expectation: the rounds' share is capped at
    ``max_passes * sum(steps) / samples`` and the demos take the rest (a small store is then not
    repeated dozens of times)."""
    if demo_share is None or not steps:
        return []
    total = float(np.sum(steps))
    rest = 1.0 - demo_share
    if max_passes is not None and samples > 0:
        rest = min(rest, max_passes * total / samples)
    return [1.0 - rest, *[rest * s / total for s in steps]]
