"""Diffusion Policy: a FiLM-conditioned temporal U-Net denoising action chunks.

Training (DDPM forward process, diffusers ``DDPMScheduler``): a normalized chunk ``x0`` ``[B, H, Da]``
is noised to ``x_t = sqrt(a_t) x0 + sqrt(1 - a_t) eps`` at a random step ``t``; the U-Net, conditioned
on ``[time embedding, encoder features]``, predicts ``eps`` (or ``x0`` with
``prediction_type="sample"``). The loss is the masked, per-sample weighted MSE of
:func:`~rewind.policies.obs_conditioned.masked_weighted_mse`.

Sampling: start from ``N(0, I)`` drawn with the caller's ``torch.Generator`` and run the DDIM
(``num_inference_steps``, 10 by default) or DDPM (every training step) reverse process; an optional
guidance hook corrects the clean-chunk estimate in the last ``K`` steps (:mod:`rewind.policies.guidance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from diffusers import DDIMScheduler, DDPMScheduler

from rewind.policies.diffusion.configuration_diffusion import DiffusionConfig
from rewind.policies.diffusion.unet import ConditionalUnet1D
from rewind.policies.guidance import GuidanceFn, eps_from_x0, x0_from_eps
from rewind.policies.noise import RowGenerators, step_generators
from rewind.policies.obs_conditioned import GuidedChunkPolicy, masked_weighted_mse


def make_scheduler(cfg: DiffusionConfig, kind: str) -> DDPMScheduler | DDIMScheduler:
    """A diffusers scheduler of ``kind`` (``ddpm``/``ddim``) with ``cfg``'s noise schedule."""
    common: dict[str, Any] = {
        "num_train_timesteps": cfg.num_train_timesteps,
        "beta_schedule": cfg.beta_schedule,
        "beta_start": cfg.beta_start,
        "beta_end": cfg.beta_end,
        "clip_sample": cfg.clip_sample,
        "prediction_type": cfg.prediction_type,
    }
    if kind == "ddim":
        return DDIMScheduler(**common, set_alpha_to_one=True, steps_offset=0)
    return DDPMScheduler(**common, variance_type="fixed_small")


class DiffusionPolicy(GuidedChunkPolicy):
    """Diffusion Policy over action chunks (see the module docstring).

    Args:
        config: :class:`DiffusionConfig`.
        shape_meta: observation/action layout (:mod:`rewind.policies.shape_meta`).

    Attributes:
        unet: :class:`ConditionalUnet1D` ``(x [B, H, Da], t [B], cond [B, F]) -> [B, H, Da]``.
        guidance: optional default :data:`~rewind.policies.guidance.GuidanceFn` used by
            :meth:`predict_chunk` (and so :meth:`select_action`) when no ``guidance`` is passed.
    """

    name = "diffusion"
    config: DiffusionConfig

    def __init__(self, config: DiffusionConfig, shape_meta: Mapping[str, Any]) -> None:
        super().__init__(config, shape_meta)
        self.unet = ConditionalUnet1D.from_config(config, self.action_dim, self.feature_dim)
        self.noise_scheduler = make_scheduler(config, "ddpm")
        self.sampler = make_scheduler(config, config.scheduler)

    def compute_loss(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> torch.Tensor:
        """Scalar denoising loss of a window batch (env units; see :meth:`split_batch`).

        ``generator`` draws the noise, steps and crops; default: the policy's own seeded one.
        """
        obs, x0, mask, weight = self.split_batch(batch)
        gen = generator if generator is not None else self.training_generator(self.device)
        cond = self.encode_obs(obs, gen)
        b = x0.shape[0]
        noise = torch.randn(x0.shape, generator=gen, device=gen.device).to(x0.device)
        steps = torch.randint(0, self.config.num_train_timesteps, (b,), generator=gen, device=gen.device)
        steps = steps.to(x0.device)
        x_t = self.noise_scheduler.add_noise(x0, noise, steps)
        pred = self.unet(x_t, steps, cond)
        target = noise if self.config.prediction_type == "epsilon" else x0
        return masked_weighted_mse(pred, target, mask, weight)

    def _generate(
        self,
        cond: torch.Tensor,
        generator: torch.Generator | RowGenerators | None,
        guidance: GuidanceFn | None,
        last_k: int,
    ) -> torch.Tensor:
        """Reverse process from ``N(0, I)``: ``cond`` ``[N, F]`` -> normalized chunks ``[N, H, Da]``."""
        sched = self.sampler
        sched.set_timesteps(self.config.inference_steps)
        x = self.initial_noise(cond.shape[0], generator)
        timesteps = sched.timesteps
        extra = (
            {"eta": self.config.ddim_eta} if isinstance(sched, DDIMScheduler) and self.config.ddim_eta else {}
        )
        for i, t in enumerate(timesteps):
            out = self.unet(x, t.to(x.device).expand(x.shape[0]), cond)
            if guidance is not None and i >= len(timesteps) - last_k:
                out = self._guide(out, x, int(t), guidance)
            x = sched.step(out, t, x, generator=step_generators(generator, x.shape[0]), **extra).prev_sample
        return x

    def _guide(self, out: torch.Tensor, x_t: torch.Tensor, t: int, guidance: GuidanceFn) -> torch.Tensor:
        """Apply ``guidance`` to the clean-chunk estimate and return the corrected model output."""
        alpha_bar = float(self.sampler.alphas_cumprod[t])
        if self.config.prediction_type == "epsilon":
            x0 = x0_from_eps(x_t, out, alpha_bar)
            return eps_from_x0(x_t, guidance(x0, t), alpha_bar)
        return guidance(out, t)
