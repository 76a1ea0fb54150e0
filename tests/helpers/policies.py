"""Tiny diffusion/flow policies and window batches shared by the policy tests (CPU, seconds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rewind.policies.obs_conditioned import ObsConditionedPolicy
from rewind.policies.registry import make_policy
from rewind.utils.seeding import torch_generator

B, S, TO, H, DA, D_OBS = 3, 2, 2, 8, 3, 5
SHAPE_META = {
    "obs": {
        "state": {"shape": [D_OBS], "dtype": "float32"},
        "rgb": {"shape": [20, 20, 3], "dtype": "uint8"},
    },
    "action_dim": DA,
}
TINY: dict[str, Any] = {
    "n_obs_steps": TO,
    "horizon": H,
    "n_action_steps": 4,
    "down_dims": (16, 32),
    "n_groups": 4,
    "diffusion_step_embed_dim": 16,
    "obs_feature_dim": 32,
}
#: (policy name, config overrides) of every variant the shared tests run on.
VARIANTS = {
    "ddim-eps": ("diffusion", {"scheduler": "ddim", "prediction_type": "epsilon", "num_train_timesteps": 20}),
    "ddim-sample": (
        "diffusion",
        {"scheduler": "ddim", "prediction_type": "sample", "num_train_timesteps": 20},
    ),
    "ddpm-eps": ("diffusion", {"scheduler": "ddpm", "prediction_type": "epsilon", "num_train_timesteps": 20}),
    "ddpm-sample": (
        "diffusion",
        {"scheduler": "ddpm", "prediction_type": "sample", "num_train_timesteps": 20},
    ),
    "flow": ("flow", {"num_inference_steps": 5}),
}


def make_batch(seed: int = 0, n: int = B, image: bool = False) -> dict[str, Any]:
    """A window batch in env units (actions far from zero mean / unit scale)."""
    g = torch_generator(seed)
    mask = torch.ones(n, H, dtype=torch.bool)
    mask[0, -2:] = False
    obs = {"state": 2.0 + torch.randn(n, TO, D_OBS, generator=g)}
    if image:
        obs["rgb"] = torch.randint(0, 256, (n, TO, 20, 20, 3), generator=g, dtype=torch.uint8)
    return {
        "obs": obs,
        "action": 5.0 + 3.0 * torch.randn(n, H, DA, generator=g),
        "action_mask": mask,
        "sample_weight": torch.tensor([1.0, 2.0, 0.5] * (n // 3) + [1.0] * (n % 3)),
    }


def build(variant: str, seed: int = 0, **overrides: Any) -> ObsConditionedPolicy:
    """A tiny policy with seeded initialisation (global RNG restored) and a fitted normalizer."""
    name, cfg = VARIANTS[variant]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = make_policy(name, {**TINY, **cfg, **overrides}, SHAPE_META)
    rng = np.random.default_rng(seed)
    policy.fit_normalizer(
        {
            "obs/state": 2.0 + rng.normal(size=(200, D_OBS)),
            "action": 5.0 + 3.0 * rng.normal(size=(200, DA)),
            "obs/rgb": np.zeros((1, 20, 20, 3), np.uint8),
        }
    )
    return policy
