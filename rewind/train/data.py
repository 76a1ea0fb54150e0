"""Training data: split the stores' episodes into train / validation and draw torch window batches.

One store (``data.path``) gives one :class:`~rewind.store.windows.WindowSampler`. Several stores
(``data.extra_paths``) are concatenated; with ``data.mix`` a :class:`MixedSampler` draws each batch
from the stores in the given shares (e.g. 20% demos / 80% recovery rollouts when fine-tuning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rewind.config import ConfigError
from rewind.store import ReplayStore, StoreSpec
from rewind.store.windows import ReplayBuffer, WindowSampler, read_drop_steps
from rewind.train.config import DataConfig


class MixedSampler:
    """Batches drawn from several :class:`WindowSampler` in fixed expected shares.

    The number of windows per store in a batch is multinomial with probabilities ``shares``; all
    samplers share this object's generator :attr:`rng`, so one generator state captures the whole
    sampling stream (what an exact resume saves).

    Args:
        samplers: one sampler per store (non-empty); shares: non-negative, positive sum.
        seed: seed of the shared generator.
    """

    def __init__(self, samplers: Sequence[WindowSampler], shares: Sequence[float], seed: int) -> None:
        p = np.asarray(shares, dtype=np.float64)
        if len(samplers) != len(p) or not samplers or (p < 0).any() or p.sum() <= 0:
            raise ValueError(f"MixedSampler: need one share >= 0 per sampler, positive sum; got {list(p)}")
        self.samplers, self.shares = list(samplers), p / p.sum()
        self._buffer: ReplayBuffer | None = None
        self.rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The generator every sampler draws from."""
        return self._rng

    @rng.setter
    def rng(self, rng: np.random.Generator) -> None:
        self._rng = rng
        for s in self.samplers:
            s.rng = rng

    @property
    def buffer(self) -> ReplayBuffer:
        """All stores' episodes concatenated (what the normalizer is fitted on)."""
        if self._buffer is None:
            self._buffer = concat_buffers([s.buffer for s in self.samplers])
        return self._buffer

    def __len__(self) -> int:
        """Distinct windows over all stores."""
        return sum(len(s) for s in self.samplers)

    def sample(self, batch_size: int) -> dict[str, Any]:
        """``batch_size`` windows: ``counts ~ Multinomial(batch_size, shares)`` from the stores in order."""
        counts = self.rng.multinomial(batch_size, self.shares)
        parts = [s.sample(int(c)) for s, c in zip(self.samplers, counts, strict=True) if c > 0]
        out: dict[str, Any] = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "obs"}
        out["obs"] = {k: np.concatenate([p["obs"][k] for p in parts]) for k in parts[0]["obs"]}
        return out


def concat_buffers(buffers: Sequence[ReplayBuffer]) -> ReplayBuffer:
    """One :class:`ReplayBuffer` holding the episodes of ``buffers`` in order (same array names)."""
    if len(buffers) == 1:
        return buffers[0]
    names = set(buffers[0].data)
    for b in buffers[1:]:
        if set(b.data) != names:
            raise ConfigError(f"data: stores hold different arrays: {sorted(names ^ set(b.data))}")
    data = {k: np.concatenate([b.data[k] for b in buffers]) for k in buffers[0].data}
    offsets = np.cumsum([0, *[b.n_steps for b in buffers[:-1]]])
    ends = np.concatenate([b.episode_ends + o for b, o in zip(buffers, offsets, strict=True)])
    return ReplayBuffer(data, ends, [i for b in buffers for i in b.episode_ids])


@dataclass
class TrainData:
    """The stores' spec, the two samplers (``val`` is None without held-out episodes) and the ids.

    ``train_ids`` / ``val_ids`` are the episode ids of the first store; ``by_store`` maps every store
    path to ``{"train": [...], "val": [...]}`` (what the weights' lineage records).
    """

    spec: StoreSpec
    train: WindowSampler | MixedSampler
    val: WindowSampler | None
    train_ids: list[int]
    val_ids: list[int]
    by_store: dict[str, dict[str, list[int]]] = field(default_factory=dict)


