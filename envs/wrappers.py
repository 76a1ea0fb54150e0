"""Seeded perturbation wrappers: a person nudging an object, a grasp slipping, the arm being pushed.

Each wrapper decides once per episode, at ``reset``, whether it fires (with probability ``prob``) and
at which step of its ``window`` (inclusive step indices, counted from 0 at reset). The draw comes from
the wrapper's own ``np.random.Generator``, seeded at ``reset(seed=s)`` from
``np.random.SeedSequence(s, spawn_key=(salt,))`` with a per-wrapper salt, so the env's own RNG and the
other wrappers' draws are untouched. A perturbation is applied at the start of the step it fires on,
before the action, and reported in that step's ``info["perturbation"]`` (a list of dicts, one per
wrapper that fired). All wrappers are off by default (``prob = 0``).

Rewind: every wrapper has ``snapshot()``/``restore()``. A :class:`PerturbationSnapshot` holds the
inner env's snapshot plus the wrapper's own step counter, schedule and generator state, so restoring
it and replaying the same actions reproduces the same perturbations bit-exactly (including a slip in
progress: the finger friction scale is part of the base :class:`~rewind.envs.core.snapshot.SimSnapshot`).
A nudge can instead persist through a restore (``ObjectNudge(on_restore="persist")``): a restore to a
moment before it fired puts the object where the nudge left it, at once, and the nudge does not fire
again, as a person's push on a real robot happens once and stays.
"""

from __future__ import annotations

import logging
import math
import zlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.config import check_choice, check_range, require
from rewind.envs.core.base import WORKSPACE_HIGH, WORKSPACE_LOW, TaskEnv
from rewind.envs.core.contacts import apply_if_clear, held_objects

log = logging.getLogger(__name__)

#: Objects are kept this far inside the table edge (m) by nudges.
TABLE_HALF = 0.3
#: What a restore to a moment before a nudge does to it: ``refire`` (the simulator's past comes back
#: with its schedule: the nudge fires again at its step) or ``persist`` (the displacement stays: it is
#: applied at the restore and never fires again).
NUDGE_ON_RESTORE = ("refire", "persist")


@dataclass(frozen=True)
class PerturbationSnapshot:
    """Snapshot of a perturbation wrapper: the inner env's snapshot plus the wrapper's own state."""

    inner: Any
    rng_state: dict[str, Any]
    state: tuple[Any, ...]


def _check_window(name: str, window: tuple[int, int]) -> None:
    require(0 <= window[0] <= window[1], f"{name} must satisfy 0 <= start <= end; got {window}")


def _check_prob(name: str, p: float) -> None:
    check_range(name, p, 0, 1)


def _check_positive(name: str, x: float) -> None:
    require(x > 0, f"{name} must be > 0; got {x}")


