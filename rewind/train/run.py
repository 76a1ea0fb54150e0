"""``run_train``: a :class:`~rewind.train.trainer.Trainer` inside a seeded torch RNG scope."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from rewind.metrics import MetricsLogger
from rewind.train.config import TrainConfig
from rewind.train.trainer import Trainer, check_fresh
from rewind.utils.device import resolve_device

log = logging.getLogger(__name__)


def run_train(cfg: TrainConfig, stop_at: int | None = None) -> dict[str, Any]:
    """Train (or, with ``cfg.resume``, continue) the run in ``cfg.out_dir``; return its summary.

    Module-internal randomness that cannot take a generator (parameter initialisation, dropout) draws
    from torch's global generator, so the run forks it, seeds it with ``cfg.seed`` and saves its state
    with the training state: the global RNG outside this call is left untouched.

    Args:
        cfg: the run's config.
        stop_at: stop after this step without a final save (tests use it to stand in for a kill).
    """
    device = resolve_device(cfg.device)
    if not cfg.resume:
        check_fresh(Path(cfg.out_dir))
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    devices = [torch.cuda.current_device()] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(cfg.seed)
            trainer = Trainer(cfg)
            if cfg.resume:
                trainer.resume()
            with MetricsLogger(
                cfg.out_dir,
                project=cfg.wandb.project,
                mode=cfg.wandb.mode,
                config=dataclasses.asdict(cfg),
                run_name=f"{cfg.env.name}-{cfg.policy_name}-{Path(cfg.out_dir).name}",
                group=cfg.wandb.group,
            ) as metrics:
                summary = trainer.run(metrics, stop_at=stop_at)
                metrics.summary({k: v for k, v in summary.items() if isinstance(v, (int, float))})
    finally:
        torch.set_num_threads(threads)
    return summary
