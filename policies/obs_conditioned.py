"""Shared machinery of the observation-conditioned policies: normalizer, obs encoder, batch parsing,
input checks, the seeded training generator and the masked, weighted chunk loss.

A registered policy class is built as ``cls(config, shape_meta)`` and exposes ``config`` (its
dataclass) and ``shape_meta`` (see :mod:`rewind.policies.shape_meta`); :mod:`rewind.policies.io`
relies on both.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rewind.policies.base import ActionChunkPolicy, Obs
from rewind.policies.configuration_base import PolicyConfig
from rewind.policies.encoders import ImageEncoder, LowDimEncoder
from rewind.policies.guidance import GuidanceFn
from rewind.policies.noise import RowGenerators
from rewind.policies.normalizer import Normalizer
from rewind.policies.shape_meta import is_image, low_dim_keys, normalize_shape_meta


def masked_weighted_mse(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scalar loss from ``pred``/``target`` ``[B, H, Da]``.

    Per sample: mean squared error over ``Da`` and the valid steps (``mask`` ``[B, H]`` bool).
    Over the batch: the ``weight``-weighted mean (``sum(w * l) / sum(w)``; ``weight`` ``[B]``), so
    a weight of 0 removes a sample and the loss scale does not depend on the weights' scale.
    """
    err = (pred.float() - target.float()).pow(2).mean(-1)  # [B, H]
    if mask is not None:
        m = mask.to(err.dtype)
        per_sample = (err * m).sum(1) / m.sum(1).clamp_min(1.0)
    else:
        per_sample = err.mean(1)
    if weight is None:
        return per_sample.mean()
    w = weight.to(err.dtype)
    return (per_sample * w).sum() / w.sum().clamp_min(1e-8)


#: Initial-noise modes of sampling policies (:meth:`ObsConditionedPolicy.set_noise_mode`).
NOISE_MODES = ("fresh", "episode")


