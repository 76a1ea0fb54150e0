"""Training data: split a store's episodes into train / validation and draw torch window batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rewind.config import ConfigError
from rewind.store import ReplayStore, StoreSpec
from rewind.store.windows import ReplayBuffer, WindowSampler
from rewind.train.config import DataConfig


@dataclass
class TrainData:
    """The store's spec, the two samplers (``val`` is None without held-out episodes) and the ids."""

    spec: StoreSpec
    train: WindowSampler
    val: WindowSampler | None
    train_ids: list[int]
    val_ids: list[int]


def split_episodes(ids: list[int], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Hold out ``round(val_fraction * n)`` episodes (at least one when ``val_fraction > 0`` and
    ``n >= 2``), chosen by a generator seeded with ``seed``; both lists keep the store's order."""
    n = len(ids)
    n_val = 0 if val_fraction <= 0 or n < 2 else min(n - 1, max(1, round(val_fraction * n)))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A1]))
    held = set(rng.permutation(n)[:n_val].tolist())
    return [e for i, e in enumerate(ids) if i not in held], [e for i, e in enumerate(ids) if i in held]


def load_data(cfg: DataConfig, n_obs_steps: int, horizon: int, seed: int, env_id: str) -> TrainData:
    """Open the store at ``cfg.path``, check it holds ``env_id`` episodes, and build the samplers."""
    with ReplayStore.open(cfg.path) as store:
        spec = store.spec
        if spec.env_id != env_id:
            raise ConfigError(
                f"data.path: store {cfg.path} holds {spec.env_id} episodes, but env is {env_id}"
            )
        ids = [e.id for e in store.episodes()]
        if not ids:
            raise ConfigError(f"data.path: store {cfg.path} has no episodes")
        train_ids, val_ids = split_episodes(ids, cfg.val_fraction, seed)
        train_buf = ReplayBuffer.from_store(store, train_ids)
        val_buf = ReplayBuffer.from_store(store, val_ids) if val_ids else None
    sampler_seed, val_seed = np.random.SeedSequence([seed, 0xDA7A]).generate_state(2).tolist()
    kwargs = {"n_obs_steps": n_obs_steps, "horizon": horizon, "source_weights": dict(cfg.source_weights)}
    train = WindowSampler(train_buf, weight_mode=cfg.weight_mode, seed=sampler_seed, **kwargs)
    val = WindowSampler(val_buf, seed=val_seed, **kwargs) if val_buf is not None else None
    return TrainData(spec, train, val, train_ids, val_ids)


def to_torch_batch(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A sampler batch as tensors on ``device``: ``obs`` (dict), ``action``, ``action_mask``, ``weight``.

    Float observations become float32; uint8 images stay uint8 (the policy's encoder scales them).
    """

    def tensor(x: np.ndarray) -> torch.Tensor:
        """``x`` as a tensor on ``device`` (float64 -> float32)."""
        t = torch.from_numpy(np.ascontiguousarray(x))
        if t.is_floating_point():
            t = t.float()
        return t.to(device, non_blocking=True)

    return {
        "obs": {k: tensor(v) for k, v in batch["obs"].items()},
        "action": tensor(batch["action"]),
        "action_mask": tensor(batch["action_mask"]),
        "weight": tensor(batch["weight"]),
    }
