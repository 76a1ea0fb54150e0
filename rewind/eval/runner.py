"""``rewind-eval``: roll a trained policy out in lockstep batches and report success with confidence."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rewind.eval.config import EvalConfig
from rewind.eval.monitored import monitored_rollouts
from rewind.eval.observers import StoreRecorder, VideoRecorder
from rewind.eval.sharded import batch_noise, ray_rollouts
from rewind.eval.stats import stage_histogram, wilson_interval
from rewind.lockstep import EpisodeRecord, RolloutObserver, run_batch
from rewind.metrics import MetricsLogger
from rewind.policies.base import ActionChunkPolicy
from rewind.rollout.workers import EnvFactory, open_envs
from rewind.store import ReplayStore, StoreSpec, store_spec_for
from rewind.train.policy_api import denoising_steps, load_policy
from rewind.utils.device import resolve_device

log = logging.getLogger(__name__)


def _observers(cfg: EvalConfig, out_dir: Path, store: ReplayStore | None, version: str) -> list[Any]:
    observers: list[RolloutObserver] = []
    if cfg.video.episodes:
        seeds = set(range(cfg.seed, cfg.seed + cfg.video.episodes))
        observers.append(VideoRecorder(out_dir / "videos", seeds, cfg.video.fps))
    if store is not None:
        observers.append(StoreRecorder(store, version, cfg.round))
    return observers


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    """Run ``cfg.episodes`` episodes in batches of ``cfg.num_envs`` and return the summary."""
    device = resolve_device(cfg.device)
    profile = cfg.perturbation
    factory = EnvFactory(cfg.env, profile)
    env = factory()  # layout, policy loading, stage names; env 0 of an in-process batch
    num_envs = min(cfg.num_envs, cfg.episodes)
    start = time.perf_counter()
    try:
        spec = store_spec_for(env)
        loaded = load_policy(
            cfg.policy_path,
            env,
            cfg.env.name,
            device,
            cfg.n_action_steps,
            sampler=cfg.sampler,
            inference_steps=cfg.inference_steps,
            ddim_eta=cfg.ddim_eta,
        )
        policy, folder, version = loaded.policy, loaded.folder, loaded.version
        log.info("evaluating %s (%s) on %s: %d episodes", folder, version, cfg.env.name, cfg.episodes)
        monitor_info: dict[str, Any] = {}
        ray_info: dict[str, Any] = {}
        if cfg.rollout.backend == "ray":
            records, monitor_info, ray_info = ray_rollouts(cfg, loaded, spec)
        elif cfg.monitor.enabled:
            records, monitor_info = monitored_rollouts(cfg, env, loaded, spec)
        else:
            with open_envs(factory, num_envs, cfg.rollout, first=env) as envs:
                records = _rollouts(cfg, envs, policy, device, spec, version)
    finally:
        env.close()
    summary = summarize(records, env.unwrapped.stage_names)
    summary.update(
        env=cfg.env.name,
        policy_path=str(folder),
        policy_version=version,
        seed=cfg.seed,
        num_envs=num_envs,
        noise_streams=cfg.noise_streams,
        rollout_workers=cfg.rollout.workers,
        n_action_steps=policy.n_action_steps,
        sampler=cfg.sampler,
        denoising_steps=denoising_steps(policy),
        ddim_eta=getattr(policy.config, "ddim_eta", None),
        perturb=asdict(profile),
        store_out=cfg.store_out,
        device=str(device),
        videos=[r.video for r in records if r.video],
        wall_time_s=round(time.perf_counter() - start, 3),
    )
    if monitor_info:
        summary["monitor"] = monitor_info
    if ray_info:
        summary["ray"] = ray_info
    _log_results(cfg, summary)
    return summary


def _rollouts(
    cfg: EvalConfig,
    envs: Sequence[Any],
    policy: ActionChunkPolicy,
    device: torch.device,
    spec: StoreSpec,
    version: str,
) -> list[EpisodeRecord]:
    """All episodes, batch by batch, with the sampling noise of :func:`~rewind.eval.sharded.batch_noise`."""
    records: list[EpisodeRecord] = []
    store_cm = ReplayStore.open_or_create(cfg.store_out, spec) if cfg.store_out else contextlib.nullcontext()
    with store_cm as store:
        observers = _observers(cfg, Path(cfg.out_dir), store, version)
        bar = tqdm(total=cfg.episodes, desc=f"eval {cfg.env.name}", disable=not cfg.progress)
        for first in range(0, cfg.episodes, len(envs)):
            seeds = list(range(cfg.seed + first, cfg.seed + min(first + len(envs), cfg.episodes)))
            records += run_batch(envs, policy, seeds, batch_noise(cfg, seeds, device), device, observers)
            bar.update(len(seeds))
            bar.set_postfix(success=f"{np.mean([r.success for r in records]):.2f}")
        bar.close()
    return records


def summarize(records: list[EpisodeRecord], stage_names: tuple[str, ...]) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval, stage histogram and the per-episode records."""
    n = len(records)
    k = sum(r.success for r in records)
    lo, hi = wilson_interval(k, n)
    return {
        "episodes": n,
        "successes": k,
        "success_rate": k / n if n else 0.0,
        "success_ci95": [lo, hi],
        "stage_names": list(stage_names),
        "max_stage_histogram": stage_histogram([r.max_stage for r in records], stage_names),
        "mean_length": float(np.mean([r.length for r in records])) if n else 0.0,
        "sim_errors": sum(r.sim_error is not None for r in records),
        "records": [asdict(r) for r in records],
    }


def _log_results(cfg: EvalConfig, summary: dict[str, Any]) -> None:
    """Send the results through :mod:`rewind.metrics` (scalars, the episode table, the videos)."""
    name = f"eval-{cfg.env.name}-{Path(cfg.out_dir).name}"
    with MetricsLogger(
        cfg.out_dir, cfg.wandb.project, cfg.wandb.mode, asdict(cfg), run_name=name, group=cfg.wandb.group
    ) as metrics:
        lo, hi = summary["success_ci95"]
        scalars = {"eval/success_rate": summary["success_rate"], "eval/success_ci95_low": lo}
        scalars.update({"eval/success_ci95_high": hi, "eval/mean_length": summary["mean_length"]})
        scalars.update({f"eval/max_stage/{k}": v for k, v in summary["max_stage_histogram"].items()})
        for k, v in summary.get("monitor", {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                scalars[f"eval/monitor/{k}"] = v
        metrics.log(scalars, step=0)
        rows = [
            {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()}
            for r in summary["records"]
        ]
        metrics.log_table("eval/episodes", rows, step=0)
        for path in summary.get("monitor", {}).get("plots", []):
            metrics.log_image(f"eval/monitor/{Path(path).stem}", path, step=0)
        for path in summary["videos"]:
            metrics.log_video(f"eval/video/{Path(path).stem}", path, step=0)
        metrics.summary(scalars)


def run_eval(cfg: EvalConfig) -> dict[str, Any]:
    """Entry point of ``rewind-eval``: :func:`evaluate` with the torch thread setting applied."""
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    try:
        with torch.no_grad():
            return evaluate(cfg)
    finally:
        torch.set_num_threads(threads)
