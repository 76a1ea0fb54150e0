"""``rewind-eval`` with a failure monitor: ``rollout.batch_size`` monitored episodes in lockstep
(:mod:`rewind.monitor.batched`; the same records for any batch size), rewinding on alarms, with the
event logs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.eval.config import EvalConfig
from rewind.eval.observers import VideoRecorder
from rewind.monitor.factory import load_monitor
from rewind.monitor.rollouts import MonitoredRecord, run_monitored
from rewind.rollout.workers import EnvFactory, open_envs
from rewind.store import ReplayStore, StoreSpec
from rewind.train.policy_api import LoadedPolicy


def monitored_rollouts(
    cfg: EvalConfig, env: gym.Env, loaded: LoadedPolicy, spec: StoreSpec
) -> tuple[list[MonitoredRecord], dict[str, Any]]:
    """All ``cfg.episodes`` episodes under the monitor; returns the records and the monitor summary."""
    monitor, tracker, info = load_monitor(cfg.monitor, loaded.policy, loaded.weights_hash, cfg.seed)
    observers = []
    if cfg.video.episodes:
        seeds = set(range(cfg.seed, cfg.seed + cfg.video.episodes))
        observers.append(VideoRecorder(Path(cfg.out_dir) / "videos", seeds, cfg.video.fps))
    store_cm = ReplayStore.open_or_create(cfg.store_out, spec) if cfg.store_out else contextlib.nullcontext()
    seeds = list(range(cfg.seed, cfg.seed + cfg.episodes))
    factory = EnvFactory(cfg.env, cfg.perturbation)
    batch = min(cfg.rollout.batch_size, cfg.episodes)
    with store_cm as store, open_envs(factory, batch, cfg.rollout, first=env) as envs:
        records, traces = run_monitored(
            envs,
            loaded,
            monitor,
            tracker,
            cfg.rewind,
            seeds,
            cfg.seed,
            store,
            cfg.round,
            observers,
            cfg.progress,
            desc=f"eval {cfg.env.name} +{cfg.monitor.score}",
            inference_rows=cfg.rollout.inference_rows,
        )
    info.update(monitor_summary(records))
    info["plots"] = rewind_plots(Path(cfg.out_dir), records, traces, monitor, limit=3)
    info["rewind"] = {"mode": cfg.rewind.mode, "max_rewinds": cfg.rewind.max_rewinds}
    return records, info


def monitor_summary(records: list[MonitoredRecord]) -> dict[str, Any]:
    """Alarms, rewinds and monitor cost over the episodes."""
    n = max(len(records), 1)
    rewound = [r for r in records if r.rewinds]
    return {
        "episodes_with_alarm": sum(r.alarms > 0 for r in records),
        "rewinds": sum(r.rewinds for r in records),
        "successes_after_rewind": sum(r.success for r in rewound),
        "episodes_rewound": len(rewound),
        "operator_steps": sum(r.operator_steps for r in records),
        "monitor_ms_per_step": float(np.mean([r.monitor_ms for r in records])) if records else 0.0,
        "alarm_rate": sum(r.alarms > 0 for r in records) / n,
    }


def rewind_plots(
    out: Path, records: list[MonitoredRecord], traces: list[list[float | None]], monitor: Any, limit: int
) -> list[str]:
    """Score traces of the first ``limit`` episodes that rewound: threshold, alarms, rewinds."""
    from rewind.monitor.monitor_plots import plot_rewind_traces

    paths = []
    for rec, trace in zip(records, traces, strict=True):
        if rec.rewinds and len(paths) < limit and monitor is not None:
            title = (
                f"seed {rec.seed}: {'success' if rec.success else 'failure'} after {rec.rewinds} rewind(s)"
            )
            p = plot_rewind_traces(
                out / f"rewind_trace_{rec.seed}.png", trace, monitor.threshold(0), rec.events, title
            )
            paths.append(str(p))
    return paths
