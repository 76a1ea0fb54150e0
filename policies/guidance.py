"""Sampling-time guidance through the clean-chunk estimate (the ReGuide mechanism).

A guidance function maps the current clean-chunk estimate ``x0_hat`` ``[B * S, H, Da]`` (in
*normalized* action units, rows sample-major per observation as in
:meth:`~rewind.policies.obs_conditioned.ObsConditionedPolicy.repeat_features`) and the current timestep to
a corrected estimate ``x0'`` of the same shape. Use ``policy.normalizer.unnormalize("action", x)``
inside it for env units (the map is affine, so gradients flow through it).

The samplers apply it in their last ``K`` steps:

* diffusion: ``x0 = (x_t - sqrt(1 - a_t) eps) / sqrt(a_t)``; ``x0' = guidance(x0, t)``;
  ``eps' = (x_t - sqrt(a_t) x0') / sqrt(1 - a_t)``; a normal scheduler step with ``eps'``
  (or with ``x0'`` for ``prediction_type="sample"``).
* flow: ``x1 = x_t + (1 - t) v``; ``x1' = guidance(x1, t)``; ``v' = (x1' - x_t) / (1 - t)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: ``(x0_hat [N, H, Da] normalized, timestep) -> corrected x0 [N, H, Da]``.
GuidanceFn = Callable[[torch.Tensor, float], torch.Tensor]


def gradient_guidance(loss_fn: Callable[[torch.Tensor], torch.Tensor], scale: float = 0.01) -> GuidanceFn:
    """Guidance ``x0' = x0 - scale * grad_x0 loss_fn(x0)``.

    ``loss_fn`` maps ``[N, H, Da]`` (normalized units) to a scalar; sum per-row losses so that each
    row gets its own gradient. Gradients are enabled inside even under ``torch.no_grad``.
    """

    def guide(x0: torch.Tensor, t: float) -> torch.Tensor:
        with torch.enable_grad():
            x = x0.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(loss_fn(x), x)
        return x0 - scale * grad

    return guide


def eps_from_x0(x_t: torch.Tensor, x0: torch.Tensor, alpha_bar: float) -> torch.Tensor:
    """``eps = (x_t - sqrt(a) x0) / sqrt(1 - a)`` for the cumulative alpha ``a`` of the step."""
    return (x_t - alpha_bar**0.5 * x0) / max(1.0 - alpha_bar, 1e-12) ** 0.5


def x0_from_eps(x_t: torch.Tensor, eps: torch.Tensor, alpha_bar: float) -> torch.Tensor:
    """``x0 = (x_t - sqrt(1 - a) eps) / sqrt(a)``."""
    return (x_t - (1.0 - alpha_bar) ** 0.5 * eps) / max(alpha_bar, 1e-12) ** 0.5
