"""A 1-D temporal convolutional U-Net with FiLM conditioning (the diffusion and flow backbone).

The network maps a noisy action chunk ``x`` ``[B, H, Da]``, a scalar time per row ``t`` ``[B]`` and
an observation feature vector ``cond`` ``[B, F]`` to a chunk-shaped output ``[B, H, Da]`` (noise,
clean sample or velocity, depending on the policy). Convolutions run along the time axis ``H``
with the action dimensions as channels.

Conditioning: ``t`` is embedded with sinusoids + a small MLP (``E`` dims) and concatenated with
``cond``; every residual block turns that ``[B, E + F]`` vector into a per-channel scale and shift
(FiLM) applied between its two convolutions.

Resolution: each level but the last halves ``H`` (strided conv) and the decoder doubles it back,
so ``H`` must be divisible by ``2 ** (len(down_dims) - 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class SinusoidalTimeEmbedding(nn.Module):
    """``[B]`` float times -> ``[B, dim]`` sin/cos features with geometric frequencies."""

    def __init__(self, dim: int, max_period: float = 10_000.0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"time embedding dim must be even; got {dim}")
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / max(half - 1, 1))
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` ``[B]`` -> ``[B, dim]``."""
        args = t.float()[:, None] * self.freqs[None]
        return torch.cat([args.sin(), args.cos()], dim=-1)


class ConvNormAct(nn.Sequential):
    """Conv1d (same padding) -> GroupNorm -> Mish, on ``[B, C, L]``."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, n_groups: int) -> None:
        super().__init__(
            nn.Conv1d(c_in, c_out, kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(n_groups, c_out),
            nn.Mish(),
        )


class FiLMResBlock(nn.Module):
    """Two :class:`ConvNormAct` with a FiLM (scale, shift) from ``cond`` in between, plus a skip.

    ``x`` ``[B, c_in, L]``, ``cond`` ``[B, cond_dim]`` -> ``[B, c_out, L]``.
    """

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel_size: int, n_groups: int) -> None:
        super().__init__()
        self.conv1 = ConvNormAct(c_in, c_out, kernel_size, n_groups)
        self.conv2 = ConvNormAct(c_out, c_out, kernel_size, n_groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Residual FiLM block; see the class docstring for shapes."""
        h = self.conv1(x)
        scale, shift = self.film(cond)[:, :, None].chunk(2, dim=1)
        h = self.conv2(h * (1 + scale) + shift)
        return h + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """Temporal U-Net: ``forward(x [B, H, Da], t [B], cond [B, F]) -> [B, H, Da]``.

    Args:
        action_dim: ``Da``, input/output channels.
        cond_dim: ``F``, size of the observation features (0 allowed: time only).
        down_dims: channels per resolution level, e.g. ``(32, 64, 128)``.
        kernel_size: temporal kernel of every convolution (odd).
        n_groups: GroupNorm groups (must divide every entry of ``down_dims``).
        time_embed_dim: ``E``, size of the time embedding.
        time_scale: multiplies ``t`` before the sinusoids (1 for integer diffusion steps, ~1000 for
            continuous ``t`` in ``[0, 1]``).
    """

    def __init__(
        self,
        action_dim: int,
        cond_dim: int,
        down_dims: Sequence[int] = (32, 64, 128),
        kernel_size: int = 5,
        n_groups: int = 8,
        time_embed_dim: int = 128,
        time_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.time_scale = float(time_scale)
        self.time_mlp = nn.Sequential(
            SinusoidalTimeEmbedding(time_embed_dim),
            nn.Linear(time_embed_dim, 4 * time_embed_dim),
            nn.Mish(),
            nn.Linear(4 * time_embed_dim, time_embed_dim),
        )
        c_dim = time_embed_dim + cond_dim
        dims = [action_dim, *down_dims]
        n_levels = len(down_dims)

        def block(a: int, b: int) -> FiLMResBlock:
            return FiLMResBlock(a, b, c_dim, kernel_size, n_groups)

        self.down = nn.ModuleList()
        for i in range(n_levels):
            last = i == n_levels - 1
            resample = nn.Identity() if last else nn.Conv1d(dims[i + 1], dims[i + 1], 3, stride=2, padding=1)
            self.down.append(
                nn.ModuleList([block(dims[i], dims[i + 1]), block(dims[i + 1], dims[i + 1]), resample])
            )
        self.mid = nn.ModuleList([block(down_dims[-1], down_dims[-1]), block(down_dims[-1], down_dims[-1])])
        self.up = nn.ModuleList()
        for i in reversed(range(n_levels - 1)):
            c_low, c_out = down_dims[i + 1], down_dims[i]
            upsample = nn.ConvTranspose1d(c_low, c_low, 4, stride=2, padding=1)
            self.up.append(nn.ModuleList([upsample, block(c_low + c_out, c_out), block(c_out, c_out)]))
        self.head = nn.Sequential(
            ConvNormAct(down_dims[0], down_dims[0], kernel_size, n_groups),
            nn.Conv1d(down_dims[0], action_dim, 1),
        )
        self.downsample_factor = 2 ** (n_levels - 1)

    @classmethod
    def from_config(
        cls, config: Any, action_dim: int, cond_dim: int, time_scale: float = 1.0
    ) -> ConditionalUnet1D:
        """Build from a policy config with the U-Net fields (``UNetPolicyConfig``)."""
        return cls(
            action_dim,
            cond_dim,
            config.down_dims,
            config.kernel_size,
            config.n_groups,
            config.diffusion_step_embed_dim,
            time_scale=time_scale,
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``[B, H, Da]``, ``t`` ``[B]`` (or scalar), ``cond`` ``[B, F]`` -> ``[B, H, Da]``."""
        if x.shape[1] % self.downsample_factor:
            raise ValueError(f"horizon {x.shape[1]} must be divisible by {self.downsample_factor}")
        t = torch.as_tensor(t, device=x.device).reshape(-1).expand(x.shape[0])
        c = self.time_mlp(t * self.time_scale)
        if cond is not None:
            c = torch.cat([c, cond.to(c.dtype)], dim=-1)
        h = x.transpose(1, 2)
        skips = []
        for res1, res2, down in self.down:
            h = res2(res1(h, c), c)
            skips.append(h)
            h = down(h)
        skips.pop()  # the deepest level feeds the middle blocks directly
        for res in self.mid:
            h = res(h, c)
        for up, res1, res2 in self.up:
            h = torch.cat([up(h), skips.pop()], dim=1)
            h = res2(res1(h, c), c)
        return self.head(h).transpose(1, 2)
