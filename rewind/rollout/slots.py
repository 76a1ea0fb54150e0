"""Shared-memory slots of the environment workers: where each env's observation, action and physics
state live in one block shared by the parent and the worker processes.

Every env of a pool owns one slot of :attr:`SlotLayout.size` bytes at offset ``index * size``. A slot
holds one array per observation key (from the env's ``Dict`` observation space), the action (from
its ``Box`` action space) and the flat physics state (when the task env has ``physics_state()``).
Observations that do not fit the layout (another key set, shape or dtype) are not an error: the
worker sends those through the pipe instead, so results never depend on the fast path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

_ALIGN = 16


@dataclass(frozen=True)
class ArraySlot:
    """One array inside an env's slot: ``shape`` and ``dtype`` at byte ``offset`` from the slot start."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @functools.cached_property
    def np_dtype(self) -> np.dtype:
        """``dtype`` as a numpy dtype (comparing against it is cheap; against the string is not)."""
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes the array takes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize

    def view(self, buf: memoryview, base: int) -> np.ndarray:
        """The array in ``buf`` for the slot that starts at byte ``base`` (a view, not a copy)."""
        return np.ndarray(self.shape, self.np_dtype, buffer=buf, offset=base + self.offset)

    def fits(self, value: Any) -> bool:
        """``value`` is an array of exactly this shape and dtype (so the copy through the slot is exact)."""
        return isinstance(value, np.ndarray) and value.shape == self.shape and value.dtype == self.np_dtype


@dataclass(frozen=True)
class SlotLayout:
    """The layout of one env's slot (the same for every env of a pool).

    Attributes:
        obs: one :class:`ArraySlot` per observation key, in the observation space's key order.
        action: the action's slot, or ``None`` when the action space is not a ``Box``.
        state: the physics state's slot, or ``None`` when the task env has no ``physics_state()``.
        size: bytes per env (a multiple of 16).
    """

    obs: tuple[ArraySlot, ...]
    action: ArraySlot | None
    state: ArraySlot | None
    size: int

    @classmethod
    def for_env(cls, env: gym.Env) -> SlotLayout:
        """The layout for ``env`` (its spaces, and the length of ``env.unwrapped.physics_state()``)."""
        arrays: list[tuple[str, tuple[int, ...], np.dtype]] = []
        space = env.observation_space
        if isinstance(space, gym.spaces.Dict) and all(isinstance(s, gym.spaces.Box) for s in space.values()):
            arrays += [(k, tuple(s.shape), np.dtype(s.dtype)) for k, s in space.items()]
        n_obs = len(arrays)
        act = env.action_space
        if isinstance(act, gym.spaces.Box):
            arrays.append(("action", tuple(act.shape), np.dtype(act.dtype)))
        state = _physics_state(env)
        if state is not None:
            arrays.append(("state", state.shape, state.dtype))
        slots, offset = [], 0
        for key, shape, dtype in arrays:
            slots.append(ArraySlot(key, shape, dtype.str, offset))
            offset = _aligned(offset + slots[-1].nbytes)
        obs, rest = tuple(slots[:n_obs]), slots[n_obs:]
        action = rest.pop(0) if isinstance(act, gym.spaces.Box) else None
        return cls(obs, action, rest[0] if rest else None, max(offset, _ALIGN))

    def views(self, buf: memoryview, index: int) -> SlotViews:
        """Views of env ``index``'s slot in ``buf``."""
        base = index * self.size
        return SlotViews(
            {s.key: s.view(buf, base) for s in self.obs},
            self.action.view(buf, base) if self.action is not None else None,
            self.state.view(buf, base) if self.state is not None else None,
        )

    def write_obs(self, views: SlotViews, obs: Any) -> bool:
        """Copy ``obs`` into ``views``; ``False`` (the slot then holds nothing useful) when ``obs`` does
        not have exactly the layout's keys, shapes and dtypes."""
        if not isinstance(obs, dict) or len(obs) != len(self.obs):
            return False
        dst = views.obs
        for key, shape, dtype in self._obs_specs:  # the hot path of every worker step: kept tight
            value = obs.get(key)
            if value.__class__ is not np.ndarray or value.shape != shape or value.dtype != dtype:
                return False
            np.copyto(dst[key], value)
        return True

    @functools.cached_property
    def _obs_specs(self) -> tuple[tuple[str, tuple[int, ...], np.dtype], ...]:
        return tuple((s.key, s.shape, s.np_dtype) for s in self.obs)


@dataclass
class SlotViews:
    """The arrays of one env's slot: ``obs`` per key, ``action``, ``state`` (views into shared memory)."""

    obs: dict[str, np.ndarray]
    action: np.ndarray | None
    state: np.ndarray | None


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _physics_state(env: gym.Env) -> np.ndarray | None:
    """``env.unwrapped.physics_state()`` as a 1-D array, or ``None`` when the env has none (or cannot
    give one before its first reset)."""
    fn = getattr(env.unwrapped, "physics_state", None)
    if fn is None:
        return None
    try:
        state = np.asarray(fn())
    except Exception:  # noqa: BLE001 - some envs have no state before reset: served by a call then
        return None
    return state if state.ndim == 1 else None
