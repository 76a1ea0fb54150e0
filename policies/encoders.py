"""Observation encoders: a (normalized) obs window ``dict[key -> [B, To, ...]]`` -> features ``[B, F]``.

* :class:`LowDimEncoder` -- vectors ``[B, To, D_k]``, concatenated over keys per step.
* :class:`ImageEncoder` -- uint8-derived images ``[B, To, H, W, C]`` (**HWC**, the layout the env
  and the store use; values already in ``[0, 1]`` after the normalizer) through a small CNN trained
  from scratch (GroupNorm, random crop while training, spatial softmax or global average pool),
  concatenated with an optional :class:`LowDimEncoder`.

Randomness: the training-time crop draws its offsets from the ``generator`` passed to
``forward``; without one it falls back to torch's default generator (the policies always pass
their own seeded generator). Evaluation uses a deterministic center crop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn


def mlp(d_in: int, d_out: int) -> nn.Sequential:
    """Two-layer MLP ``[..., d_in] -> [..., d_out]``: Linear, LayerNorm, Mish, Linear."""
    return nn.Sequential(nn.Linear(d_in, d_out), nn.LayerNorm(d_out), nn.Mish(), nn.Linear(d_out, d_out))


class LowDimEncoder(nn.Module):
    """Low-dim keys -> ``[B, out_dim]``.

    Args:
        keys: observation keys, concatenated per step in this order (``D = sum D_k``).
        dims: key -> ``D_k``.
        n_obs_steps: ``To``.
        feature_dim: ``F``.
        mode: ``"flatten"`` (default): ``[B, To * D]`` -> MLP -> ``[B, F]``;
            ``"per_step"``: one shared MLP per step ``[B, To, D] -> [B, To, F]``, flattened to
            ``[B, To * F]``.
    """

    def __init__(
        self,
        keys: Sequence[str],
        dims: Mapping[str, int],
        n_obs_steps: int,
        feature_dim: int = 256,
        mode: str = "flatten",
    ) -> None:
        super().__init__()
        if mode not in ("flatten", "per_step"):
            raise ValueError(f"low-dim encoder mode must be one of [flatten, per_step]; got {mode}")
        self.keys, self.mode, self.n_obs_steps = list(keys), mode, n_obs_steps
        d = sum(int(dims[k]) for k in self.keys)
        self.net = mlp(n_obs_steps * d if mode == "flatten" else d, feature_dim)
        self.out_dim = feature_dim if mode == "flatten" else n_obs_steps * feature_dim

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``obs[key]`` ``[B, To, D_k]`` -> ``[B, out_dim]``."""
        x = torch.cat([obs[k].flatten(2) for k in self.keys], dim=-1)  # [B, To, D]
        if self.mode == "flatten":
            return self.net(x.flatten(1))
        return self.net(x).flatten(1)


class SpatialSoftmax(nn.Module):
    """``[N, C, h, w]`` -> ``[N, 2K]`` expected (x, y) image coordinates of ``K`` learned keypoint maps."""

    def __init__(self, channels: int, num_keypoints: int = 32) -> None:
        super().__init__()
        self.proj = nn.Conv1d(channels, num_keypoints, 1)
        self.out_dim = 2 * num_keypoints

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        """Soft-argmax per keypoint map, coordinates in ``[-1, 1]``."""
        n, c, h, w = feat.shape
        attn = self.proj(feat.flatten(2)).softmax(dim=-1)  # [N, K, h*w]
        ys = torch.linspace(-1, 1, h, device=feat.device, dtype=attn.dtype)
        xs = torch.linspace(-1, 1, w, device=feat.device, dtype=attn.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        grid = torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=-1)  # [h*w, 2]
        return (attn @ grid).flatten(1)


def _cnn(in_channels: int, n_groups: int) -> tuple[nn.Sequential, int]:
    """Four conv stages (strides 2, 2, 2, 1) with GroupNorm + Mish; returns ``(net, out_channels)``."""
    chans = [in_channels, 32, 64, 128, 128]
    layers: list[nn.Module] = []
    for i, stride in enumerate((2, 2, 2, 1)):
        kernel = 5 if i == 0 else 3
        layers += [
            nn.Conv2d(chans[i], chans[i + 1], kernel, stride=stride, padding=kernel // 2),
            nn.GroupNorm(n_groups, chans[i + 1]),
            nn.Mish(),
        ]
    return nn.Sequential(*layers), chans[-1]


class ImageEncoder(nn.Module):
    """Images (+ low-dim) -> ``[B, out_dim]``.

    Args:
        image_keys: keys of ``[B, To, H, W, C]`` float images in ``[0, 1]`` (HWC).
        image_shape: ``(H, W, C)`` of every image key.
        n_obs_steps: ``To``.
        crop_ratio: train-time random crop of ``round(H * r) x round(W * r)`` (center crop at eval);
            ``1.0`` disables cropping.
        pool: ``"spatial_softmax"`` (default) or ``"avg"``.
        image_feature_dim: features per image and step after a linear layer.
        low_dim: optional low-dim encoder whose features are concatenated.
        n_groups: GroupNorm groups of the CNN.

    Output: ``[B, To * len(image_keys) * image_feature_dim + low_dim.out_dim]``. One CNN per key.
    """

    def __init__(
        self,
        image_keys: Sequence[str],
        image_shape: Sequence[int],
        n_obs_steps: int,
        crop_ratio: float = 0.9,
        pool: str = "spatial_softmax",
        image_feature_dim: int = 64,
        low_dim: LowDimEncoder | None = None,
        n_groups: int = 8,
    ) -> None:
        super().__init__()
        if pool not in ("spatial_softmax", "avg"):
            raise ValueError(f"image pool must be one of [spatial_softmax, avg]; got {pool}")
        h, w, c = (int(s) for s in image_shape)
        self.image_keys, self.n_obs_steps = list(image_keys), n_obs_steps
        self.crop = (max(1, round(h * crop_ratio)), max(1, round(w * crop_ratio)))
        self.backbones = nn.ModuleDict()
        for key in self.image_keys:
            cnn, c_out = _cnn(c, n_groups)
            pooler: nn.Module = (
                SpatialSoftmax(c_out) if pool == "spatial_softmax" else nn.AdaptiveAvgPool2d(1)
            )
            pooled = pooler.out_dim if pool == "spatial_softmax" else c_out
            self.backbones[key] = nn.Sequential(
                cnn, pooler, nn.Flatten(1), nn.Linear(pooled, image_feature_dim)
            )
        self.low_dim = low_dim
        low = low_dim.out_dim if low_dim is not None else 0
        self.out_dim = n_obs_steps * len(self.image_keys) * image_feature_dim + low

    def _crop(self, img: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """``[N, C, H, W]`` -> ``[N, C, ch, cw]``: random per-image offsets in training, else center."""
        n, _, h, w = img.shape
        ch, cw = self.crop
        if (ch, cw) == (h, w):
            return img
        if not self.training:
            top, left = (h - ch) // 2, (w - cw) // 2
            return img[:, :, top : top + ch, left : left + cw]
        dev = generator.device if generator is not None else torch.device("cpu")
        top = torch.randint(0, h - ch + 1, (n,), generator=generator, device=dev).to(img.device)
        left = torch.randint(0, w - cw + 1, (n,), generator=generator, device=dev).to(img.device)
        rows = (top[:, None] + torch.arange(ch, device=img.device))[:, None, :, None]
        cols = (left[:, None] + torch.arange(cw, device=img.device))[:, None, None, :]
        batch = torch.arange(n, device=img.device)[:, None, None, None]
        chan = torch.arange(img.shape[1], device=img.device)[None, :, None, None]
        return img[batch, chan, rows, cols]

    def forward(
        self, obs: Mapping[str, torch.Tensor], generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``obs[image_key]`` ``[B, To, H, W, C]`` (+ low-dim keys) -> ``[B, out_dim]``."""
        feats = []
        for key in self.image_keys:
            img = obs[key]
            b, t = img.shape[:2]
            x = img.reshape(b * t, *img.shape[2:]).permute(0, 3, 1, 2)  # [B*To, C, H, W]
            x = self._crop(x, generator)
            feats.append(self.backbones[key](x).reshape(b, -1))
        if self.low_dim is not None:
            feats.append(self.low_dim(obs))
        return torch.cat(feats, dim=-1)
