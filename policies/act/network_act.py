"""The ACT transformer: a CVAE posterior encoder, an observation encoder and an action decoder.

All tensors here are in *normalized* units; observation tokens come from the shared encoders
(see :class:`~rewind.policies.act.modeling_act.ACTPolicy`). With ``N`` observation tokens::

    posterior (training only):  [CLS, (obs), a_0 .. a_{H-1}] -> encoder -> CLS -> (mu, logvar) [B, Z]
    memory:                      [z, o_1 .. o_N]                -> encoder -> [B, 1 + N, D]
    actions:                     H learned queries -> decoder (cross-attends memory) -> [B, H, Da]

Positions are learned embeddings added once to the input tokens (not at every layer as in DETR).
"""

from __future__ import annotations

import torch
from torch import nn

from rewind.policies.act.configuration_act import ACTConfig


def _layer_kwargs(cfg: ACTConfig) -> dict:
    """Arguments shared by the encoder and decoder layers."""
    return {
        "d_model": cfg.d_model,
        "nhead": cfg.n_heads,
        "dim_feedforward": cfg.dim_feedforward,
        "dropout": cfg.dropout,
        "activation": "gelu",
        "batch_first": True,
        "norm_first": cfg.pre_norm,
    }


def _final_norm(cfg: ACTConfig) -> nn.LayerNorm | None:
    return nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None


def _encoder(cfg: ACTConfig, n_layers: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(**_layer_kwargs(cfg))
    return nn.TransformerEncoder(layer, n_layers, norm=_final_norm(cfg), enable_nested_tensor=False)


def _decoder(cfg: ACTConfig) -> nn.TransformerDecoder:
    layer = nn.TransformerDecoderLayer(**_layer_kwargs(cfg))
    return nn.TransformerDecoder(layer, cfg.n_decoder_layers, norm=_final_norm(cfg))


class ACTNetwork(nn.Module):
    """CVAE encoder-decoder over observation tokens ``[B, N, D]`` and action chunks ``[B, H, Da]``."""

    def __init__(self, cfg: ACTConfig, action_dim: int, n_obs_tokens: int) -> None:
        """Build the three transformers for ``n_obs_tokens`` observation tokens of width ``d_model``."""
        super().__init__()
        d, h = cfg.d_model, cfg.horizon
        self.cfg, self.action_dim, self.n_obs_tokens = cfg, action_dim, n_obs_tokens
        # CVAE posterior q(z | actions, obs)
        self.vae_cls = nn.Parameter(torch.zeros(1, 1, d))
        self.vae_action_in = nn.Linear(action_dim, d)
        self.vae_pos = nn.Parameter(torch.zeros(1, 2 + h, d))
        self.vae_encoder = _encoder(cfg, cfg.n_vae_encoder_layers)
        self.vae_out = nn.Linear(d, 2 * cfg.latent_dim)
        # observation encoder: [z, obs tokens]
        self.latent_in = nn.Linear(cfg.latent_dim, d)
        self.memory_pos = nn.Parameter(torch.zeros(1, 1 + n_obs_tokens, d))
        self.encoder = _encoder(cfg, cfg.n_encoder_layers)
        # action decoder: H learned queries
        self.queries = nn.Parameter(torch.zeros(1, h, d))
        self.decoder = _decoder(cfg)
        self.action_out = nn.Linear(d, action_dim)
        for p in (self.vae_cls, self.vae_pos, self.memory_pos, self.queries):
            nn.init.normal_(p, std=0.02)

    def posterior(
        self, obs_tokens: torch.Tensor, actions: torch.Tensor, action_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, logvar)``, each ``[B, Z]``, from ``obs_tokens`` ``[B, N, D]``, normalized
        ``actions`` ``[B, H, Da]`` and ``action_mask`` ``[B, H]`` (False: padded, not attended)."""
        b = actions.shape[0]
        cls = self.vae_cls.expand(b, -1, -1)
        obs = obs_tokens.mean(dim=1, keepdim=True)
        keep_obs = torch.ones(b, 1, dtype=torch.bool, device=actions.device)
        if not self.cfg.vae_use_obs:  # keep the position layout, hide the token
            obs, keep_obs = torch.zeros_like(obs), ~keep_obs
        tokens = torch.cat([cls, obs, self.vae_action_in(actions)], dim=1) + self.vae_pos
        keep = torch.cat([torch.ones_like(keep_obs), keep_obs, action_mask.bool()], dim=1)
        out = self.vae_encoder(tokens, src_key_padding_mask=~keep)
        mu, logvar = self.vae_out(out[:, 0]).chunk(2, dim=-1)
        return mu, logvar

    def memory(self, obs_tokens: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Encoder memory ``[B, 1 + N, D]`` from ``obs_tokens`` ``[B, N, D]`` and latent ``z`` ``[B, Z]``."""
        tokens = torch.cat([self.latent_in(z).unsqueeze(1), obs_tokens], dim=1) + self.memory_pos
        return self.encoder(tokens)

    def decode(self, memory: torch.Tensor) -> torch.Tensor:
        """Normalized action chunk ``[B, H, Da]`` from the encoder ``memory`` ``[B, 1 + N, D]``."""
        queries = self.queries.expand(memory.shape[0], -1, -1)
        return self.action_out(self.decoder(queries, memory))


def kl_to_standard_normal(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """``KL(N(mu, exp(logvar)) || N(0, I))`` summed over the latent dims: ``[B, Z] -> [B]``."""
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(dim=-1)
