"""Thin torch adapters over :class:`rewind.store.windows.WindowSampler` (imports torch).

* :class:`WindowDataset` - map-style; ``dataset[i]`` is window ``i``; ``__getitems__`` lets a
  ``DataLoader`` fetch a whole batch with one vectorised gather.
* :class:`WindowBatches` - iterable of ready-made batches drawn by the sampler's seeded generator
  (honours ``sample_weight_mode="sample"``); use with ``DataLoader(..., batch_size=None)`` or directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from rewind.store.windows import WindowSampler


def to_torch(batch: dict[str, Any]) -> dict[str, Any]:
    """Convert a (nested) dict of numpy arrays to torch tensors (no copy where possible)."""
    return {
        k: to_torch(v) if isinstance(v, dict) else torch.as_tensor(np.asarray(v)) for k, v in batch.items()
    }


def _index(batch: dict[str, Any], i: int) -> dict[str, Any]:
    return {k: _index(v, i) if isinstance(v, dict) else v[i] for k, v in batch.items()}


class WindowDataset(Dataset):
    """Map-style dataset of all windows of a sampler; items are dicts of tensors without batch dim."""

    def __init__(self, sampler: WindowSampler) -> None:
        """Wrap ``sampler`` (its weights are returned per item; its RNG is not used)."""
        self.sampler = sampler

    def __len__(self) -> int:
        """Number of windows."""
        return len(self.sampler)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Window ``i``: ``obs[key]`` ``[To, ...]``, ``action`` ``[H, Da]``, ``sample_weight`` scalar, ..."""
        return to_torch(_index(self.sampler.get(np.array([i])), 0))

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """Batched fetch used by ``DataLoader``: one vectorised gather for all ``indices``."""
        batch = self.sampler.get(np.asarray(indices))
        return [to_torch(_index(batch, j)) for j in range(len(indices))]


class WindowBatches(IterableDataset):
    """Endless (or ``n_batches``-long) stream of batches ``[B, ...]`` from ``sampler.sample``."""

    def __init__(self, sampler: WindowSampler, batch_size: int, n_batches: int | None = None) -> None:
        """``n_batches=None`` streams forever."""
        self.sampler, self.batch_size, self.n_batches = sampler, batch_size, n_batches

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield dicts of tensors shaped like :meth:`WindowSampler.get` output."""
        n = 0
        while self.n_batches is None or n < self.n_batches:
            yield to_torch(self.sampler.sample(self.batch_size))
            n += 1