class PerturbationWrapper(gym.Wrapper):
    """Base of the perturbation wrappers: per-episode schedule, own seeded RNG, snapshot/restore.

    Subclasses implement :meth:`_fire`, which applies the perturbation to the unwrapped task env and
    returns the report dict, or ``None`` when it cannot apply yet (it is retried on later steps of the
    window).
    """

    kind: str = ""

    def __init__(
        self, env: gym.Env, prob: float = 0.0, window: tuple[int, int] = (10, 80), seed: int | None = None
    ):
        super().__init__(env)
        _check_prob(f"{type(self).__name__}.prob", prob)
        _check_window(f"{type(self).__name__}.window", window)
        self.prob, self.window = float(prob), (int(window[0]), int(window[1]))
        self._salt = zlib.crc32(self.kind.encode())
        self._rng = self._make_rng(seed)
        self._t = 0
        self._fire_at = -1
        self._done = True

    def _make_rng(self, seed: int | None) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self._salt,)))

    @property
    def base(self) -> TaskEnv:
        """The unwrapped task env."""
        return self.env.unwrapped  # type: ignore[return-value]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset the env and draw this episode's schedule (from a fresh generator when ``seed`` is given)."""
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._rng = self._make_rng(seed)
        fires = self._rng.random() < self.prob
        at = int(self._rng.integers(self.window[0], self.window[1] + 1))
        self._t, self._fire_at, self._done = 0, at if fires else -1, not fires
        self._reset_extra()
        return obs, info

    def step(self, action):
        """Apply the perturbation if it is due, then step the env."""
        report = self._tick()
        obs, reward, terminated, truncated, info = self.env.step(action)
        if report is not None:
            info = dict(info)
            info["perturbation"] = [*info.get("perturbation", []), report]
            log.debug("perturbation %s", report)
        self._t += 1
        return obs, reward, terminated, truncated, info

    def _tick(self) -> dict[str, Any] | None:
        if self._done or self._t < self._fire_at:
            return None
        if self._t > self.window[1]:
            self._done = True
            return None
        report = self._fire()
        if report is not None:
            self._done = True
            report = {"type": self.kind, "step": self._t, **report}
        return report

    def _fire(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def _reset_extra(self) -> None:
        """Hook for subclasses with extra per-episode state."""

    def _extra_state(self) -> tuple[Any, ...]:
        return ()

    def _set_extra_state(self, state: tuple[Any, ...]) -> None:
        """Hook: restore the state returned by :meth:`_extra_state`."""

    # ------------------------------------------------------------------ rewind
    def snapshot(self) -> PerturbationSnapshot:
        """The inner env's snapshot plus this wrapper's counters, schedule and RNG state."""
        return PerturbationSnapshot(
            inner=self.env.get_wrapper_attr("snapshot")(),
            rng_state=self._rng.bit_generator.state,
            state=(self._t, self._fire_at, self._done, *self._extra_state()),
        )

    def restore(self, snap: PerturbationSnapshot) -> None:
        """Restore the inner env and this wrapper to ``snap``."""
        if not isinstance(snap, PerturbationSnapshot):
            raise TypeError(
                f"{type(self).__name__}.restore needs a PerturbationSnapshot; got {type(snap).__name__}"
            )
        self.env.get_wrapper_attr("restore")(snap.inner)
        self._rng.bit_generator.state = snap.rng_state
        self._t, self._fire_at, self._done = snap.state[:3]
        self._set_extra_state(snap.state[3:])

    def _planar_delta(self, magnitude: float) -> np.ndarray:
        ang = self._rng.uniform(-math.pi, math.pi)
        dist = magnitude * self._rng.uniform(0.5, 1.0)
        return np.array([dist * math.cos(ang), dist * math.sin(ang), 0.0])


class ObjectNudge(PerturbationWrapper):
    """Once per episode (with probability ``prob``), slide a random object that is not held by
    ``magnitude`` x U(0.5, 1) metres in a random direction on the table, as a person's nudge would.
    A nudge that would push the object into something is tried the opposite way, then dropped.
    ``on_restore``: what a restore to a moment before the nudge does (:data:`NUDGE_ON_RESTORE`)."""

    kind = "object_nudge"

    def __init__(
        self,
        env: gym.Env,
        prob: float = 0.0,
        window: tuple[int, int] = (5, 60),
        magnitude: float = 0.03,
        seed: int | None = None,
        on_restore: str = "refire",
    ):
        super().__init__(env, prob, window, seed)
        _check_positive("ObjectNudge.magnitude", magnitude)
        check_choice("ObjectNudge.on_restore", on_restore, NUDGE_ON_RESTORE)
        self.magnitude, self.on_restore = float(magnitude), on_restore
        # The nudge this episode has had, in wall time (not part of any snapshot), and a persisted
        # nudge's report for the next step's info.
        self._applied: tuple[str, np.ndarray] | None = None
        self._pending: dict[str, Any] | None = None

    def _reset_extra(self) -> None:
        self._applied, self._pending = None, None

    def _fire(self) -> dict[str, Any] | None:
        env = self.base
        held = held_objects(env)
        free = [n for n in env.object_names if n not in held]
        if not free:
            return None
        name = free[int(self._rng.integers(len(free)))]
        delta = self._planar_delta(self.magnitude)
        for d in (delta, -delta):
            p = env.object_pos(name)
            d = np.clip(p[:2] + d[:2], -TABLE_HALF, TABLE_HALF) - p[:2]
            if apply_if_clear(env, lambda d=d: env.nudge_object(name, d)):
                self._applied = (name, d.copy())
                return {"object": name, "delta": [float(d[0]), float(d[1])]}
        self._applied = (name, np.zeros(2))
        return {"object": name, "delta": [0.0, 0.0], "blocked": True}

    def _tick(self) -> dict[str, Any] | None:
        if self._pending is not None:  # a nudge persisted by the last restore: reported on this step
            report, self._pending = self._pending, None
            return report
        return super()._tick()

    def restore(self, snap: PerturbationSnapshot) -> None:
        """Restore the inner env and this wrapper to ``snap``; with ``on_restore="persist"`` a nudge
        that fired after ``snap`` is applied again now (same object, same displacement) and is done."""
        super().restore(snap)
        self._pending = None
        if self.on_restore != "persist" or self._applied is None or self._done:
            return
        self._done = True
        name, d = self._applied
        env = self.base
        report: dict[str, Any] = {"type": self.kind, "step": self._t, "object": name, "persisted": True}
        kept = bool(d.any()) and name not in held_objects(env)
        kept = kept and apply_if_clear(env, lambda: env.nudge_object(name, d))
        report["delta"] = [float(d[0]), float(d[1])] if kept else [0.0, 0.0]
        if not kept:
            report["blocked"] = True
        self._pending = report


class GripperPush(PerturbationWrapper):
    """Once per episode, shift the gripper (and its target) by ``magnitude`` x U(0.5, 1) metres in a
    random horizontal direction, as a bump of the arm would. Objects in a closed grasp move with it."""

    kind = "gripper_push"

    def __init__(
        self,
        env: gym.Env,
        prob: float = 0.0,
        window: tuple[int, int] = (5, 80),
        magnitude: float = 0.03,
        seed: int | None = None,
    ):
        super().__init__(env, prob, window, seed)
        _check_positive("GripperPush.magnitude", magnitude)
        self.magnitude = float(magnitude)

    def _fire(self) -> dict[str, Any] | None:
        env = self.base
        held = held_objects(env)
        delta = self._planar_delta(self.magnitude)

        def push(d: np.ndarray) -> None:
            env.push_gripper(d)
            for n in held:
                env.object_pos(n)[:] += d

        for d in (delta, -delta):
            g = env.gripper_pos()
            d = np.clip(g + d, WORKSPACE_LOW, WORKSPACE_HIGH) - g
            if apply_if_clear(env, lambda d=d: push(d)):
                return {"delta": [float(x) for x in d], "carried": held}
        return {"delta": [0.0, 0.0, 0.0], "carried": held, "blocked": True}


class GraspSlip(PerturbationWrapper):
    """Once per episode, on the first step in the window at which an object is held, scale the finger
    pads' friction by ``scale`` for ``duration`` steps (via ``set_finger_friction``), then restore it."""

    kind = "grasp_slip"

    def __init__(
        self,
        env: gym.Env,
        prob: float = 0.0,
        window: tuple[int, int] = (10, 150),
        scale: float = 0.05,
        duration: int = 5,
        seed: int | None = None,
    ):
        super().__init__(env, prob, window, seed)
        if not 0.0 <= scale < 1.0:
            raise ValueError(f"GraspSlip.scale must be in [0, 1); got {scale}")
        if duration < 1:
            raise ValueError(f"GraspSlip.duration must be >= 1; got {duration}")
        self.scale, self.duration = float(scale), int(duration)
        self._left, self._saved = 0, 1.0

    def _reset_extra(self) -> None:
        self._left, self._saved = 0, 1.0

    def _extra_state(self) -> tuple[Any, ...]:
        return (self._left, self._saved)

    def _set_extra_state(self, state: tuple[Any, ...]) -> None:
        self._left, self._saved = state

    def _tick(self) -> dict[str, Any] | None:
        if self._left > 0:
            self._left -= 1
            if self._left == 0:
                self.base.set_finger_friction(self._saved)
        return super()._tick()

    def _fire(self) -> dict[str, Any] | None:
        env = self.base
        held = held_objects(env)
        if not held:
            return None
        self._saved = env.snapshot().finger_friction_scale
        env.set_finger_friction(self._saved * self.scale)
        self._left = self.duration
        return {"objects": held, "scale": self.scale, "duration": self.duration}


@dataclass(frozen=True)
class PerturbationConfig:
    """Which perturbation wrappers to add and how (all off by default).

    Windows are inclusive ``(start, end)`` step indices; magnitudes are metres; ``slip_scale`` is the
    finger-friction multiplier during a slip of ``slip_duration`` steps; ``nudge_on_restore`` is what
    a ``restore`` rewind to a moment before the nudge does (:data:`NUDGE_ON_RESTORE`).
    """

    nudge_prob: float = 0.0
    nudge_window: tuple[int, int] = (5, 60)
    nudge_magnitude: float = 0.03
    nudge_on_restore: str = "refire"
    slip_prob: float = 0.0
    slip_window: tuple[int, int] = (10, 150)
    slip_scale: float = 0.05
    slip_duration: int = 5
    push_prob: float = 0.0
    push_window: tuple[int, int] = (5, 80)
    push_magnitude: float = 0.03

    def __post_init__(self) -> None:
        for name in ("nudge_prob", "slip_prob", "push_prob"):
            _check_prob(name, getattr(self, name))
        for name in ("nudge_window", "slip_window", "push_window"):
            w = getattr(self, name)
            if len(w) != 2:
                raise ValueError(f"{name} must be a (start, end) pair; got {w}")
            _check_window(name, w)
        for name in ("nudge_magnitude", "push_magnitude"):
            _check_positive(name, getattr(self, name))
        if not 0.0 <= self.slip_scale < 1.0:
            raise ValueError(f"slip_scale must be in [0, 1); got {self.slip_scale}")
        if self.slip_duration < 1:
            raise ValueError(f"slip_duration must be >= 1; got {self.slip_duration}")
        check_choice("nudge_on_restore", self.nudge_on_restore, NUDGE_ON_RESTORE)

    @property
    def enabled(self) -> bool:
        """Whether any perturbation can fire."""
        return max(self.nudge_prob, self.slip_prob, self.push_prob) > 0


def apply_perturbations(env: gym.Env, cfg: PerturbationConfig) -> gym.Env:
    """Wrap ``env`` with the perturbation wrappers that ``cfg`` enables (none: ``env`` is returned)."""
    if cfg.nudge_prob > 0:
        env = ObjectNudge(
            env, cfg.nudge_prob, cfg.nudge_window, cfg.nudge_magnitude, on_restore=cfg.nudge_on_restore
        )
    if cfg.slip_prob > 0:
        env = GraspSlip(env, cfg.slip_prob, cfg.slip_window, cfg.slip_scale, cfg.slip_duration)
    if cfg.push_prob > 0:
        env = GripperPush(env, cfg.push_prob, cfg.push_window, cfg.push_magnitude)
    return env
