"""Typed env configuration (the Hydra ``env`` group), the factory that builds an env from it, and the
``perturb`` node checked into the wrappers' :class:`PerturbationConfig`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rewind.config import ConfigError, require
from rewind.envs.registry import ALL_TASKS, check_installed, get_task, make_env
from rewind.envs.wrappers import PerturbationConfig


@dataclass
class EnvConfig:
    """Which task to build and how (``configs/env/<name>.yaml``).

    Attributes:
        name: task short name: one of lift, pick_place, stack3, nut_peg, and (with the optional extra
            ``rewind[robosuite]``, docs/robosuite.md) robosuite_lift, robosuite_can.
        max_steps: episode step limit; ``None`` keeps the task's default.
        rgb: add a camera image ``obs["rgb"]`` (uint8 ``[image_size, image_size, 3]``; native tasks only).
        image_size: side of the square camera image in pixels (and of rendered video frames).
        camera: camera for ``rgb`` and videos: ``front`` or ``top`` (native tasks), ``agentview``,
            ``frontview``, ``birdview`` or ``sideview`` (robosuite); ``None`` is the task's first.
    """

    name: str = "stack3"
    max_steps: int | None = None
    rgb: bool = False
    image_size: int = 96
    camera: str | None = None

    def __post_init__(self) -> None:
        valid = ", ".join(ALL_TASKS)
        require(self.name in ALL_TASKS, f"env.name must be one of [{valid}]; got '{self.name}'")
        require(
            self.max_steps is None or self.max_steps >= 1, f"env.max_steps must be >= 1; got {self.max_steps}"
        )
        require(16 <= self.image_size <= 1024, f"env.image_size must be in [16, 1024]; got {self.image_size}")
        entry = get_task(self.name)
        cameras = entry.cameras
        require(
            self.camera is None or self.camera in cameras,
            f"env.camera must be one of [{', '.join(cameras)}] for env {self.name}; got '{self.camera}'",
        )
        require(not self.rgb or entry.rgb, f"env.rgb=true is not offered by env {self.name} (low-dim only)")
        try:
            check_installed(entry)
        except ImportError as exc:
            raise ConfigError(f"env {self.name}: {exc}") from None

    @property
    def gym_id(self) -> str:
        """The registered Gymnasium id, e.g. ``rewind/Stack3-v0``."""
        return get_task(self.name).gym_id


def build_env(cfg: EnvConfig) -> gym.Env:
    """Instantiate the env described by ``cfg``."""
    entry = get_task(cfg.name)
    kwargs: dict[str, Any] = {"max_steps": cfg.max_steps, "image_size": cfg.image_size}
    kwargs["camera"] = cfg.camera or entry.cameras[0]
    if entry.rgb:
        kwargs["rgb"] = cfg.rgb
    return make_env(cfg.name, **kwargs)


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
