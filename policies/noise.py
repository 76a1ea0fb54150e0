"""Per-row sampling noise for batched inference: each row of a batch draws from its own stream.

A batched rollout runs many episodes through one ``predict_chunk`` call. With a single
``torch.Generator`` an episode's noise would depend on which episodes shared its batch and in which
order; with :class:`RowGenerators` row ``b`` of every draw (initial noise, DDPM step noise, ACT's
latent samples) comes from ``streams[b]``, so an episode's noise is a function of its own stream only.

Rows and streams: a draw of ``N`` rows with ``R`` streams gives each stream a block of ``N / R``
consecutive rows (the ``S`` samples of one observation are consecutive, see
:meth:`~rewind.policies.obs_conditioned.ObsConditionedPolicy.repeat_features`).

Policies take ``generator: torch.Generator | RowGenerators | None`` wherever they sample and draw
through :func:`normal` (and :func:`step_generators` for schedulers that take a generator list).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class NoiseStream:
    """One episode's sampling noise: its generator and, under ``noise_mode=episode``, the initial noise
    it reuses until :meth:`clear` (the episode start and every rewind clear it, as ``policy.reset`` does).
    """

    generator: torch.Generator
    episode_noise: torch.Tensor | None = None

    def clear(self) -> None:
        """Forget the cached episode noise (the next inference draws new noise)."""
        self.episode_noise = None


class RowGenerators:
    """One :class:`NoiseStream` per batch row (see the module docstring).

    Raises:
        ValueError: no streams.
    """

    def __init__(self, streams: Sequence[NoiseStream]) -> None:
        if not streams:
            raise ValueError("RowGenerators needs at least one stream")
        self.streams = list(streams)

    def __len__(self) -> int:
        return len(self.streams)

    def _rows_per_stream(self, rows: int) -> int:
        if rows % len(self.streams):
            raise ValueError(f"a draw of {rows} rows does not split over {len(self.streams)} row streams")
        return rows // len(self.streams)

    def normal(self, shape: Sequence[int], device: torch.device | str) -> torch.Tensor:
        """Standard normal ``shape``; stream ``b`` draws rows ``b*k .. b*k+k-1`` (``k = shape[0] / R``)."""
        k = self._rows_per_stream(int(shape[0]))
        parts = [
            torch.randn((k, *shape[1:]), generator=s.generator, device=s.generator.device)
            for s in self.streams
        ]
        return torch.cat(parts).to(device)

    def initial_noise(
        self, shape: Sequence[int], device: torch.device | str, reuse: bool = False
    ) -> torch.Tensor:
        """Like :meth:`normal`; with ``reuse`` each stream returns its cached episode noise when it has one
        of the right shape, and caches what it draws (``noise_mode=episode``)."""
        k = self._rows_per_stream(int(shape[0]))
        block = (k, *shape[1:])
        parts = []
        for s in self.streams:
            cached = s.episode_noise
            if reuse and cached is not None and tuple(cached.shape) == block:
                parts.append(cached)
                continue
            x = torch.randn(block, generator=s.generator, device=s.generator.device)
            if reuse:
                s.episode_noise = x
            parts.append(x)
        return torch.cat(parts).to(device)

    def step_generators(self, rows: int) -> list[torch.Generator]:
        """A generator per row (each stream's repeated over its block) for APIs that take a list, such as
        diffusers' schedulers (``randn_tensor`` draws row ``i`` from entry ``i``)."""
        k = self._rows_per_stream(rows)
        return [s.generator for s in self.streams for _ in range(k)]


def normal(
    shape: Sequence[int], generator: torch.Generator | RowGenerators | None, device: torch.device | str
) -> torch.Tensor:
    """Standard normal ``shape`` on ``device``, drawn on the generator's device (per row for
    :class:`RowGenerators`)."""
    if isinstance(generator, RowGenerators):
        return generator.normal(shape, device)
    dev = generator.device if generator is not None else device
    return torch.randn(tuple(shape), generator=generator, device=dev).to(device)


def step_generators(
    generator: torch.Generator | RowGenerators | None, rows: int
) -> torch.Generator | list[torch.Generator] | None:
    """What to pass as a scheduler's ``generator`` for a step over ``rows`` rows."""
    return generator.step_generators(rows) if isinstance(generator, RowGenerators) else generator