def split_episodes(ids: list[int], val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Hold out ``round(val_fraction * n)`` episodes (at least one when ``val_fraction > 0`` and
    ``n >= 2``), chosen by a generator seeded with ``seed``; both lists keep the store's order."""
    n = len(ids)
    n_val = 0 if val_fraction <= 0 or n < 2 else min(n - 1, max(1, round(val_fraction * n)))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A1]))
    held = set(rng.permutation(n)[:n_val].tolist())
    return [e for i, e in enumerate(ids) if i not in held], [e for i, e in enumerate(ids) if i in held]


def _read_store(
    path: str, cfg: DataConfig, seed: int, env_id: str, spec: StoreSpec | None, drop: str | None = None
) -> tuple[StoreSpec, list[int], list[int], ReplayBuffer, ReplayBuffer | None]:
    """One store: its spec (checked against ``env_id`` and the first store's), the split, the buffers
    (with ``data.drop_steps_paths`` set: every buffer holds ``step_weight``, from the file ``drop``)."""
    key = "data.path" if spec is None else "data.extra_paths"
    dropped = None if not cfg.drop_steps_paths else read_drop_steps(drop) if drop else {}
    with ReplayStore.open(path) as store:
        if store.spec.env_id != env_id:
            raise ConfigError(f"{key}: store {path} holds {store.spec.env_id} episodes, but env is {env_id}")
        if spec is not None and store.spec.diff(spec):
            raise ConfigError(f"{key}: store {path} has another layout: " + "; ".join(store.spec.diff(spec)))
        ids = [e.id for e in store.episodes()]
        if not ids:
            raise ConfigError(f"{key}: store {path} has no episodes")
        train_ids, val_ids = split_episodes(ids, cfg.val_fraction, seed)
        kw: dict[str, Any] = {"undone": cfg.undone, "drop_steps": dropped}
        train_buf = ReplayBuffer.from_store(store, train_ids, **kw)
        val_buf = ReplayBuffer.from_store(store, val_ids, **kw) if val_ids else None
        return store.spec, train_ids, val_ids, train_buf, val_buf


def load_data(cfg: DataConfig, n_obs_steps: int, horizon: int, seed: int, env_id: str) -> TrainData:
    """Open the stores of ``cfg``, check they hold ``env_id`` episodes of one layout, build the samplers."""
    spec: StoreSpec | None = None
    train_bufs, val_bufs, by_store = [], [], {}
    drops = cfg.drop_steps_paths or [None] * len(cfg.paths)
    for path, drop in zip(cfg.paths, drops, strict=True):
        spec, train_ids, val_ids, train_buf, val_buf = _read_store(path, cfg, seed, env_id, spec, drop)
        train_bufs.append(train_buf)
        val_bufs += [val_buf] if val_buf is not None else []
        by_store[path] = {"train": train_ids, "val": val_ids}
    assert spec is not None
    sampler_seed, val_seed = np.random.SeedSequence([seed, 0xDA7A]).generate_state(2).tolist()
    kwargs = {
        "n_obs_steps": n_obs_steps,
        "horizon": horizon,
        "sample_weights": dict(cfg.sample_weights),
        "mask_zero_sample_weight": cfg.mask_zero_sample_weight,
        "source_boundaries": cfg.source_boundaries,
    }
    train: WindowSampler | MixedSampler
    if cfg.mix:
        subs = [
            WindowSampler(b, sample_weight_mode=cfg.sample_weight_mode, seed=sampler_seed, **kwargs)
            for b in train_bufs
        ]
        train = MixedSampler(subs, cfg.mix, sampler_seed)
    else:
        train = WindowSampler(
            concat_buffers(train_bufs), sample_weight_mode=cfg.sample_weight_mode, seed=sampler_seed, **kwargs
        )
    val = WindowSampler(concat_buffers(val_bufs), seed=val_seed, **kwargs) if val_bufs else None
    first = by_store[cfg.path]
    return TrainData(spec, train, val, first["train"], first["val"], by_store)


def to_torch_batch(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A sampler batch as tensors on ``device``: ``obs`` (dict), ``action``, ``action_mask``,
    ``sample_weight``.

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
        "sample_weight": tensor(batch["sample_weight"]),
    }
