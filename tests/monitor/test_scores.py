"""Failure scores on hand-made chunks: TIDE's overlap and value, STAC's MMD, the registry."""

import numpy as np
import pytest
import torch

from rewind.monitor.scores import (
    SCORES,
    EmbeddingOODScore,
    RandomScore,
    StacScore,
    TideScore,
    make_score,
    mmd_rbf,
    overlap,
)
from rewind.policies.base import ChunkRecord


class FakePolicy:
    """Just what the scores read: ``last_chunks`` and ``n_obs_steps``."""

    n_obs_steps = 2

    def __init__(self) -> None:
        self.last_chunks: list[ChunkRecord] = []

    def push(self, actions: torch.Tensor, start: int, samples: torch.Tensor | None = None) -> None:
        self.last_chunks = [*self.last_chunks[-1:], ChunkRecord(actions, np.array([start]), samples)]


def test_overlap_is_h_minus_ta_minus_to_plus_one() -> None:
    h, to, ta = 16, 2, 8
    prev = ChunkRecord(torch.zeros(1, h, 5), np.array([-1]))  # inference at step 0
    new = ChunkRecord(torch.zeros(1, h, 5), np.array([ta - to + 1]))  # inference at step 8
    a, b = overlap(prev, new, to)
    assert a.stop - a.start == h - ta - to + 1 == b.stop - b.start
    assert (a.start, b.start) == (ta + to - 1, to - 1)  # both index control step 8


def test_tide_value_and_dims() -> None:
    p = FakePolicy()
    tide = TideScore()
    first = torch.zeros(1, 16, 5)
    p.push(first, -1)
    assert tide.update(p) is None  # first chunk: no predecessor, no score
    assert tide.update(p) is None  # no new chunk, nothing to score
    new = torch.zeros(1, 16, 5)
    new[0, :, 0] = 0.5  # dx differs by 0.5 everywhere
    new[0, :, 4] = 2.0  # grip differs by 2
    p.push(new, 7)
    assert tide.update(p) == pytest.approx((0.5**2 + 2.0**2) / 5)
    motion = TideScore(dims=[0, 1, 2, 3])
    motion.update(FakePolicy())  # no chunks yet
    q = FakePolicy()
    q.push(first, -1)
    motion.update(q)
    q.push(new, 7)
    assert motion.update(q) == pytest.approx(0.5**2 / 4)


def test_tide_reset_forgets_the_previous_chunk() -> None:
    p, tide = FakePolicy(), TideScore()
    p.push(torch.zeros(1, 16, 5), -1)
    tide.update(p)
    tide.reset()
    assert tide._last_id is None  # the same chunk counts as new after a reset


def test_mmd_is_zero_for_equal_samples_and_grows_with_shift() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 10, generator=g)
    assert mmd_rbf(x, x) == pytest.approx(0.0, abs=1e-9)
    near, far = mmd_rbf(x, x + 0.1), mmd_rbf(x, x + 3.0)
    assert 0 < near < far


def test_stac_is_cumulative_and_needs_samples() -> None:
    g = torch.Generator().manual_seed(1)
    p, stac = FakePolicy(), StacScore(num_samples=8)
    s0 = torch.randn(1, 8, 16, 5, generator=g)
    p.push(s0[:, 0], -1, s0)
    stac.update(p)
    values = []
    for k in range(1, 4):
        s = torch.randn(1, 8, 16, 5, generator=g) + k
        p.push(s[:, 0], 7 * k, s)
        values.append(stac.update(p))
    assert values[0] > 0 and values == sorted(values)
    p.push(s[:, 0], 40)  # no samples recorded
    with pytest.raises(ValueError, match="num_samples"):
        stac.update(p)
    with pytest.raises(ValueError, match=">= 2"):
        StacScore(num_samples=1)


def test_random_is_seeded_and_embedding_checks_reference() -> None:
    a, b = RandomScore(seed=3), RandomScore(seed=3)
    p = FakePolicy()
    for k in range(3):
        p.push(torch.zeros(1, 16, 5), 7 * k)
        assert a.update(p) == b.update(p)
    with pytest.raises(ValueError, match="reference features"):
        EmbeddingOODScore(np.zeros((2, 4)), k=5)


def test_registry_lists_valid_names() -> None:
    with pytest.raises(KeyError) as err:
        make_score("tied")
    for name in SCORES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="action dims"):
        TideScore(dims=[])


def test_tide_window_averages_recent_discrepancies() -> None:
    p, tide = FakePolicy(), TideScore(window=2)
    p.push(torch.zeros(1, 16, 5), -1)
    tide.update(p)
    values = []
    for k, level in enumerate([1.0, 3.0, 3.0], start=1):
        prev = p.last_chunks[-1].actions
        p.push(prev + level, 7 * k)  # each new chunk differs by `level` everywhere
        values.append(tide.update(p))
    assert values == pytest.approx([1.0, (1.0 + 9.0) / 2, 9.0])
    with pytest.raises(ValueError, match="window"):
        TideScore(window=0)


def test_tide_samples_compares_the_mean_chunk_not_the_executed_one() -> None:
    """Two inferences whose sample means agree but whose executed chunks (sample 0) differ by the
    sampler's noise: TIDE over the mean sees no change, Rewind-IL's TIDE sees the noise."""
    noise = torch.zeros(1, 2, 16, 4)
    noise[0, 0], noise[0, 1] = 1.0, -1.0  # mean 0, sample 0 at +1
    plain, averaged = TideScore(), TideScore(samples=2)
    assert averaged.num_samples == 2 and plain.num_samples == 1
    assert averaged.params()["samples"] == 2
    p = FakePolicy()
    p.push(noise[:, 0] * 0, -1, noise * 0)  # first: all zeros
    plain.update(p), averaged.update(p)
    p.push(noise[:, 0], 7, noise)
    assert plain.update(p) == pytest.approx(1.0)
    assert averaged.update(p) == pytest.approx(0.0)
    shifted = noise + 0.5  # the intent moves: the mean moves with it
    p.push(shifted[:, 0], 14, shifted)
    assert averaged.update(p) == pytest.approx(0.25)
    p.push(shifted[:, 0], 21)  # the policy sampled one chunk only
    with pytest.raises(ValueError, match="samples=2 needs that many chunks"):
        averaged.update(p)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        TideScore(samples=0)
