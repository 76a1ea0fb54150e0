"""The training loop: AdamW + warm-up/cosine schedule + EMA, validation on held-out episodes, metrics
through :mod:`rewind.metrics`, policy weights and training state every ``save_every`` steps.

A non-finite loss or gradient norm stops the run (:class:`TrainingDivergedError`, naming the first such
step) before anything after it is logged or saved, so the last good weights and training state stay
the newest. Every save is read back and verified before it becomes the newest."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers.optimization import get_scheduler
from tqdm import tqdm

from rewind.config import ConfigError, with_renamed_keys
from rewind.metrics import MetricsLogger
from rewind.policies.base import ActionChunkPolicy, count_parameters
from rewind.train import distributed, policy_api
from rewind.train.config import TrainConfig, policy_config
from rewind.train.data import TrainData, load_data, to_torch_batch
from rewind.train.init import load_init
from rewind.train.state import (
    STATE_DIR,
    STATE_FILE,
    WEIGHTS_DIR,
    TrainingState,
    TrainingStateError,
    atomic_dir,
    clean_temporaries,
    load_training_state,
    read_pointer,
    read_state_meta,
    save_training_state,
    step_name,
    write_pointer,
)
from rewind.train.window import MetricWindow
from rewind.utils.device import resolve_device
from rewind.utils.io import as_json, changed_keys
from rewind.utils.run_info import git_revision
from rewind.utils.seeding import torch_generator

log = logging.getLogger(__name__)

#: Config keys that may change when a run is resumed (everything else must match the saved run).
RESUMABLE_CHANGES = (
    "out_dir",
    "resume",
    "progress",
    "device",
    "num_threads",
    "wandb",
    "compile",
    "dist_backend",
)
RESUMABLE_TRAIN_CHANGES = ("steps", "save_every", "val_every", "log_every")
#: Policy fields that only say how chunks are sampled at inference (training never reads them).
RESUMABLE_POLICY_CHANGES = ("ddim_eta",)


def _without_inference_fields(sig: dict[str, Any]) -> dict[str, Any]:
    """``sig`` without :data:`RESUMABLE_POLICY_CHANGES` (saved signatures may or may not hold them)."""
    policy = sig.get("policy")
    if not isinstance(policy, dict):
        return sig
    return {**sig, "policy": {k: v for k, v in policy.items() if k not in RESUMABLE_POLICY_CHANGES}}


class TrainingDivergedError(ConfigError):
    """The loss or gradient norm became non-finite (nan/inf); the message names the first such step and
    the last good save. Reported as one line (exit status 2) by ``rewind-train``."""


def resume_signature(cfg: TrainConfig) -> dict[str, Any]:
    """The part of the config that a resumed run must share with the saved one."""
    full = dataclasses.asdict(cfg)
    sig = {k: v for k, v in full.items() if k not in RESUMABLE_CHANGES}
    sig["train"] = {k: v for k, v in full["train"].items() if k not in RESUMABLE_TRAIN_CHANGES}
    # the resolved policy config (defaults filled in), so YAML-listed and omitted defaults compare equal
    sig["policy"] = {"name": cfg.policy_name, **dataclasses.asdict(policy_config(cfg.policy))}
    sig = _without_inference_fields(sig)
    # options added later are left out at their defaults, so runs saved before them still resume
    if cfg.init.from_weights is None:
        sig.pop("init")
    for key in ("extra_paths", "mix", "drop_steps_paths"):
        if not full["data"][key]:
            sig["data"].pop(key)
    return sig


class Trainer:
    """One training run in ``cfg.out_dir``. Build it inside a seeded torch RNG scope (see
    :func:`rewind.train.run_train`): the policy's initialisation and dropout draw from it.

    Args:
        cfg: the run's config.
        ctx: this process's rank under torchrun (:func:`rewind.train.distributed.start`; default: a
            plain process on ``cfg.device``).
        micro_batches: split this process's batch into this many micro-batches whose gradients
            accumulate, each with the noise streams of one rank: one process with ``micro_batches=N``
            computes what N torchrun processes compute (what the tests compare against).
    """

    def __init__(
        self, cfg: TrainConfig, ctx: distributed.Distributed | None = None, micro_batches: int = 1
    ) -> None:
        self.cfg = cfg
        self.out_dir = Path(cfg.out_dir)
        self.ctx = ctx or distributed.Distributed(resolve_device(cfg.device))
        self.device = self.ctx.device
        self.micro_batches = micro_batches
        distributed.check_global_batch(cfg.train.batch_size, self.ctx.world_size * micro_batches)
        self.policy_config = policy_config(cfg.policy)
        n_obs, horizon = self.policy_config.n_obs_steps, self.policy_config.horizon
        self.data: TrainData = load_data(cfg.data, n_obs, horizon, cfg.seed, cfg.env.gym_id)
        self.policy: ActionChunkPolicy = policy_api.build_policy(
            cfg.policy_name, self.policy_config, self.data.spec
        )
        self.init_info: dict[str, Any] = {}
        if cfg.init.from_weights:
            self.init_info = load_init(self.policy, cfg.init, cfg.policy_name, self.policy_config)
        if not cfg.init.from_weights or cfg.init.normalizer == "refit":
            policy_api.fit_normalizer(self.policy, self.data.train.buffer)
        self.policy.to(self.device)
        t = cfg.train
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        self.scheduler = get_scheduler(
            t.lr_schedule, self.optimizer, num_warmup_steps=t.warmup_steps, num_training_steps=t.steps
        )
        # rank 0 alone keeps the EMA: it is what rank 0 saves and validates
        self.ema = policy_api.make_ema(self.policy) if t.ema and self.ctx.is_main else None
        self.generator = torch_generator(
            np.random.SeedSequence([cfg.seed, 1]).generate_state(1)[0], self.device
        )
        self.loss_fn = policy_api.loss_function(self.policy, compile=cfg.compile)
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None  # built by run(), after resume
        self.step = 0

    # ------------------------------------------------------------------ state
    def training_state(self) -> TrainingState:
        """Live view of everything that a save must capture."""
        components: dict[str, Any] = {
            "model": self.policy,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
        }
        if self.ema is not None:
            components["ema"] = self.ema
        sampler = self.data.train

        def set_numpy_state(state: dict[str, Any]) -> None:
            sampler.rng.bit_generator.state = state

        return TrainingState(
            components, {"train": self.generator}, lambda: sampler.rng.bit_generator.state, set_numpy_state
        )

    def resume(self) -> None:
        """Continue from the newest complete training state in ``out_dir`` (no-op when there is none).

        Raises:
            ConfigError: the saved run's config differs in a key that may not change on resume.
        """
        if self.ctx.is_main:
            clean_temporaries(self.out_dir)
        meta = read_state_meta(self.out_dir)
        if meta is None:
            log.info("resume: no training state in %s yet; starting at step 0", self.out_dir)
            return
        saved = meta.get("resume_signature")
        if not isinstance(saved, dict):
            folder = self.out_dir / STATE_DIR / step_name(int(meta["step"]))
            raise TrainingStateError(f"{folder / STATE_FILE}: 'resume_signature' is missing or not an object")
        changed = changed_keys(
            _without_inference_fields(with_renamed_keys(saved)), as_json(resume_signature(self.cfg))
        )
        if changed:
            raise ConfigError(
                f"resume: config differs from the saved run in {', '.join(changed)} "
                f"(only {', '.join(RESUMABLE_CHANGES)}, train.{{{', '.join(RESUMABLE_TRAIN_CHANGES)}}} "
                f"and policy.{{{', '.join(RESUMABLE_POLICY_CHANGES)}}} may change)"
            )
        load_training_state(self.out_dir, self.training_state())
        self.step = int(meta["step"])
        saved_world = int(meta.get("world_size", 1))
        if saved_world != self.ctx.world_size and self.ctx.is_main:
            log.warning(
                "resume: the run was saved with %d process(es) and continues with %d: the windows are the "
                "same, the noise streams are not, so the result is not the one an unchanged run would give",
                saved_world,
                self.ctx.world_size,
            )
        log.info("resumed %s at step %d", self.out_dir, self.step)

    def save(self) -> None:
        """Write policy weights (EMA when enabled) and the training state for the current step."""
        name = step_name(self.step)
        weights_root = self.out_dir / WEIGHTS_DIR
        with atomic_dir(weights_root / name) as tmp, self._averaged() as model:
            policy_api.save_weights(model, tmp, self._weights_meta())
        policy_api.verify_weights(weights_root / name)  # read back before it becomes the newest
        write_pointer(weights_root, self.step)
        meta = {
            "resume_signature": as_json(resume_signature(self.cfg)),
            "config": self._config_dict(),
            "world_size": self.ctx.world_size,
        }
        save_training_state(self.out_dir, self.step, self.training_state(), meta)
        log.info("saved policy weights %s", weights_root / name)

    def _config_dict(self) -> dict[str, Any]:
        return as_json(dataclasses.asdict(self.cfg))

    def _weights_meta(self) -> dict[str, Any]:
        sha, dirty = git_revision()
        return {
            "policy": self.cfg.policy_name,
            "env": self.cfg.env.name,
            "env_id": self.cfg.env.gym_id,
            "step": self.step,
            "ema": self.ema is not None,
            "store": self.cfg.data.path,
            "train_episodes": self.data.train_ids,
            "val_episodes": self.data.val_ids,
            **({"stores": self.data.by_store} if len(self.data.by_store) > 1 else {}),
            **self.init_info,
            **({"world_size": self.ctx.world_size} if self.ctx.enabled else {}),
            "git_revision": sha,
            "git_dirty": dirty,
            "config": self._config_dict(),
        }

    @contextlib.contextmanager
    def _averaged(self) -> Iterator[ActionChunkPolicy]:
        """The policy with EMA weights swapped in (restored afterwards), or the raw policy."""
        if self.ema is None:
            yield self.policy
        else:
            with policy_api.ema_weights(self.ema, self.policy):
                yield self.policy

    # ------------------------------------------------------------------ loop
    def _autocast(self) -> contextlib.AbstractContextManager:
        on = self.cfg.bf16 and self.device.type == "cuda"
        return torch.autocast("cuda", dtype=torch.bfloat16) if on else contextlib.nullcontext()

    def train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step; returns the (detached) loss (mean over ranks) and the pre-clip gradient
        norm. Every rank draws the same global batch and trains on its own slice of it."""
        self.policy.train()
        batch = self.data.train.sample(self.cfg.train.batch_size)
        if self.ctx.enabled:
            batch = distributed.slice_batch(batch, self.ctx.rank, self.ctx.world_size)
        self.optimizer.zero_grad(set_to_none=True)
        if self.ctx.world_size * self.micro_batches == 1:
            with self._autocast():
                loss = self.loss_fn(to_torch_batch(batch, self.device), self.generator)
            loss.backward()
        else:
            loss = self._sharded_backward(batch)
        clip = self.cfg.train.grad_clip or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), clip)
        self.optimizer.step()
        self.scheduler.step()
        if self.ema is not None:
            policy_api.ema_update(self.ema, self.policy)
        self.step += 1
        return loss.detach().float(), grad_norm.detach().float()

    def _sharded_backward(self, batch: dict[str, Any]) -> torch.Tensor:
        """Backward over this rank's micro-batches (shards), each with its generators reseeded from
        ``(seed, shard, step)``; DDP averages the gradients over ranks. Returns the mean loss."""
        n = self.micro_batches
        total = torch.zeros((), device=self.device)
        for j in range(n):
            noise_seed, global_seed = distributed.shard_seeds(self.cfg.seed, self.ctx.rank * n + j, self.step)
            self.generator.manual_seed(noise_seed)
            torch.manual_seed(global_seed)  # dropout; inside run_train's forked RNG scope
            chunk = to_torch_batch(distributed.slice_batch(batch, j, n), self.device)
            with distributed.no_sync(self.ddp, last=j == n - 1):
                with self._autocast():
                    loss = self.ddp(chunk) if self.ddp is not None else self.loss_fn(chunk, self.generator)
                (loss / n).backward()
            total = total + loss.detach().float()
        return distributed.mean_over_ranks(total / n, self.ctx)

    @torch.no_grad()
    def validate(self) -> float | None:
        """Mean loss of the (EMA) policy on ``data.val_batches`` held-out batches (fixed seed: comparable
        across steps, and the training generators are not touched)."""
        val = self.data.val
        if val is None:
            return None
        val.rng = np.random.default_rng(np.random.SeedSequence([self.cfg.seed, 0x7A1]))
        gen = torch_generator(self.cfg.seed + 0x7A1, self.device)
        losses = []
        with self._averaged() as model:
            model.eval()
            for _ in range(self.cfg.data.val_batches):
                batch = to_torch_batch(val.sample(self.cfg.train.batch_size), self.device)
                with self._autocast():
                    losses.append(float(self.loss_fn(batch, gen)))
        self.policy.train()
        return float(np.mean(losses))

    def run(self, metrics: MetricsLogger, stop_at: int | None = None) -> dict[str, Any]:
        """Train from ``self.step`` to ``train.steps`` (or stop without saving at ``stop_at``, which is
        what a killed process leaves behind). Returns the run summary."""
        t = self.cfg.train
        end = t.steps if stop_at is None else min(stop_at, t.steps)
        log.info(
            "training %s (%d parameters) on %s: %d train / %d val episodes, %d windows, steps %d -> %d, "
            "%d process(es)",
            self.cfg.policy_name,
            count_parameters(self.policy),
            self.device,
            sum(len(v["train"]) for v in self.data.by_store.values()),
            sum(len(v["val"]) for v in self.data.by_store.values()),
            len(self.data.train),
            self.step,
            end,
            self.ctx.world_size,
        )
        self.ddp = distributed.wrap(self.ctx, self.policy, self.loss_fn, self.generator)
        main = self.ctx.is_main
        bar = tqdm(total=t.steps, initial=self.step, desc="train", disable=not (self.cfg.progress and main))
        window = MetricWindow(self.step, self.device)
        val_loss = None
        try:
            while self.step < end:
                loss, grad_norm = self.train_step()
                window.add(loss, grad_norm, self.step)
                bar.update(1)
                last = self.step == t.steps
                log_now = self.step % t.log_every == 0 or last
                val_now = bool(t.val_every and self.step % t.val_every == 0) or last
                save_now = self.step % t.save_every == 0 or last
                if log_now or val_now or save_now:  # the same steps on every rank (the loss is all-reduced)
                    window.check_finite(self._diverged)  # one host sync; nothing non-finite goes out
                val_now, save_now = val_now and main, save_now and main  # rank 0 validates and writes
                if log_now:
                    record = window.flush(self.step, t.batch_size, self.optimizer.param_groups[0]["lr"])
                    metrics.log(record, step=self.step)
                    bar.set_postfix(loss=f"{record['train/loss']:.4g}")
                if val_now:
                    val_loss = self.validate()
                    if val_loss is not None:
                        metrics.log({"val/loss": val_loss}, step=self.step)
                if save_now:
                    self.save()
            window.check_finite(self._diverged)
        finally:
            bar.close()
        return {
            "policy": self.cfg.policy_name,
            "steps": self.step,
            "final_train_loss": window.last_loss,
            "final_val_loss": val_loss,
            "weights": str(self.out_dir / WEIGHTS_DIR / step_name(self.step)),
            "parameters": count_parameters(self.policy),
            "device": str(self.device),
            **({"processes": self.ctx.world_size} if self.ctx.enabled else {}),
        }

    def _diverged(self, what: str, step: int) -> TrainingDivergedError:
        """The error for a non-finite ``what`` first seen at ``step``, naming the last good save."""
        saved = read_pointer(self.out_dir / STATE_DIR)
        kept = (
            f"the last good policy weights and training state are {step_name(saved)} in {self.out_dir} "
            "(resume=true continues from there)"
            if saved is not None
            else f"nothing was saved in {self.out_dir}"
        )
        return TrainingDivergedError(
            f"training stopped: non-finite {what} (nan/inf) at step {step}; {kept}. Check the data for "
            "nan/inf values or lower train.lr"
        )


def check_fresh(out_dir: Path) -> None:
    """Refuse to start a new run over another run's training state (``resume=false``)."""
    if (out_dir / STATE_DIR / "last.json").exists():
        raise ConfigError(
            f"out_dir {out_dir} already holds a training run; pass resume=true to continue it "
            "or choose another out_dir"
        )
