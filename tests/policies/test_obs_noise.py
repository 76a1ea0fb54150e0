"""``obs_noise``: Gaussian noise on the normalized low-dim observations in training only, drawn from the
training generator, so training stays seeded and validation and inference see clean inputs."""

from __future__ import annotations

import pytest
import torch
from helpers.policies import build, make_batch

from rewind.policies.diffusion import DiffusionConfig
from rewind.utils.seeding import torch_generator


def _features(policy, generator_seed: int | None) -> torch.Tensor:
    obs = make_batch()["obs"]
    gen = None if generator_seed is None else torch_generator(generator_seed)
    with torch.no_grad():
        return policy.encode_obs(obs, gen)


@pytest.mark.parametrize("variant", ["ddim-eps", "flow"])
def test_noise_changes_training_features_only(variant: str) -> None:
    noisy = build(variant, obs_noise=0.1)
    clean = build(variant)
    noisy.train(), clean.train()
    # same initialisation: only the noise differs
    assert torch.equal(_features(clean, 3), _features(clean, 3))
    a, b = _features(noisy, 3), _features(noisy, 4)
    assert not torch.allclose(a, _features(clean, 3))
    assert torch.equal(a, _features(noisy, 3))  # seeded by the generator
    assert not torch.allclose(a, b)  # a new draw per generator state
    noisy.eval()
    assert torch.equal(_features(noisy, 3), _features(clean.eval(), 3))  # eval: no noise
    noisy.train()
    assert torch.equal(_features(noisy, None), _features(clean.train(), None))  # no generator: no noise


def test_noise_scale_is_in_normalized_units() -> None:
    policy = build("ddim-eps", obs_noise=0.5).train()
    obs = policy.check_obs(make_batch(n=600)["obs"])
    clean = policy.normalizer.normalize_obs(obs)
    noisy = policy._add_obs_noise(clean, torch_generator(0))
    diff = noisy["state"] - clean["state"]
    assert diff.std().item() == pytest.approx(0.5, rel=0.05)
    assert diff.mean().abs().item() < 0.02


def test_zero_noise_keeps_the_training_stream() -> None:
    """The default draws nothing extra: losses match a policy built without the field."""
    a, b = build("ddim-eps").train(), build("ddim-eps", obs_noise=0.0).train()
    batch = make_batch()
    la = a.compute_loss(batch, generator=torch_generator(5))
    lb = b.compute_loss(batch, generator=torch_generator(5))
    assert torch.equal(la, lb)
    c = build("ddim-eps", obs_noise=0.2).train()
    assert not torch.equal(la, c.compute_loss(batch, generator=torch_generator(5)))


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_bad_noise_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="obs_noise must be a finite number >= 0"):
        DiffusionConfig(obs_noise=bad)
