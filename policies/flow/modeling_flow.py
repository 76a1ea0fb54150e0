"""Flow-matching policy (rectified flow) on the Diffusion Policy U-Net.

Path from noise ``x0 ~ N(0, I)`` (``t = 0``) to the normalized action chunk ``x1`` (``t = 1``):
``x_t = (1 - t) x0 + t x1``. The U-Net, conditioned on ``[time embedding, encoder features]``,
regresses the constant velocity ``v = x1 - x0``; the loss is the masked, per-sample weighted MSE of
:func:`~rewind.policies.obs_conditioned.masked_weighted_mse`. Sampling integrates ``dx/dt = v`` with
``num_inference_steps`` Euler steps from seeded noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rewind.policies.diffusion.unet import ConditionalUnet1D
from rewind.policies.flow.configuration_flow import FlowConfig
from rewind.policies.guidance import GuidanceFn
from rewind.policies.obs_conditioned import GuidedChunkPolicy, masked_weighted_mse


class FlowPolicy(GuidedChunkPolicy):
    """Rectified-flow policy over action chunks (see the module docstring).

    Args:
        config: :class:`FlowConfig`.
        shape_meta: observation/action layout (:mod:`rewind.policies.shape_meta`).

    Attributes:
        unet: :class:`ConditionalUnet1D` ``(x_t [B, H, Da], t [B] in [0, 1], cond [B, F]) -> v``.
        guidance: optional default guidance hook (see :mod:`rewind.policies.guidance`).
    """

    name = "flow"
    config: FlowConfig

    def __init__(self, config: FlowConfig, shape_meta: Mapping[str, Any]) -> None:
        super().__init__(config, shape_meta)
        self.unet = ConditionalUnet1D.from_config(
            config, self.action_dim, self.feature_dim, time_scale=config.time_scale
        )

    def sample_time(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Training times ``[n]`` in [0, 1] on the generator's device (``config.time_sampling``)."""
        dev = generator.device
        if self.config.time_sampling == "uniform":
            return torch.rand((n,), generator=generator, device=dev)
        z = torch.randn((n,), generator=generator, device=dev)
        return torch.sigmoid(self.config.time_mean + self.config.time_std * z)

    def compute_loss(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> torch.Tensor:
        """Scalar velocity-regression loss of a window batch (env units; see :meth:`split_batch`).

        ``generator`` draws the noise, times and crops; default: the policy's own seeded one.
        """
        obs, x1, mask, weight = self.split_batch(batch)
        gen = generator if generator is not None else self.training_generator(self.device)
        cond = self.encode_obs(obs, gen)
        x0 = torch.randn(x1.shape, generator=gen, device=gen.device).to(x1.device)
        t = self.sample_time(x1.shape[0], gen).to(x1.device)
        x_t = (1 - t)[:, None, None] * x0 + t[:, None, None] * x1
        pred = self.unet(x_t, t, cond)
        return masked_weighted_mse(pred, x1 - x0, mask, weight)

    def _generate(
        self, cond: torch.Tensor, generator: torch.Generator | None, guidance: GuidanceFn | None, last_k: int
    ) -> torch.Tensor:
        """Euler integration from seeded noise: ``cond`` ``[N, F]`` -> normalized chunks ``[N, H, Da]``."""
        n_steps = self.config.num_inference_steps
        x = self.initial_noise(cond.shape[0], generator)
        dt = 1.0 / n_steps
        for i in range(n_steps):
            t = i * dt
            v = self.unet(x, torch.full((x.shape[0],), t, device=x.device), cond)
            if guidance is not None and i >= n_steps - last_k:
                x1 = guidance(x + (1.0 - t) * v, t)
                v = (x1 - x) / (1.0 - t)
            x = x + dt * v
        return x.clamp(-1.0, 1.0) if self.config.clip_sample else x
