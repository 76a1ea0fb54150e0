"""Typed env configuration (the Hydra ``env`` group), the factory that builds an env from it, and the
``perturb`` node checked into the wrappers' :class:`PerturbationConfig`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rewind.config import ConfigError, require
from rewind.envs.registry import TASKS, get_task, make_env
from rewind.envs.wrappers import PerturbationConfig


@dataclass
class EnvConfig:
    """Which task to build and how (``configs/env/<name>.yaml``).

    Attributes:
        name: task short name: one of lift, pick_place, stack3, nut_peg.
        max_steps: episode step limit; ``None`` keeps the task's default.
        rgb: add a camera image ``obs["rgb"]`` (uint8 ``[image_size, image_size, 3]``).
        image_size: side of the square camera image in pixels.
        camera: MJCF camera name for ``rgb`` (``front`` or ``top``).
    """

    name: str = "stack3"
    max_steps: int | None = None
    rgb: bool = False
    image_size: int = 96
    camera: str = "front"

    def __post_init__(self) -> None:
        valid = ", ".join(TASKS)
        require(self.name in TASKS, f"env.name must be one of [{valid}]; got '{self.name}'")
        require(
            self.max_steps is None or self.max_steps >= 1, f"env.max_steps must be >= 1; got {self.max_steps}"
        )
        require(16 <= self.image_size <= 1024, f"env.image_size must be in [16, 1024]; got {self.image_size}")
        require(
            self.camera in ("front", "top"), f"env.camera must be one of [front, top]; got '{self.camera}'"
        )

    @property
    def gym_id(self) -> str:
        """The registered Gymnasium id, e.g. ``rewind/Stack3-v0``."""
        return get_task(self.name).gym_id


def build_env(cfg: EnvConfig) -> gym.Env:
    """Instantiate the env described by ``cfg``."""
    return make_env(
        cfg.name, max_steps=cfg.max_steps, rgb=cfg.rgb, image_size=cfg.image_size, camera=cfg.camera
    )


def perturbation_config(profile: dict[str, Any]) -> PerturbationConfig:
    """The wrappers' :class:`PerturbationConfig` from the ``perturb`` node (checked: unknown keys, ranges).

    Raises:
        ConfigError: an unknown key or an invalid value, naming it.
    """
    known = {f.name: f for f in dataclasses.fields(PerturbationConfig)}
    unknown = sorted(set(profile) - set(known))
    if unknown:
        raise ConfigError(f"perturb.{unknown[0]}: unknown key; valid keys: {', '.join(known)}")
    values = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in profile.items()}
    try:
        return PerturbationConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"perturb: {exc}") from exc
