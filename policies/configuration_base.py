"""Config fields shared by the policies (chunk timing, observation encoding, normalization, EMA).

Each policy folder subclasses these dataclasses (``policies/<name>/configuration_<name>.py``);
every field is validated in ``__post_init__`` with a message naming the field and the allowed
values. Configs round-trip through JSON (:func:`dataclasses.asdict`; tuples come back as lists
and are converted back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rewind.config import check_choice, check_range, require


@dataclass
class PolicyConfig:
    """Fields every action-chunk policy has.

    Attributes:
        n_obs_steps: ``To``, observation steps per window.
        horizon: ``H``, actions per predicted chunk.
        n_action_steps: ``Ta``, actions executed per chunk (``1 <= Ta <= H - To + 1``).
        obs_keys: low-dim observation keys fed to the encoder; empty = every low-dim key of the
            shape meta (every key that is not a uint8 image).
        image_keys: image keys (uint8 ``[H, W, C]`` per step); empty = no images.
        action_norm: normalization of actions, ``min_max`` (to ``[-1, 1]``) or ``mean_std``.
        obs_norm: normalization of low-dim observations, ``min_max`` or ``mean_std``.
        obs_clip: normalized low-dim observations are clipped to ``[-obs_clip, obs_clip]``, in
            training and at inference; ``None`` (default): no clipping. A coordinate with a tiny but
            nonzero demo range (a cube's quaternion while it stays upright) otherwise becomes a huge
            input once a rollout leaves that range (up to 290 on Stack3 recovery data). In-range data
            (every demo with ``min_max``) is unaffected. Measured on Stack3 (docs/loop.md), clipping at
            5 or 1.5 did not stop fine-tuning on recovery data from lowering success, so it is off.
        obs_scale_floor: per low-dim observation key, the least normalization scale of a dimension as
            a fraction of that key's largest (0: off; see :mod:`rewind.policies.normalizer`): a
            quaternion's x/y that never moved in the demos then scale like its z/w.
        obs_noise: standard deviation of Gaussian noise added to every normalized low-dim observation
            in training (drawn from the training generator, independently per window, step and
            coordinate; validation and inference see clean observations). 0 (default): off. A
            regularizer for small demo sets: nearby states must map to the same action chunk.
        obs_feature_dim: ``F`` of the low-dim encoder MLP.
        low_dim_mode: ``flatten`` (MLP on the ``To`` steps concatenated) or ``per_step``.
        image_crop_ratio: random-crop side ratio while training (center crop at eval), in (0, 1].
        image_pool: ``spatial_softmax`` or ``avg``.
        image_feature_dim: features per image and step.
        mask_padding: exclude padded actions (``action_mask == False``) from the loss.
        seed: seeds the policy's own generator for training noise and crops.
        ema_decay: maximum EMA decay (diffusers ``EMAModel(decay=...)``).
        ema_min_decay: minimum EMA decay.
        ema_use_warmup: use the warmup schedule ``1 - (1 + step / inv_gamma) ** -power``.
        ema_inv_gamma: EMA warmup ``inv_gamma``.
        ema_power: EMA warmup ``power`` (0.75 as in Diffusion Policy).
        ema_update_after_step: EMA starts averaging after this many steps.
    """

    n_obs_steps: int = 2
    horizon: int = 16
    n_action_steps: int = 8
    obs_keys: list[str] = field(default_factory=list)
    image_keys: list[str] = field(default_factory=list)
    action_norm: str = "min_max"
    obs_norm: str = "min_max"
    obs_clip: float | None = None
    obs_scale_floor: float = 0.0
    obs_noise: float = 0.0
    obs_feature_dim: int = 256
    low_dim_mode: str = "flatten"
    image_crop_ratio: float = 0.9
    image_pool: str = "spatial_softmax"
    image_feature_dim: int = 64
    mask_padding: bool = True
    seed: int = 0
    ema_decay: float = 0.9999
    ema_min_decay: float = 0.0
    ema_use_warmup: bool = True
    ema_inv_gamma: float = 1.0
    ema_power: float = 0.75
    ema_update_after_step: int = 0

    def __post_init__(self) -> None:
        self.obs_keys, self.image_keys = list(self.obs_keys), list(self.image_keys)
        check_range("n_obs_steps", self.n_obs_steps, 1)
        check_range("horizon", self.horizon, self.n_obs_steps)
        check_range("n_action_steps", self.n_action_steps, 1, self.horizon - self.n_obs_steps + 1)
        overlap = set(self.obs_keys) & set(self.image_keys)
        require(not overlap, f"obs_keys and image_keys must be disjoint; both contain {sorted(overlap)}")
        check_choice("action_norm", self.action_norm, ["min_max", "mean_std"])
        check_choice("obs_norm", self.obs_norm, ["min_max", "mean_std"])
        require(
            self.obs_clip is None or self.obs_clip > 0, f"obs_clip must be > 0 or null; got {self.obs_clip}"
        )
        require(
            0.0 <= self.obs_scale_floor <= 1.0,
            f"obs_scale_floor must be in [0, 1]; got {self.obs_scale_floor}",
        )
        require(
            math.isfinite(self.obs_noise) and self.obs_noise >= 0.0,
            f"obs_noise must be a finite number >= 0; got {self.obs_noise}",
        )
        check_range("obs_feature_dim", self.obs_feature_dim, 1)
        check_choice("low_dim_mode", self.low_dim_mode, ["flatten", "per_step"])
        require(
            0.0 < self.image_crop_ratio <= 1.0,
            f"image_crop_ratio must be in (0, 1]; got {self.image_crop_ratio}",
        )
        check_choice("image_pool", self.image_pool, ["spatial_softmax", "avg"])
        check_range("image_feature_dim", self.image_feature_dim, 1)
        check_range("ema_decay", self.ema_decay, 0.0, 1.0)
        check_range("ema_min_decay", self.ema_min_decay, 0.0, self.ema_decay)
        check_range("ema_power", self.ema_power, 0.0)
        check_range("ema_inv_gamma", self.ema_inv_gamma, 0.0)
        check_range("ema_update_after_step", self.ema_update_after_step, 0)


@dataclass
class UNetPolicyConfig(PolicyConfig):
    """:class:`PolicyConfig` plus the temporal U-Net backbone (diffusion and flow).

    Attributes:
        down_dims: channels per U-Net level; ``horizon`` must be divisible by
            ``2 ** (len(down_dims) - 1)``. The default ``(32, 64, 128)`` (1.9M parameters with
            Lift's layout) is sized for CPU training (>= 1,000 samples/s at batch 256 on 2 cores,
            see ``docs/policies.md``); ``(128, 256, 512)`` is 18.7M and ``(256, 512, 1024)`` (the
            Diffusion Policy reference, ~65M) wants a GPU.
        kernel_size: temporal kernel size (odd).
        n_groups: GroupNorm groups; must divide every entry of ``down_dims``.
        diffusion_step_embed_dim: size of the time embedding (diffusion step or flow time); even.
    """

    down_dims: tuple[int, ...] = (32, 64, 128)
    kernel_size: int = 5
    n_groups: int = 8
    diffusion_step_embed_dim: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        self.down_dims = tuple(int(d) for d in self.down_dims)
        require(
            bool(self.down_dims) and min(self.down_dims) >= 1,
            f"down_dims must be a non-empty list of positive ints; got {list(self.down_dims)}",
        )
        factor = 2 ** (len(self.down_dims) - 1)
        require(
            self.horizon % factor == 0,
            f"horizon must be divisible by 2 ** (len(down_dims) - 1) = {factor}; got {self.horizon}",
        )
        require(
            self.kernel_size >= 1 and self.kernel_size % 2 == 1,
            f"kernel_size must be a positive odd int; got {self.kernel_size}",
        )
        require(
            self.n_groups >= 1 and not any(d % self.n_groups for d in self.down_dims),
            f"n_groups must divide every entry of down_dims {list(self.down_dims)}; got {self.n_groups}",
        )
        require(
            self.diffusion_step_embed_dim >= 2 and self.diffusion_step_embed_dim % 2 == 0,
            f"diffusion_step_embed_dim must be an even int >= 2; got {self.diffusion_step_embed_dim}",
        )
