"""ReGuide-style guided rollouts (``recovery=guided``): self-generated recovery data, no operator.

Before a round (:meth:`GuidedSource.prepare`), with the current policy's frozen encoder:

1. **Phase prototypes**: every demo step's latent (encoder features of its window) is projected to
   ``pca_dim`` whitened principal components; k-means (``phases * prototypes`` centres, seeded) runs on
   them; the centres are ordered by the mean normalised time of their members and grouped, in that
   order, into ``phases`` macro-phases of ``prototypes`` prototypes each.
2. **Latent dynamics**: ``rollouts`` episodes of the plain policy (plus the demos) train a small MLP
   ``(p_t, a_t..a_{t+h-1}) -> p_{t+h}`` (``h = n_action_steps``; normalised actions, so the gradient
   reaches the policy's clean-action estimate).
3. **Drift** of a chunk: ``d = softmin_m ||p_hat - c_m||`` (temperature ``temperature``) of the predicted
   latent to the prototypes of the current phase (the phase of the nearest prototype to ``p_t``) and of
   the next one (our choice: at a phase's end the future latent already belongs to the next phase,
   and pulling it back would stall progress). Per phase, the ``low_pct`` / ``high_pct`` percentiles
   of ``d`` over the rollouts' executed chunks give ``d_low`` / ``d_high``.

During the round's episodes the policy samples with a guidance function applied to the clean-action
estimate in the last ``last_k`` denoising steps (:mod:`rewind.policies.guidance`):
``x0' = x0 - scale * grad_x0 d`` only when ``d_low < d <= d_high`` (drifted but recoverable).
Only successful guided rollouts are kept (``keep=success``), every step labelled ``guided``;
no step is an operator step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rewind.config import check_choice, check_range, require
from rewind.train.policy_api import SAMPLERS  # ``recovery.guided.sampler``: the policy's own, DDIM, DDPM

log = logging.getLogger(__name__)

#: ``recovery.guided.dynamics_data``: what the latent dynamics model is trained on.
DYNAMICS_DATA = ("both", "rollouts", "demos")
#: ``recovery.guided.latent``: the space prototypes and dynamics live in (see :class:`GuidedConfig`).
LATENTS = ("pca", "learned")


@dataclass
class GuidedConfig:
    """ReGuide settings (``recovery=guided``; see the module docstring).

    Attributes:
        phases: macro-phases; prototypes: k-means prototypes per phase; pca_dim: whitened PCA size.
        low_pct / high_pct: per-phase drift percentiles of the guidance band (ReGuide: 30/90 for Can).
        scale: guidance step ``c`` on the clean-action estimate (ReGuide: 0.01 with 100 DDPM steps);
            0: no guidance (plain rollouts, the sweep's control), the diagnostics still recorded.
        last_k: denoising steps (the last ones) in which guidance is applied.
        temperature: softmin temperature of the distance to a phase's prototypes.
        rollouts: plain-policy rollouts the dynamics model and the percentiles come from.
        rollout_seed: env seed of the first of those rollouts (round ``r`` adds ``1000 * r``).
        dynamics_steps: Adam steps of the latent dynamics model.
        dynamics_data: what the dynamics model trains on: ``both`` (the plain rollouts and the demos),
            ``rollouts`` or ``demos`` (the bands always come from the rollouts).
        sampler: the sampler of the round's collection (the plain rollouts included): ``policy`` (the
            policy's own), ``ddim`` or ``ddpm`` (every training step, as ReGuide; diffusion policies only).
        inference_steps: denoising steps (``None``: the sampler's default: the policy's own for
            ``policy``, 10 for DDIM, every training step for DDPM).
        latent: ``pca``: encoder features whitened to ``pca_dim`` principal components of the demos;
            ``learned``: a linear projection of the features (started at that PCA basis) trained with the
            dynamics model to make ``p_{t+h}`` predictable, kept whitened by a covariance penalty
            (weight ``projection_cov_weight``); the prototypes are then refit in it
            (:func:`train_projection`).
        measure_change: on every inference where guidance was applied, sample the same chunk again
            without guidance from the same generator state and record the change of the executed
            actions (one extra sampling per guided inference; see :mod:`rewind.loop.guided_diagnostics`).
    """

    phases: int = 3
    prototypes: int = 4
    pca_dim: int = 16
    low_pct: float = 30.0
    high_pct: float = 90.0
    scale: float = 0.01
    last_k: int = 3
    temperature: float = 1.0
    rollouts: int = 20
    rollout_seed: int = 40000
    dynamics_steps: int = 500
    dynamics_data: str = "both"
    sampler: str = "policy"
    inference_steps: int | None = None
    latent: str = "pca"
    projection_cov_weight: float = 1.0
    measure_change: bool = True

    def __post_init__(self) -> None:
        for name in ("phases", "prototypes", "pca_dim", "last_k", "rollouts", "dynamics_steps"):
            require(
                getattr(self, name) >= 1, f"recovery.guided.{name} must be >= 1; got {getattr(self, name)}"
            )
        require(
            0.0 <= self.low_pct < self.high_pct <= 100.0,
            f"recovery.guided needs 0 <= low_pct < high_pct <= 100; got {self.low_pct}, {self.high_pct}",
        )
        check_range("recovery.guided.scale", self.scale, 0.0)
        require(self.temperature > 0, f"recovery.guided.temperature must be > 0; got {self.temperature}")
        check_choice("recovery.guided.dynamics_data", self.dynamics_data, DYNAMICS_DATA)
        check_choice("recovery.guided.sampler", self.sampler, SAMPLERS)
        check_choice("recovery.guided.latent", self.latent, LATENTS)
        check_range("recovery.guided.projection_cov_weight", self.projection_cov_weight, 0.0)
        if self.inference_steps is not None:
            check_range("recovery.guided.inference_steps", self.inference_steps, 1)


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``[k, D]`` and labels ``[N]`` (k-means++ start, Lloyd iterations; ``k <= N``)."""
    centres = [x[rng.integers(len(x))]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None] - np.asarray(centres)[None]) ** 2).sum(-1), axis=1)
        centres.append(x[rng.choice(len(x), p=d2 / d2.sum())] if d2.sum() > 0 else x[rng.integers(len(x))])
    c = np.asarray(centres, dtype=np.float64)
    for _ in range(iters):
        labels = ((x[:, None] - c[None]) ** 2).sum(-1).argmin(1)
        new = np.stack([x[labels == j].mean(0) if (labels == j).any() else c[j] for j in range(k)])
        if np.allclose(new, c):
            break
        c = new
    return c, ((x[:, None] - c[None]) ** 2).sum(-1).argmin(1)


class PhaseModel(nn.Module):
    """Whitened PCA of encoder latents and the time-ordered phase prototypes (buffers, torch)."""

    def __init__(self, mean: np.ndarray, basis: np.ndarray, centres: np.ndarray, phase: np.ndarray) -> None:
        super().__init__()
        for name, v in (("mean", mean), ("basis", basis), ("centres", centres)):
            self.register_buffer(name, torch.as_tensor(v, dtype=torch.float32))
        self.register_buffer("phase_of", torch.as_tensor(phase, dtype=torch.long))
        self.n_phases = int(phase.max()) + 1

    @classmethod
    def fit(
        cls,
        latents: np.ndarray,
        times: np.ndarray,
        cfg: GuidedConfig,
        seed: int,
        basis: np.ndarray | None = None,
    ) -> PhaseModel:
        """PCA (whitened) + k-means on demo latents ``[N, F]`` with normalised times ``[N]`` in [0, 1];
        ``basis`` ``[F, d]``: project with it instead of the PCA (a learned projection)."""
        mean = latents.mean(0)
        if basis is None:
            _, s, vt = np.linalg.svd(latents - mean, full_matrices=False)
            dim = min(cfg.pca_dim, vt.shape[0])
            basis = vt[:dim].T / np.maximum(s[:dim] / np.sqrt(len(latents)), 1e-6)
        p = (latents - mean) @ basis
        k = min(cfg.phases * cfg.prototypes, len(p))
        centres, labels = kmeans(p, k, np.random.default_rng(seed))
        order = np.argsort([times[labels == j].mean() if (labels == j).any() else 1.0 for j in range(k)])
        phase = np.minimum(np.arange(k) * cfg.phases // k, cfg.phases - 1)
        return cls(mean, basis, centres[order], phase)

    def project(self, z: torch.Tensor) -> torch.Tensor:
        """Encoder features ``[B, F]`` -> whitened PCA latents ``[B, d]``."""
        return (z.float() - self.mean) @ self.basis

    def phase(self, p: torch.Tensor) -> torch.Tensor:
        """Phase ``[B]`` of the nearest prototype."""
        return self.phase_of[torch.cdist(p, self.centres).argmin(1)]

    def drift(self, p_next: torch.Tensor, phase: torch.Tensor, temperature: float) -> torch.Tensor:
        """Softmin distance ``[B]`` of predicted latents to the prototypes of ``phase`` and ``phase + 1``."""
        dist = torch.cdist(p_next, self.centres)  # [B, K]
        near = (self.phase_of[None] >= phase[:, None]) & (self.phase_of[None] <= phase[:, None] + 1)
        logits = torch.where(near, -dist / temperature, torch.full_like(dist, -1e9))
        return -temperature * (torch.logsumexp(logits, 1) - torch.log(near.float().sum(1)))


class LatentDynamics(nn.Module):
    """``(p_t [B, d], actions [B, h, Da] normalised) -> p_{t+h}`` (an MLP predicting the change)."""

    def __init__(self, dim: int, h: int, action_dim: int, hidden: int = 128) -> None:
        super().__init__()
        self.h = h
        self.net = nn.Sequential(
            nn.Linear(dim + h * action_dim, hidden),
            nn.Mish(),
            nn.Linear(hidden, hidden),
            nn.Mish(),
            nn.Linear(hidden, dim),
        )

    def forward(self, p: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Predicted latent after the ``h`` actions."""
        return p + self.net(torch.cat([p, actions.flatten(1)], 1))


def _seeded_dynamics(dim: int, a: np.ndarray, seed: int) -> tuple[torch.Generator, LatentDynamics]:
    """The minibatch generator and the initialised :class:`LatentDynamics` of one fit (both from
    ``seed``; the global RNG untouched)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return gen, LatentDynamics(dim, a.shape[1], a.shape[2])


def _minibatches(n: int, steps: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """``steps`` index batches of ``min(256, n)`` rows drawn with replacement from ``gen``."""
    for _ in range(steps):
        yield torch.randint(0, n, (min(256, n),), generator=gen)


def train_dynamics(
    p: np.ndarray, a: np.ndarray, p_next: np.ndarray, steps: int, seed: int
) -> tuple[LatentDynamics, float]:
    """Fit :class:`LatentDynamics` on transitions; returns it and its final mean squared error."""
    gen, model = _seeded_dynamics(p.shape[1], a, seed)
    tp, ta, tn = (torch.as_tensor(x, dtype=torch.float32) for x in (p, a, p_next))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = torch.zeros(())
    for idx in _minibatches(len(tp), steps, gen):
        loss = ((model(tp[idx], ta[idx]) - tn[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval().requires_grad_(False), float(loss.detach())


def _whitening(x: np.ndarray) -> np.ndarray:
    """``[F, r]``: maps centred features onto all their ``r`` non-degenerate whitened components."""
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    keep = s > 1e-6 * s[0]
    return vt[keep].T / (s[keep] / np.sqrt(len(x)))


def train_projection(
    z: np.ndarray,
    a: np.ndarray,
    z_next: np.ndarray,
    mean: np.ndarray,
    basis: np.ndarray,
    steps: int,
    seed: int,
    cov_weight: float = 1.0,
) -> tuple[np.ndarray, LatentDynamics, float]:
    """A learned latent (``recovery.guided.latent=learned``): a linear projection ``W`` ``[F, d]``
    (started at ``basis``) and :class:`LatentDynamics` in its space, trained together on raw feature
    transitions ``z [N, F], a [N, h, Da] -> z_next [N, F]`` to minimise
    ``|f(W(z - mean), a) - W(z_next - mean)|^2 + cov_weight * |Cov(W(z - mean)) - I|_F^2 / d``.
    The covariance term keeps the projection whitened, so it cannot shrink to make prediction
    trivial. ``W`` is learned in the transitions' whitened coordinates (``W = white @ M``), so the
    step size does not depend on the features' scale. Returns ``W``, the model and its final error."""
    gen, model = _seeded_dynamics(basis.shape[1], a, seed)
    white = _whitening(z - mean)
    m = nn.Parameter(torch.as_tensor(np.linalg.lstsq(white, basis, rcond=None)[0], dtype=torch.float32))
    tw = torch.as_tensor(white, dtype=torch.float32)
    mu = torch.as_tensor(mean, dtype=torch.float32)
    tz, tn = (torch.as_tensor(x, dtype=torch.float32) - mu for x in (z, z_next))
    ta = torch.as_tensor(a, dtype=torch.float32)
    eye = torch.eye(m.shape[1])
    opt = torch.optim.Adam([{"params": model.parameters(), "lr": 1e-3}, {"params": [m], "lr": 1e-2}])
    mse = torch.zeros(())
    for idx in _minibatches(len(tz), steps, gen):
        w = tw @ m
        p, p_next = tz[idx] @ w, tn[idx] @ w
        mse = ((model(p, ta[idx]) - p_next) ** 2).mean()
        centred = p - p.mean(0)
        cov = centred.T @ centred / max(len(idx) - 1, 1)
        loss = mse + cov_weight * ((cov - eye) ** 2).sum() / m.shape[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = (tw @ m).detach().numpy().astype(np.float64)
    return w, model.eval().requires_grad_(False), float(mse.detach())


class DriftGuide:
    """The guidance function (:data:`rewind.policies.guidance.GuidanceFn`) of a guided rollout.

    :meth:`set_latent` gives it the current window's encoder features before each chunk is sampled;
    called with the clean-action estimate ``x0`` ``[N, H, Da]`` (normalised) it returns
    ``x0 - scale * grad d`` on the rows whose drift ``d`` lies in their phase's band, else ``x0``.
    """

    def __init__(
        self,
        phases: PhaseModel,
        dynamics: LatentDynamics,
        low: torch.Tensor,
        high: torch.Tensor,
        cfg: GuidedConfig,
        first: int,
    ) -> None:
        self.phases, self.dynamics, self.low, self.high = phases, dynamics, low, high
        self.scale, self.temperature, self.first = cfg.scale, cfg.temperature, first
        self.p: torch.Tensor | None = None
        self.ph: torch.Tensor | None = None
        self.calls = self.guided = 0
        #: Of the current inference (reset by :meth:`set_latent`): whether guidance changed ``x0`` in
        #: any of its steps, and the summed L2 norm of those changes on row 0 (normalised units).
        self.inference_gated, self.inference_term = False, 0.0

    def set_latent(self, z: torch.Tensor | None) -> None:
        """Encoder features ``[1, F]`` of the window the next chunk is sampled for (``None``: off)."""
        self.inference_gated, self.inference_term = False, 0.0
        if z is None:
            self.p = self.ph = None
            return
        with torch.no_grad():
            self.p = self.phases.project(z)
            self.ph = self.phases.phase(self.p)

    def predict(self, x0: torch.Tensor) -> torch.Tensor:
        """The latent ``[N, d]`` the dynamics model predicts after each chunk row's executed actions."""
        assert self.p is not None
        n, h = x0.shape[0], self.dynamics.h
        return self.dynamics(self.p.expand(n, -1), x0[:, self.first : self.first + h])

    def drift(self, x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Drift ``[N]`` of each chunk row and whether it is inside its phase's band."""
        return self.latent_drift(self.predict(x0))

    def latent_drift(self, p_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Drift ``[N]`` of predicted latents ``[N, d]`` (:meth:`predict`) and whether it is in the band."""
        assert self.ph is not None
        ph = self.ph.expand(p_next.shape[0])
        d = self.phases.drift(p_next, ph, self.temperature)
        return d, (d > self.low[ph]) & (d <= self.high[ph])

    def __call__(self, x0: torch.Tensor, t: float) -> torch.Tensor:
        """``x0'`` (see the class docstring)."""
        if self.p is None:
            return x0
        self.calls += 1
        with torch.enable_grad():
            x = x0.detach().float().requires_grad_(True)
            d, on = self.drift(x)
            if not bool(on.any()):
                return x0
            (grad,) = torch.autograd.grad((d * on).sum(), x)
        self.guided += 1
        step = self.scale * grad.to(x0.dtype)
        self.inference_gated = True
        self.inference_term += float(step[0].norm())
        return x0 - step
