"""ACT: a transformer encoder-decoder action-chunk policy with a CVAE latent (Zhao et al., 2023).

Training (:meth:`ACTPolicy.compute_loss`): a posterior encoder reads ``[CLS, obs, a_0 .. a_{H-1}]``
and gives ``mu, logvar`` of a latent ``z`` (``latent_dim``); the main encoder reads ``[z, obs tokens]``
and the decoder's ``H`` learned queries cross-attend to it to predict the chunk. The loss is the L1
error on normalized actions (masked by ``action_mask``, weighted per window by ``sample_weight``) plus
``kl_weight * KL(q(z | a, o) || N(0, I))``.

Inference (:meth:`predict_chunk`): ``z = 0`` (the prior mean) for sample 0, so ``num_samples = 1`` is
deterministic. Samples ``1 .. S-1`` draw ``z ~ N(0, I)`` from the passed ``generator``, which gives
sampling-based baselines (e.g. STAC-style statistical consistency) the diversity the CVAE learned.

Observation tokens are the shared encoder's features (:class:`ObsConditionedPolicy`) cut into
tokens: one per camera and observation step (``image_feature_dim`` each), then the low-dim part
(one token for ``low_dim_mode = "flatten"``, one per step for ``"per_step"``); each kind gets its own
projection to ``d_model``. Normalization is the shared :class:`~rewind.policies.normalizer.Normalizer`
(``mean_std`` by default, as in ACT); everything the policy takes and returns is in env units.

Temporal ensembling (``temporal_ensemble_coeff = m``): see :mod:`rewind.policies.act.ensemble`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rewind.policies.act.configuration_act import ACTConfig
from rewind.policies.act.ensemble import ACTPolicyState, TemporalEnsembler
from rewind.policies.act.network_act import ACTNetwork, kl_to_standard_normal
from rewind.policies.base import ChunkRecord, Obs, PolicyState
from rewind.policies.noise import normal
from rewind.policies.obs_conditioned import ObsConditionedPolicy


def masked_weighted_l1(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None, weight: torch.Tensor | None
) -> torch.Tensor:
    """Scalar L1 loss from ``pred``/``target`` ``[B, H, Da]``, with the conventions of
    :func:`~rewind.policies.obs_conditioned.masked_weighted_mse`: per window the mean over ``Da`` and
    the valid steps (``mask`` ``[B, H]``), over the batch ``sum(w * l) / sum(w)`` (``weight`` ``[B]``)."""
    err = (pred.float() - target.float()).abs().mean(-1)  # [B, H]
    m = torch.ones_like(err) if mask is None else mask.to(err.dtype)
    per_window = (err * m).sum(1) / m.sum(1).clamp_min(1.0)
    w = torch.ones_like(per_window) if weight is None else weight.to(err.dtype)
    return (per_window * w).sum() / w.sum().clamp_min(1e-8)


class ACTPolicy(ObsConditionedPolicy):
    """ACT with a CVAE latent over action chunks; see the module docstring.

    Args:
        config: hyper-parameters.
        shape_meta: ``{"obs": {key: {"shape": [...], "dtype": ...}}, "action_dim": Da}``
            (:mod:`rewind.policies.shape_meta`); ``config.obs_keys`` / ``config.image_keys`` pick
            the keys read (default: every low-dim key, no images).

    Shapes: ``encode`` ``[B, To, ...] -> [B, d_model]``; ``predict_chunk`` ``-> [B, S, H, Da]``.
    """

    name: ClassVar[str] = "act"
    config: ACTConfig

    def __init__(self, config: ACTConfig, shape_meta: Mapping[str, Any]) -> None:
        """Build the shared normalizer and encoder, the token projections and the transformer."""
        super().__init__(config, shape_meta)
        d = config.d_model
        self.n_image_tokens = config.n_obs_steps * len(self.image_keys)
        low_width = self.feature_dim - self.n_image_tokens * config.image_feature_dim
        self.n_low_tokens = low_width // config.obs_feature_dim
        self.image_proj = nn.Linear(config.image_feature_dim, d) if self.n_image_tokens else None
        self.low_proj = nn.Linear(config.obs_feature_dim, d) if self.n_low_tokens else None
        self.net = ACTNetwork(config, self.action_dim, self.n_image_tokens + self.n_low_tokens)
        self.ensembler = (
            None
            if config.temporal_ensemble_coeff is None
            else TemporalEnsembler(config.temporal_ensemble_coeff, config.horizon - config.n_obs_steps + 1)
        )
        self._state = ACTPolicyState()

    # ----------------------------------------------------------------- observations
    def obs_tokens(self, obs: Obs, generator: torch.Generator | None = None) -> torch.Tensor:
        """Tokens ``[B, N, d_model]`` from a window ``dict[key -> [B, To, ...]]`` (env units; checked
        for missing keys and NaN/inf). ``generator`` draws the train-time image crops."""
        feats = self.encode_obs(obs, generator)  # [B, F]: images (camera-major, step-minor), low-dim
        b, cut = feats.shape[0], self.n_image_tokens * self.config.image_feature_dim
        tokens = []
        if self.image_proj is not None:
            tokens.append(self.image_proj(feats[:, :cut].reshape(b, self.n_image_tokens, -1)))
        if self.low_proj is not None:
            tokens.append(self.low_proj(feats[:, cut:].reshape(b, self.n_low_tokens, -1)))
        return torch.cat(tokens, dim=1)

    def encode(self, obs: Obs) -> torch.Tensor:
        """Features ``[B, d_model]``: the transformer encoder's memory at ``z = 0`` averaged over its
        tokens (what the action decoder attends to; deterministic in eval mode)."""
        tokens = self.obs_tokens(obs)
        z = tokens.new_zeros(tokens.shape[0], self.config.latent_dim)
        return self.net.memory(tokens, z).mean(dim=1)

    # ----------------------------------------------------------------- training
    def compute_loss_terms(
        self, batch: Mapping[str, Any], generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """``{"loss", "l1", "kl"}`` scalars for a window batch (see :meth:`compute_loss`)."""
        gen = generator if generator is not None else self.training_generator(self.device)
        obs, actions, mask, weight = self.split_batch(batch)
        tokens = self.obs_tokens(obs, gen)
        if self.config.use_vae:
            keep = torch.ones(actions.shape[:2], dtype=torch.bool, device=actions.device)
            mu, logvar = self.net.posterior(tokens, actions, keep if mask is None else mask.bool())
            eps = torch.randn(mu.shape, generator=gen, device=gen.device).to(mu)
            z = mu + (0.5 * logvar).exp() * eps
            kl = kl_to_standard_normal(mu, logvar).mean()
        else:
            z = tokens.new_zeros(tokens.shape[0], self.config.latent_dim)
            kl = tokens.new_zeros(())
        pred = self.net.decode(self.net.memory(tokens, z))
        l1 = masked_weighted_l1(pred, actions, mask, weight)
        return {"loss": l1 + self.config.kl_weight * kl, "l1": l1.detach(), "kl": kl.detach()}

    def compute_loss(
        self, batch: Mapping[str, Any], generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Scalar loss: masked, window-weighted L1 on normalized actions + ``kl_weight * KL``.

        ``batch``: ``obs`` dict (or ``obs/<key>``) ``[B, To, ...]``, ``action`` ``[B, H, Da]`` (env
        units), optional ``action_mask`` ``[B, H]`` (used when ``mask_padding``) and
        ``sample_weight`` ``[B]``. ``generator`` draws the reparameterisation noise and image crops
        (default: the policy's own generator, seeded with ``config.seed``).
        """
        return self.compute_loss_terms(batch, generator)["loss"]

    # ----------------------------------------------------------------- inference
    def _sample_chunk(self, obs: Obs, num_samples: int, generator: torch.Generator | None) -> torch.Tensor:
        """``[B, S, H, Da]`` in env units; sample 0 uses ``z = 0``, the others ``z ~ N(0, I)``."""
        tokens = self.obs_tokens(obs)
        b, zdim = tokens.shape[0], self.config.latent_dim
        z = tokens.new_zeros(b, num_samples, zdim)
        if num_samples > 1:
            z[:, 1:] = normal((b, num_samples - 1, zdim), generator, tokens.device).to(z)
        tokens = tokens.repeat_interleave(num_samples, dim=0)
        chunk = self.net.decode(self.net.memory(tokens, z.reshape(b * num_samples, zdim)))
        chunk = self.normalizer.unnormalize("action", chunk)
        return chunk.reshape(b, num_samples, self.horizon, self.action_dim)

    # ----------------------------------------------------------------- rollout state
    def reset(self) -> None:
        """Forget history, queue, chunks and the temporal ensemble (start of episode, rewind)."""
        self._state = ACTPolicyState()

    def get_state(self) -> ACTPolicyState:
        """A copy of the rollout state, including the temporal ensemble's pending chunks."""
        return ACTPolicyState.copy_of(self._state)

    def set_state(self, state: PolicyState) -> None:
        """Restore a state from :meth:`get_state` (a plain :class:`PolicyState` has an empty ensemble)."""
        self._state = ACTPolicyState.copy_of(state)

    def observe(self, obs: Obs) -> Obs | None:
        """Without temporal ensembling the base class's queue (a chunk every ``Ta`` steps). With it, a
        chunk is due at *every* step: the window always comes back, every chunk is recorded in
        :attr:`last_chunks` (so the monitor compares chunks one step apart, overlap ``H - To``) and the
        action is the exponentially weighted average of every pending chunk's prediction for the step.
        """
        if self.ensembler is None:
            return super().observe(obs)
        s = self._state
        s.obs_history = [*s.obs_history, obs][-self.n_obs_steps :]
        if s.step is None:
            s.step = np.zeros(next(iter(obs.values())).shape[0], dtype=np.int64)
        return self.history_window()

    def accept_chunk(self, samples: torch.Tensor) -> None:
        """Record the chunk and, with temporal ensembling, push it onto the ensemble (see :meth:`observe`)."""
        if self.ensembler is None:
            super().accept_chunk(samples)
            return
        s = self._state
        assert isinstance(s, ACTPolicyState)
        chunk = samples[:, 0]
        record = ChunkRecord(chunk, s.step - self.n_obs_steps + 1, samples if samples.shape[1] > 1 else None)
        s.chunks = [*s.chunks[-1:], record]
        s.ensemble = self.ensembler.push(s.ensemble, chunk[:, self.n_obs_steps - 1 :])

    def queued_actions(self) -> list[torch.Tensor]:
        """The base class's queue; none with temporal ensembling (every step infers)."""
        return [] if self.ensembler is not None else super().queued_actions()

    def next_action(self) -> torch.Tensor:
        """The queue's next action, or with temporal ensembling the ensembled action of this step."""
        if self.ensembler is None:
            return super().next_action()
        s = self._state
        assert isinstance(s, ACTPolicyState)
        s.step = s.step + 1  # type: ignore[operator]
        return self.ensembler.action(s.ensemble)
