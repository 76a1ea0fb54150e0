"""Explicit random-number generators. rewind never touches global RNG state (``np.random.seed``,
``torch.manual_seed``): every consumer receives a generator built here from a seed it was given."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def make_rng(seed: int | np.random.SeedSequence | None) -> np.random.Generator:
    """NumPy generator for ``seed`` (``None`` draws fresh OS entropy: only for non-reproducible use)."""
    return np.random.default_rng(seed)


def spawn_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent child seeds derived from ``seed`` (for per-episode / per-worker streams)."""
    children = np.random.SeedSequence(seed).spawn(n)
    return [int(c.generate_state(1, dtype=np.uint32)[0]) for c in children]


def episode_noise_seed(run_seed: int, episode_seed: int) -> int:
    """The seed of one episode's sampling-noise stream, from the run's seed and the episode's env seed.

    Per-episode streams make an episode's result independent of which episodes ran before it, in the
    same batch, or on the same machine (sequential, batched and Ray-sharded rollouts agree)."""
    return int(np.random.SeedSequence([int(run_seed), int(episode_seed)]).generate_state(1)[0])


def torch_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A seeded ``torch.Generator`` on ``device`` (torch is imported lazily)."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen
