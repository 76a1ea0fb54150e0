"""Per-key normalization of actions and observations, stored as buffers next to the weights.

Each key has a mode:

* ``"min_max"``: ``y = (x - center) / half_range`` maps the training range to ``[-1, 1]``.
* ``"mean_std"``: ``y = (x - mean) / std``.
* ``"image"``: uint8 -> float in ``[0, 1]`` (no statistics; shape kept).
* ``"identity"``: float cast only.

Statistics are per dimension of the last axis ``D`` (arrays are ``[..., D]``). Dimensions whose
range (or std) is below ``range_eps`` -- e.g. a coordinate that never moved in the demos -- are only
centered (scale 1), so they neither divide by ~0 nor blow test-time noise up into huge inputs.
Normalized low-dim observations (``obs/*`` keys with statistics) are clipped to ``+-obs_clip``:
a dimension with a small but nonzero range is otherwise amplified without bound outside it.

``obs_scale_floor`` treats the dimensions of one observation key as sharing physical units (a
position in metres, a quaternion): no dimension's scale falls below ``obs_scale_floor`` times the
key's largest scale. A cube quaternion whose x/y barely move in the demos (half-range 1e-4) is then
scaled like its z/w, so a small tilt stays a small input instead of a value of 100 or more.

Keys are named like :class:`rewind.store.windows.ReplayBuffer` arrays: ``"action"`` and
``"obs/<key>"``, so ``normalizer.fit(buffer.data)`` works directly.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

NORM_MODES = ("min_max", "mean_std", "image", "identity")


class _KeyStats(nn.Module):
    """Buffers ``loc`` ``[D]`` and ``scale`` ``[D]`` of one key: ``y = (x - loc) / scale``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("loc", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))


class Normalizer(nn.Module):
    """Maps env-unit tensors to network units and back, per key.

    Args:
        specs: key (``"action"`` or ``"obs/<key>"``) -> ``(dim, mode)``; ``dim`` is ``D``, the size
            of the last axis (ignored for ``"image"``).
        range_eps: floor below which a dimension's range/std counts as constant.
        obs_clip: bound of normalized ``obs/*`` values (``None``: unbounded); actions are never clipped.
        obs_scale_floor: per ``obs/*`` key, the least scale of a dimension as a fraction of the key's
            largest scale (0: off); actions are never floored.

    The statistics live in buffers (``stats.<key>.loc`` / ``.scale``) plus a ``fitted`` flag, so they
    are saved and loaded with the model's ``state_dict``. Normalizing with an unfitted normalizer
    raises, as it almost always means :meth:`fit` was forgotten.
    """

    def __init__(
        self,
        specs: Mapping[str, tuple[int, str]],
        range_eps: float = 1e-4,
        obs_clip: float | None = None,
        obs_scale_floor: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= obs_scale_floor <= 1.0:
            raise ValueError(f"obs_scale_floor must be in [0, 1]; got {obs_scale_floor}")
        self.obs_scale_floor = float(obs_scale_floor)
        self.modes: dict[str, str] = {}
        self.range_eps = float(range_eps)
        self.obs_clip = None if obs_clip is None else float(obs_clip)
        self.stats = nn.ModuleDict()
        for key, (dim, mode) in specs.items():
            if mode not in NORM_MODES:
                raise ValueError(
                    f"normalizer mode of {key!r} must be one of {list(NORM_MODES)}; got {mode!r}"
                )
            self.modes[key] = mode
            if mode in ("min_max", "mean_std"):
                self.stats[key] = _KeyStats(int(dim))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def fit(self, stats: Mapping[str, np.ndarray]) -> Normalizer:
        """Compute statistics from data arrays ``[N, ..., D]`` (e.g. ``ReplayBuffer.data``).

        Every key with a statistic-based mode must be present; other entries are ignored.
        Returns ``self``.
        """
        for key, mod in self.stats.items():
            if key not in stats:
                raise KeyError(f"normalizer.fit: no data for {key!r}; got keys {sorted(stats)}")
            data = np.asarray(stats[key], dtype=np.float64)
            dim = mod.loc.shape[0]
            if data.shape[-1] != dim:
                raise ValueError(f"normalizer.fit: {key!r} has last dim {data.shape[-1]}, expected {dim}")
            flat = data.reshape(-1, dim)
            if flat.shape[0] == 0 or not np.all(np.isfinite(flat)):
                raise ValueError(f"normalizer.fit: {key!r} is empty or has non-finite values")
            if self.modes[key] == "min_max":
                lo, hi = flat.min(0), flat.max(0)
                loc, scale = (hi + lo) / 2, (hi - lo) / 2
            else:
                loc, scale = flat.mean(0), flat.std(0)
            if key.startswith("obs/") and self.obs_scale_floor > 0:
                scale = np.maximum(scale, self.obs_scale_floor * scale.max())
            scale = np.where(scale < self.range_eps, 1.0, scale)
            mod.loc.copy_(torch.as_tensor(loc, dtype=torch.float32))
            mod.scale.copy_(torch.as_tensor(scale, dtype=torch.float32))
        self.fitted.fill_(True)
        return self

    def _check(self, key: str) -> str:
        if key not in self.modes:
            raise KeyError(f"normalizer: unknown key {key!r}; known: {sorted(self.modes)}")
        if key in self.stats and not bool(self.fitted):
            raise RuntimeError("normalizer: not fitted; call policy.fit_normalizer(buffer.data) before use")
        return self.modes[key]

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        """Env units -> network units, ``[..., D]`` (images: any shape, uint8 -> ``[0, 1]``)."""
        mode = self._check(key)
        if mode == "image":
            return x.float() / 255.0
        if mode == "identity":
            return x.float()
        s = self.stats[key]
        y = (x.float() - s.loc) / s.scale
        if self.obs_clip is not None and key.startswith("obs/"):
            y = y.clamp(-self.obs_clip, self.obs_clip)
        return y

    def unnormalize(self, key: str, y: torch.Tensor) -> torch.Tensor:
        """Network units -> env units, ``[..., D]`` (inverse of :meth:`normalize`)."""
        mode = self._check(key)
        if mode == "image":
            return (y * 255.0).round().clamp(0, 255).to(torch.uint8)
        if mode == "identity":
            return y
        s = self.stats[key]
        return y * s.scale + s.loc

    def normalize_obs(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Normalize every registered ``obs/<key>`` of an obs dict ``key -> [B, To, ...]``."""
        return {k: self.normalize(f"obs/{k}", v) for k, v in obs.items() if f"obs/{k}" in self.modes}

    def range_report(self, data: Mapping[str, np.ndarray], threshold: float = 1.5) -> dict[str, dict]:
        """How far ``data`` (``obs/<key>`` or ``action`` -> ``[N, D]`` env-unit arrays, e.g. one label's
        steps of a round store) lies outside the fitted statistics, per key with statistics.

        Returns ``key -> {"steps", "max_abs", "max_abs_per_dim", "frac_over"}``: the largest
        ``|normalized value|`` (before any clipping) overall and per dimension, and the share of steps
        with any dimension beyond ``threshold`` (``min_max`` keys map the fitted range to ``[-1, 1]``).
        Keys of ``data`` without statistics are skipped.
        """
        if not bool(self.fitted):
            raise RuntimeError("normalizer: not fitted; a range report needs fitted statistics")
        out: dict[str, dict] = {}
        for key, s in self.stats.items():
            if key not in data or len(data[key]) == 0:
                continue
            x = np.asarray(data[key], dtype=np.float64).reshape(-1, s.loc.shape[0])
            z = np.abs((x - s.loc.double().numpy()) / s.scale.double().numpy())
            out[key] = {
                "steps": int(len(z)),
                "max_abs": float(z.max()),
                "max_abs_per_dim": [float(v) for v in z.max(0)],
                "frac_over": float(np.mean(z.max(1) > threshold)),
            }
        return out
