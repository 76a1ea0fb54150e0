"""``obs_scale_floor``: the dimensions of one observation key share units, so a dimension that barely
moved in the demos is scaled like the key's widest one (a tilt stays a small input)."""

import numpy as np
import pytest
import torch

from rewind.policies.normalizer import Normalizer


def _quat_like(rng: np.random.Generator) -> np.ndarray:
    """Upright cubes turning about z: w and z sweep [-1, 1]-ish, x and y stay within 1e-3."""
    yaw = rng.uniform(-np.pi, np.pi, 300)
    q = np.stack(
        [np.cos(yaw / 2), rng.uniform(-1e-3, 1e-3, 300), rng.uniform(-1e-3, 1e-3, 300), np.sin(yaw / 2)], 1
    )
    return np.abs(q) * np.sign(q[:, :1] + 1e-9)


def test_floor_keeps_a_tilt_small() -> None:
    data = _quat_like(np.random.default_rng(0))
    specs = {"obs/quat": (4, "min_max"), "action": (4, "min_max")}
    free = Normalizer(specs).fit({"obs/quat": data, "action": data})
    floored = Normalizer(specs, obs_scale_floor=0.5).fit({"obs/quat": data, "action": data})
    tilted = torch.tensor([[0.99, 0.1, 0.0, 0.1]])  # about 11 degrees of tilt
    assert free.normalize("obs/quat", tilted)[0, 1].abs() > 50
    assert floored.normalize("obs/quat", tilted)[0, 1].abs() < 1
    widest = free.stats["obs/quat"].scale.max()
    assert torch.all(floored.stats["obs/quat"].scale >= 0.5 * widest - 1e-6)
    assert torch.equal(floored.stats["action"].scale, free.stats["action"].scale)  # actions untouched
    x = torch.as_tensor(data, dtype=torch.float32)
    assert torch.allclose(floored.unnormalize("obs/quat", floored.normalize("obs/quat", x)), x, atol=1e-5)


def test_floor_off_by_default_and_range_checked() -> None:
    data = _quat_like(np.random.default_rng(1))
    a = Normalizer({"obs/q": (4, "min_max")}).fit({"obs/q": data})
    b = Normalizer({"obs/q": (4, "min_max")}, obs_scale_floor=0.0).fit({"obs/q": data})
    assert torch.equal(a.stats["obs/q"].scale, b.stats["obs/q"].scale)
    with pytest.raises(ValueError, match=r"obs_scale_floor must be in \[0, 1\]; got 2"):
        Normalizer({"obs/q": (4, "min_max")}, obs_scale_floor=2)


def test_policy_config_carries_the_floor() -> None:
    from rewind.policies.diffusion.configuration_diffusion import DiffusionConfig

    assert DiffusionConfig().obs_scale_floor == 0.0
    with pytest.raises(ValueError, match="obs_scale_floor must be in"):
        DiffusionConfig(obs_scale_floor=-0.1)
