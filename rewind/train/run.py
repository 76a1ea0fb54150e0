"""``run_train``: a :class:`~rewind.train.trainer.Trainer` inside a seeded torch RNG scope, in this
process or as one rank of a ``torchrun`` launch (:mod:`rewind.train.distributed`)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from rewind.metrics import MetricsLogger
from rewind.train import distributed
from rewind.train.config import TrainConfig
from rewind.train.trainer import Trainer, check_fresh

log = logging.getLogger(__name__)


def run_train(cfg: TrainConfig, stop_at: int | None = None, micro_batches: int = 1) -> dict[str, Any]:
    """Train (or, with ``cfg.resume``, continue) the run in ``cfg.out_dir``; return its summary.

    Module-internal randomness that cannot take a generator (parameter initialisation, dropout) draws
    from torch's global generator, so the run forks it, seeds it with ``cfg.seed`` and saves its state
    with the training state: the global RNG outside this call is left untouched.

    Under torchrun every rank calls this; rank 0 alone writes metrics and W&B (and, in the trainer,
    weights and training state).

    Args:
        cfg: the run's config.
        stop_at: stop after this step without a final save (tests use it to stand in for a kill).
        micro_batches: run the shards of this many torchrun ranks in this one process (gradient
            accumulation; see :class:`~rewind.train.trainer.Trainer`); tests compare it with torchrun.
    """
    if not cfg.resume:
        check_fresh(Path(cfg.out_dir))
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    ctx = distributed.start(cfg.device, cfg.dist_backend)
    devices = [torch.cuda.current_device()] if ctx.device.type == "cuda" else []
    ok = False
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(cfg.seed)
            trainer = Trainer(cfg, ctx, micro_batches=micro_batches)
            if cfg.resume:
                trainer.resume()
            with _metrics(cfg, ctx) as metrics:
                summary = trainer.run(metrics, stop_at=stop_at)
                metrics.summary({k: v for k, v in summary.items() if isinstance(v, (int, float))})
        ok = True
    finally:
        distributed.stop(ctx, ok)
        torch.set_num_threads(threads)
    return summary


def _metrics(cfg: TrainConfig, ctx: distributed.Distributed) -> Any:
    """The run's :class:`MetricsLogger` on rank 0; a sink that records nothing on the other ranks."""
    if not ctx.is_main:
        return distributed.NullMetrics()
    return MetricsLogger(
        cfg.out_dir,
        project=cfg.wandb.project,
        mode=cfg.wandb.mode,
        config=dataclasses.asdict(cfg),
        run_name=f"{cfg.env.name}-{cfg.policy_name}-{Path(cfg.out_dir).name}",
        group=cfg.wandb.group,
    )