class ObsConditionedPolicy(ActionChunkPolicy):
    """An :class:`ActionChunkPolicy` with a :class:`Normalizer` and an observation encoder.

    Args:
        config: the policy's config dataclass (a :class:`PolicyConfig`).
        shape_meta: observation/action layout (see :mod:`rewind.policies.shape_meta`).

    Attributes:
        obs_keys / image_keys: the resolved keys the policy reads.
        normalizer: ``"action"`` and ``"obs/<key>"`` statistics (fit with :meth:`fit_normalizer`).
        obs_encoder: :class:`LowDimEncoder` or :class:`ImageEncoder`; ``feature_dim`` is its ``F``.
    """

    name: ClassVar[str] = ""

    def __init__(self, config: PolicyConfig, shape_meta: Mapping[str, Any]) -> None:
        meta = normalize_shape_meta(shape_meta)
        super().__init__(config.n_obs_steps, config.horizon, config.n_action_steps, meta["action_dim"])
        self.config, self.shape_meta = config, meta
        obs_meta = meta["obs"]
        for key in [*config.obs_keys, *config.image_keys]:
            if key not in obs_meta:
                raise ValueError(f"obs key {key!r} is not in shape_meta; available: {sorted(obs_meta)}")
        bad = [k for k in config.image_keys if not is_image(obs_meta[k])]
        if bad:
            raise ValueError(f"image_keys {bad} are not uint8 [H, W, C] in shape_meta")
        self.obs_keys = list(config.obs_keys) or low_dim_keys(meta)
        self.image_keys = list(config.image_keys)
        if not self.obs_keys and not self.image_keys:
            raise ValueError(
                "the policy has no observation keys: shape_meta has no low-dim keys and image_keys is empty"
            )
        dims = {k: int(np.prod(obs_meta[k]["shape"])) for k in self.obs_keys}
        specs = {"action": (meta["action_dim"], config.action_norm)}
        specs.update({f"obs/{k}": (dims[k], config.obs_norm) for k in self.obs_keys})
        specs.update({f"obs/{k}": (0, "image") for k in self.image_keys})
        self.normalizer = Normalizer(specs, obs_clip=config.obs_clip, obs_scale_floor=config.obs_scale_floor)
        self.obs_encoder = self._build_encoder(dims)
        self.feature_dim: int = self.obs_encoder.out_dim
        self._generators: dict[str, torch.Generator] = {}
        self.noise_mode = "fresh"
        self._episode_noise: torch.Tensor | None = None

    def set_noise_mode(self, mode: str) -> None:
        """``fresh``: new initial noise at every inference (default). ``episode``: one initial noise per
        episode, reused by every inference until :meth:`reset` (common random numbers). With a
        deterministic sampler (DDIM, Euler) consecutive chunks then differ only because the
        observation changed, which is what TIDE should measure; each chunk is still a sample of the
        policy. A rewind (``reset``) draws new noise, so a retry is a new sample."""
        if mode not in NOISE_MODES:
            raise ValueError(f"noise mode must be one of [{', '.join(NOISE_MODES)}]; got '{mode}'")
        self.noise_mode = mode
        self._episode_noise = None

    def reset(self) -> None:
        """Forget the rollout state and the episode's noise."""
        super().reset()
        self._episode_noise = None

    def _build_encoder(self, dims: Mapping[str, int]) -> nn.Module:
        cfg = self.config
        low = None
        if self.obs_keys:
            low = LowDimEncoder(self.obs_keys, dims, cfg.n_obs_steps, cfg.obs_feature_dim, cfg.low_dim_mode)
        if not self.image_keys:
            return low
        shapes = {tuple(self.shape_meta["obs"][k]["shape"]) for k in self.image_keys}
        if len(shapes) != 1:
            raise ValueError(f"all image_keys must have the same shape; got {sorted(shapes)}")
        return ImageEncoder(
            self.image_keys,
            shapes.pop(),
            cfg.n_obs_steps,
            crop_ratio=cfg.image_crop_ratio,
            pool=cfg.image_pool,
            image_feature_dim=cfg.image_feature_dim,
            low_dim=low,
        )

    # ----------------------------------------------------------------- helpers
    @property
    def device(self) -> torch.device:
        """Device of the parameters."""
        return next(self.parameters()).device

    @property
    def used_obs_keys(self) -> list[str]:
        """Every observation key the policy reads (low-dim, then images)."""
        return [*self.obs_keys, *self.image_keys]

    def fit_normalizer(self, data: Mapping[str, np.ndarray]) -> None:
        """Fit the normalizer from ``ReplayBuffer.data``-style arrays (``action``, ``obs/<key>``)."""
        self.normalizer.fit(data)

    def training_generator(self, device: torch.device | str) -> torch.Generator:
        """The policy's own generator on ``device`` (seeded with ``config.seed`` on first use)."""
        dev = torch.device(device)
        key = str(dev)
        if key not in self._generators:
            self._generators[key] = torch.Generator(dev).manual_seed(int(self.config.seed))
        return self._generators[key]

    def check_obs(self, obs: Obs) -> Obs:
        """The used keys of ``obs`` on the policy's device; raises on a missing key, a wrong
        window length or a NaN/inf in a float observation (message names the key)."""
        out = {}
        for key in self.used_obs_keys:
            if key not in obs:
                raise KeyError(f"observation key {key!r} missing; got {sorted(obs)}")
            x = torch.as_tensor(obs[key]).to(self.device)
            if x.dim() < 2 or x.shape[1] != self.n_obs_steps:
                raise ValueError(f"obs[{key!r}] must be [B, To={self.n_obs_steps}, ...]; got {list(x.shape)}")
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                raise ValueError(f"obs[{key!r}] contains NaN or inf values")
            out[key] = x
        return out

    def encode_obs(self, obs: Obs, generator: torch.Generator | None = None) -> torch.Tensor:
        """Checked, normalized, encoded features ``[B, F]``. In training mode ``generator`` draws the
        image crops and, with ``config.obs_noise > 0``, the low-dim observation noise."""
        obs_n = self.normalizer.normalize_obs(self.check_obs(obs))
        if self.training and generator is not None and self.config.obs_noise > 0:
            obs_n = self._add_obs_noise(obs_n, generator)
        if isinstance(self.obs_encoder, ImageEncoder):
            return self.obs_encoder(obs_n, generator)
        return self.obs_encoder(obs_n)

    def _add_obs_noise(self, obs_n: dict[str, torch.Tensor], generator: torch.Generator) -> Obs:
        """``obs_n`` with ``N(0, obs_noise^2)`` added to each low-dim key (normalized units)."""
        out = dict(obs_n)
        for key in self.obs_keys:
            x = out[key]
            noise = torch.randn(x.shape, generator=generator, device=generator.device)
            out[key] = x + self.config.obs_noise * noise.to(device=x.device, dtype=x.dtype)
        return out

    def encode(self, obs: Obs) -> torch.Tensor:
        """Observation features ``[B, F]`` from a window ``dict[key -> [B, To, ...]]`` (env units)."""
        return self.encode_obs(obs)

    def split_batch(
        self, batch: Mapping[str, Any]
    ) -> tuple[Obs, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(obs, action_normalized [B, H, Da], mask [B, H] | None, sample_weight [B] | None)`` from
        a window batch with an ``obs`` dict or flat ``obs/<key>`` entries (tensors, env units)."""
        obs = dict(batch["obs"]) if "obs" in batch else {}
        obs.update({k[4:]: v for k, v in batch.items() if k.startswith("obs/")})
        dev = self.device
        action = torch.as_tensor(batch["action"]).to(dev)
        if action.shape[1:] != (self.horizon, self.action_dim):
            raise ValueError(
                f"action must be [B, H={self.horizon}, Da={self.action_dim}]; got {list(action.shape)}"
            )
        mask = batch.get("action_mask") if self.config.mask_padding else None
        if "weight" in batch:
            raise ValueError("batch key 'weight' is now 'sample_weight' (per-window sample weights)")
        weight = batch.get("sample_weight")
        return (
            obs,
            self.normalizer.normalize("action", action),
            None if mask is None else torch.as_tensor(mask).to(dev),
            None if weight is None else torch.as_tensor(weight).to(dev),
        )

    def repeat_features(self, features: torch.Tensor, num_samples: int) -> torch.Tensor:
        """``[B, F]`` -> ``[B * S, F]`` (each row repeated ``S`` times, sample-major inside a row)."""
        return features.repeat_interleave(num_samples, dim=0)

    def initial_noise(self, batch: int, generator: torch.Generator | RowGenerators | None) -> torch.Tensor:
        """Standard normal ``[batch, H, Da]`` drawn on the generator's device, moved to the policy's.
        With :class:`~rewind.policies.noise.RowGenerators` each row block comes from its own stream,
        which also keeps that row's episode noise (``noise_mode=episode``)."""
        shape = (batch, self.horizon, self.action_dim)
        if isinstance(generator, RowGenerators):
            return generator.initial_noise(shape, self.device, reuse=self.noise_mode == "episode")
        cached = self._episode_noise
        if self.noise_mode == "episode" and cached is not None and cached.shape == shape:
            return cached
        dev = generator.device if generator is not None else self.device
        x = torch.randn(shape, generator=generator, device=dev).to(self.device)
        if self.noise_mode == "episode":
            self._episode_noise = x
        return x


class GuidedChunkPolicy(ObsConditionedPolicy):
    """Base of the policies that turn noise into a chunk (diffusion, flow), with optional guidance.

    Subclasses implement :meth:`_generate`; sampling ``S`` chunks encodes the observation once and
    repeats the features. ``guidance`` (``fn(x0_hat, t) -> x0'`` on normalized chunks, see
    :mod:`rewind.policies.guidance`) applies in the last ``guidance_last_k`` steps.
    """

    guidance: GuidanceFn | None = None

    @torch.no_grad()
    def predict_chunk(
        self,
        obs: Obs,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        guidance: GuidanceFn | None = None,
    ) -> torch.Tensor:
        """``[B, S, H, Da]`` chunks (env units); ``guidance`` defaults to :attr:`guidance`."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1; got {num_samples}")
        return self._sample_chunk(obs, num_samples, generator, guidance or self.guidance)

    def _sample_chunk(
        self,
        obs: Obs,
        num_samples: int,
        generator: torch.Generator | None,
        guidance: GuidanceFn | None = None,
        guidance_last_k: int | None = None,
    ) -> torch.Tensor:
        """Encode once, repeat the features ``S`` times, generate ``[B * S, H, Da]``, unnormalize."""
        cond = self.repeat_features(self.encode(obs), num_samples)
        last_k = self.config.guidance_last_k if guidance_last_k is None else guidance_last_k
        x = self._generate(cond, generator, guidance, last_k)
        chunks = self.normalizer.unnormalize("action", x)
        return chunks.reshape(-1, num_samples, self.horizon, self.action_dim)

    @abstractmethod
    def _generate(
        self, cond: torch.Tensor, generator: torch.Generator | None, guidance: GuidanceFn | None, last_k: int
    ) -> torch.Tensor:
        """Normalized chunks ``[N, H, Da]`` from features ``cond`` ``[N, F]``, seeded by ``generator``."""
