"""Per-row noise streams (rewind.policies.noise) and the batch invariance batched rollouts rely on: in
an inference block of fixed size, a row's chunk depends only on its own window and stream, bit for
bit, not on the other rows or its position (across block sizes CPU kernels differ at ~1e-5, hence
the fixed-size blocks of rewind.monitor.batched)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.policies import SHAPE_META, build, make_batch

from rewind.policies.act import ACTConfig, ACTPolicy
from rewind.policies.base import PolicyState
from rewind.policies.noise import NoiseStream, RowGenerators
from rewind.utils.seeding import torch_generator

P = 6  # the fixed block size of these tests


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _act() -> ACTPolicy:
    cfg = ACTConfig(
        n_obs_steps=2,
        horizon=8,
        n_action_steps=4,
        d_model=16,
        n_heads=2,
        dim_feedforward=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=4,
        obs_feature_dim=16,
        dropout=0.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = ACTPolicy(cfg, {"obs": {"state": SHAPE_META["obs"]["state"]}, "action_dim": 3})
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs/state": 2.0 + rng.normal(size=(50, 5)), "action": rng.normal(size=(50, 3))})
    return policy.eval()


POLICIES = {
    "ddim": lambda: build("ddim-eps"),
    "ddpm": lambda: build("ddpm-eps"),  # draws step noise every denoising step
    "flow": lambda: build("flow"),
    "act": _act,
}


def _streams(seeds: list[int]) -> RowGenerators:
    return RowGenerators([NoiseStream(torch_generator(s)) for s in seeds])


def _chunks(policy, obs: dict, seeds: list[int], samples: int) -> torch.Tensor:
    return policy.predict_chunk(obs, samples, _streams(seeds))


@pytest.mark.parametrize("samples", [1, 3])
@pytest.mark.parametrize("name", list(POLICIES))
def test_a_row_in_a_fixed_size_block_ignores_the_other_rows(name, samples) -> None:
    policy = POLICIES[name]()
    a, b = make_batch(1, P)["obs"]["state"], make_batch(2, P)["obs"]["state"]
    ref = _chunks(policy, {"state": a}, list(range(P)), samples)
    for pos, src in [(0, 3), (4, 0), (P - 1, 5)]:
        mixed = b.clone()
        mixed[pos] = a[src]
        seeds = [100 + i for i in range(P)]
        seeds[pos] = src
        out = _chunks(policy, {"state": mixed}, seeds, samples)
        assert torch.equal(out[pos], ref[src]), (name, pos, src)


def test_row_streams_draw_the_same_noise_alone_or_together() -> None:
    alone = [_streams([s]).normal((3, 4, 2), "cpu") for s in (5, 6, 7)]
    together = _streams([5, 6, 7]).normal((9, 4, 2), "cpu")
    assert torch.equal(torch.cat(alone), together)
    plain = torch.randn((3, 4, 2), generator=torch_generator(6))
    assert torch.equal(alone[1], plain)  # one stream draws what a plain generator draws
    with pytest.raises(ValueError, match="does not split over 3 row streams"):
        _streams([5, 6, 7]).normal((4, 2), "cpu")


def test_episode_noise_is_kept_per_stream_until_cleared() -> None:
    policy = build("flow")
    policy.set_noise_mode("episode")
    rows = RowGenerators([NoiseStream(torch_generator(1)), NoiseStream(torch_generator(2))])
    first = policy.initial_noise(2, rows)
    assert torch.equal(policy.initial_noise(2, rows), first)  # reused
    rows.streams[0].clear()
    again = policy.initial_noise(2, rows)
    assert not torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


def test_observe_accept_next_equals_select_action() -> None:
    policy = build("ddim-eps")
    obs = make_batch(3, 2)["obs"]["state"]
    steps = [{"state": obs[:, t]} for t in range(2)] * 3
    expected = [policy.select_action(o, generator=torch_generator(4)) for o in steps]
    policy.set_state(PolicyState())
    got = []
    for o in steps:
        window = policy.observe(o)
        if window is not None:
            policy.accept_chunk(policy.predict_chunk(window, 1, torch_generator(4)))
        got.append(policy.next_action())
    assert all(torch.equal(x, y) for x, y in zip(expected, got, strict=True))
