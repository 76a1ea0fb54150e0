"""What a person's keys and gamepad mean: the key bindings and the human action they make.

The browser sends the set of held keys (``KeyboardEvent.code`` names) and, when a gamepad is
connected, its stick values already mapped to ``[dx, dy, dz, dyaw]``. :class:`HumanInput` keeps the
latest of both (thread-safe: HTTP threads write, the simulation thread reads) and forgets them when
the page stops refreshing them, so a closed tab never leaves a key held down.

Directions are those of the ``front`` camera view: right/left move along world ``+x``/``-x``, up/down
(``W``/``S``) move away from / towards the viewer (``+y``/``-y``), ``R``/``F`` raise and lower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rewind.config import require
from rewind.envs.core.mjcf import FINGER_STROKE

#: Held keys that move the gripper: ``KeyboardEvent.code`` -> (action index, sign).
MOVE_KEYS: dict[str, tuple[int, float]] = {
    "KeyD": (0, 1.0),
    "ArrowRight": (0, 1.0),
    "KeyA": (0, -1.0),
    "ArrowLeft": (0, -1.0),
    "KeyW": (1, 1.0),
    "ArrowUp": (1, 1.0),
    "KeyS": (1, -1.0),
    "ArrowDown": (1, -1.0),
    "KeyR": (2, 1.0),
    "PageUp": (2, 1.0),
    "KeyF": (2, -1.0),
    "PageDown": (2, -1.0),
    "KeyQ": (3, 1.0),
    "KeyE": (3, -1.0),
}

#: Keys held to move slowly (precise mode).
PRECISE_KEYS = frozenset({"ShiftLeft", "ShiftRight"})

#: Key presses that send a session command: code -> (command, arguments). The page reads this table.
COMMAND_KEYS: dict[str, tuple[str, dict[str, object]]] = {
    "Space": ("grip", {"value": "toggle"}),
    "KeyP": ("pause", {}),
    "KeyT": ("takeover", {}),
    "KeyH": ("handback", {}),
    "KeyB": ("rewind", {}),
    "KeyC": ("camera", {}),
}

#: One line per binding, for the page's help and the docs.
KEY_HELP: tuple[tuple[str, str], ...] = (
    ("W / S or Up / Down", "move away from / towards the camera (+y / -y)"),
    ("A / D or Left / Right", "move left / right (-x / +x)"),
    ("R / F or PageUp / PageDown", "move up / down (+z / -z)"),
    ("Q / E", "turn the gripper left / right (yaw)"),
    ("Shift (held)", "precise: move slowly"),
    ("Space", "close / open the gripper (toggle)"),
    ("T", "take over (toggle): press once to drive, press again to hand back"),
    ("P", "pause (toggle): freeze the simulation, press again to resume"),
    ("H", "hand back to the policy"),
    ("B", "rewind to the latest checkpoint"),
    ("C", "switch camera"),
)


@dataclass
class ControlSettings:
    """Scaling of the person's input (the ``control`` node of ``configs/teleop.yaml``).

    Attributes:
        translation_speed: action magnitude of a held move key (1 = 0.02 m per control step).
        yaw_speed: action magnitude of a held yaw key (1 = 0.15 rad per control step).
        precise_scale: factor applied while Shift is held.
        input_timeout_s: held keys and sticks not refreshed for this long count as released.
        deadzone: stick values below this magnitude count as zero.
    """

    translation_speed: float = 0.5
    yaw_speed: float = 0.5
    precise_scale: float = 0.25
    input_timeout_s: float = 0.5
    deadzone: float = 0.05

    def __post_init__(self) -> None:
        for name in ("translation_speed", "yaw_speed", "precise_scale"):
            value = getattr(self, name)
            require(0.0 < value <= 1.0, f"control.{name} must be in (0, 1]; got {value}")
        require(self.input_timeout_s > 0, f"control.input_timeout_s must be > 0; got {self.input_timeout_s}")
        require(0.0 <= self.deadzone < 1.0, f"control.deadzone must be in [0, 1); got {self.deadzone}")


def keys_to_motion(keys: Iterable[str], settings: ControlSettings) -> np.ndarray:
    """``[dx, dy, dz, dyaw]`` in ``[-1, 1]`` from the held key codes (unknown codes are ignored)."""
    held = set(keys)
    motion = np.zeros(4, dtype=np.float64)
    for code in held:
        if code in MOVE_KEYS:
            idx, sign = MOVE_KEYS[code]
            motion[idx] += sign
    motion = np.clip(motion, -1.0, 1.0)
    motion[:3] *= settings.translation_speed
    motion[3] *= settings.yaw_speed
    if held & PRECISE_KEYS:
        motion *= settings.precise_scale
    return motion


def current_grip_command(base: object) -> float:
    """The finger command (``-1`` closed .. ``+1`` open) the env is currently applying, so that taking
    over keeps the gripper as the policy left it (read from the actuator control, restored by rewinds)."""
    ctrl = float(base.data.ctrl[0])  # type: ignore[attr-defined]
    return float(np.clip(ctrl / FINGER_STROKE * 2.0 - 1.0, -1.0, 1.0))


class HumanInput:
    """The latest held keys and gamepad sticks, shared between the HTTP threads and the simulation."""

    def __init__(self, settings: ControlSettings | None = None) -> None:
        self.settings = settings or ControlSettings()
        self._lock = threading.Lock()
        self._keys: frozenset[str] = frozenset()
        self._axes = np.zeros(4)
        self._stamp = -np.inf
        self._seq = 0
        #: Called (from the updating thread) after each update: the simulation loop's wake-up.
        self.listener: Callable[[], None] | None = None

    def update(self, keys: Sequence[str] = (), axes: Sequence[float] | None = None) -> int:
        """Replace the held keys and stick values; returns this update's sequence number."""
        a = np.zeros(4) if axes is None else np.asarray(axes, dtype=np.float64)
        if a.shape != (4,) or not np.isfinite(a).all():
            raise ValueError(f"axes must be 4 finite numbers [dx, dy, dz, dyaw]; got {list(np.ravel(a))}")
        a = np.clip(a, -1.0, 1.0)
        a[np.abs(a) < self.settings.deadzone] = 0.0
        with self._lock:
            self._keys, self._axes = frozenset(str(k) for k in keys), a
            self._stamp = time.monotonic()
            self._seq += 1
            seq = self._seq
        if self.listener is not None:
            self.listener()
        return seq

    def release(self) -> None:
        """Forget every held key and stick value."""
        with self._lock:
            self._keys, self._axes = frozenset(), np.zeros(4)

    def motion(self) -> tuple[np.ndarray, int]:
        """``[dx, dy, dz, dyaw]`` of the current input and the sequence number it comes from
        (all zero when the input is older than ``input_timeout_s``)."""
        with self._lock:
            keys, axes, stamp, seq = self._keys, self._axes.copy(), self._stamp, self._seq
        if time.monotonic() - stamp > self.settings.input_timeout_s:
            return np.zeros(4), seq
        return np.clip(keys_to_motion(keys, self.settings) + axes, -1.0, 1.0), seq
