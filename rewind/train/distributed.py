"""Data-parallel training under ``torchrun`` (``torch.nn.parallel.DistributedDataParallel``).

    torchrun --nproc_per_node=2 -m rewind.scripts.train env=lift data.path=STORE out_dir=RUN ...

A process started by torchrun (``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` in its environment) joins a
process group (gloo on CPU, NCCL on CUDA; ``dist_backend=`` overrides); a plain process is rank 0 of 1
and nothing here changes its run. How the work is split:

* ``train.batch_size`` stays the GLOBAL batch. Every rank draws the same global batch of window ids
  from the one shared, seeded window sampler (so its generator state is the same on every rank and a
  training state saved by rank 0 resumes every rank) and keeps its own slice
  ``[rank * b, (rank + 1) * b)``, ``b = batch_size / world_size``: the ranks train on disjoint parts of
  the global batch, which is exactly the batch one process would draw.
* Each *shard* (a rank's slice, or a micro-batch of it, :func:`shard_seeds`) reseeds the noise /
  timestep generator and torch's global generator (dropout) from ``(seed, shard, step)`` before its
  forward pass, so no per-rank generator state needs saving: a resume rederives it from the step.
* Gradients are averaged by DDP's all-reduce; the loss that is logged is the mean over ranks.
* Rank 0 alone keeps the EMA, runs the validation loss and writes weights, training state, metrics and
  W&B; the other ranks log errors only (``rewind.cli.app`` keeps them from writing the run folder).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from rewind.config import ConfigError
from rewind.utils.device import resolve_device
from rewind.utils.ranks import launch_ranks

log = logging.getLogger(__name__)

#: Valid values of ``dist_backend``: ``auto`` is NCCL on CUDA, gloo elsewhere.
BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Distributed:
    """This process's rank, the number of processes and the device it trains on."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 (the only writer)."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """More than one process (a process group is running)."""
        return self.world_size > 1


def check_global_batch(batch_size: int, world_size: int) -> None:
    """Raise a one-line :class:`ConfigError` unless the global batch splits evenly over the ranks."""
    if batch_size % world_size:
        raise ConfigError(
            f"train.batch_size={batch_size} is the global batch and must be divisible by the number of "
            f"processes (WORLD_SIZE={world_size}); use a multiple of {world_size}, e.g. "
            f"{(batch_size // world_size + 1) * world_size}"
        )


def start(device_name: str, backend: str) -> Distributed:
    """Join torchrun's process group when launched by it; a plain process gets rank 0 of 1.

    On CUDA each rank trains on ``cuda:LOCAL_RANK``. (``TrainConfig`` has already checked that the
    global batch divides by the world size: :func:`check_global_batch`.)

    Raises:
        ConfigError: NCCL without CUDA.
    """
    ranks = launch_ranks()
    device = resolve_device(device_name)
    if ranks.world_size == 1:
        return Distributed(device)
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    chosen = backend if backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if chosen == "nccl" and device.type != "cuda":
        raise ConfigError(f"dist_backend=nccl needs CUDA; this run is on {device} (use gloo or auto)")
    dist.init_process_group(chosen, rank=ranks.rank, world_size=ranks.world_size)
    if ranks.is_main:
        log.info("distributed: %d processes, backend %s, device %s", ranks.world_size, chosen, device)
    return Distributed(device, ranks.rank, ranks.world_size)


def stop(ctx: Distributed, ok: bool) -> None:
    """Leave the process group (after a barrier when the run succeeded, so the ranks end together)."""
    if not ctx.enabled or not dist.is_initialized():
        return
    if ok:
        dist.barrier()
    dist.destroy_process_group()


def shard_seeds(seed: int, shard: int, step: int) -> tuple[int, int]:
    """Seeds of shard ``shard``'s noise generator and of torch's global generator at ``step`` (the step
    about to be taken): a pure function, so a resumed run rederives every rank's streams."""
    a, b = np.random.SeedSequence([seed, 0xD15, shard, step]).generate_state(2).tolist()
    return int(a), int(b)


def slice_batch(batch: Mapping[str, Any], index: int, parts: int) -> dict[str, Any]:
    """Part ``index`` of ``parts`` equal parts of a sampler batch (arrays split along the first axis)."""

    def cut(x: Any) -> Any:
        if isinstance(x, Mapping):
            return {k: cut(v) for k, v in x.items()}
        n = len(x) // parts
        return x[index * n : (index + 1) * n]

    return cut(batch)


class LossModule(nn.Module):
    """The policy's training loss as a module, so DDP's ``forward`` (which prepares the gradient
    all-reduce) runs it: ``forward(batch)`` is ``loss_fn(batch, generator)``."""

    def __init__(
        self,
        policy: nn.Module,
        loss_fn: Callable[[dict[str, Any], torch.Generator], torch.Tensor],
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.policy = policy
        self._loss_fn = loss_fn
        self._generator = generator

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        """Scalar loss of ``batch``."""
        return self._loss_fn(batch, self._generator)


def wrap(
    ctx: Distributed,
    policy: nn.Module,
    loss_fn: Callable[[dict[str, Any], torch.Generator], torch.Tensor],
    generator: torch.Generator,
) -> nn.parallel.DistributedDataParallel | None:
    """DDP over the policy's loss (rank 0's parameters are broadcast to every rank); None for one process."""
    if not ctx.enabled:
        return None
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel
    # the buffers (normalizer statistics) are the same on every rank and fixed: no sync per forward
    buffers = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(ddp).parameters else None
    no_buffer_sync = {buffers: False} if buffers else {"broadcast_buffers": False}
    return ddp(LossModule(policy, loss_fn, generator), device_ids=device_ids, **no_buffer_sync)


def mean_over_ranks(value: torch.Tensor, ctx: Distributed) -> torch.Tensor:
    """``value`` averaged over the ranks (unchanged for one process)."""
    if not ctx.enabled:
        return value
    value = value.clone()
    dist.all_reduce(value)
    return value / ctx.world_size


def no_sync(ddp: nn.parallel.DistributedDataParallel | None, last: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` for every micro-batch but the last (gradients accumulate locally)."""
    return ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext()


class NullMetrics:
    """The metrics sink of ranks other than 0: records nothing."""

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Drop ``metrics``."""

    def summary(self, values: Mapping[str, Any]) -> None:
        """Drop ``values``."""

    def __enter__(self) -> NullMetrics:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
