"""Camera frames for the page: headless rendering, JPEG encoding, and the latest-value hand-off.

The simulation thread renders and encodes (MuJoCo's GL context stays in that thread) and publishes
each :class:`Frame` into a :class:`Latest`; every HTTP stream waits for the next one and skips any it
was too slow to send, so a slow client never builds up latency.
"""

from __future__ import annotations

import io
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import mujoco
import numpy as np
from PIL import Image

from rewind.utils.render import FIX, GL_ENV, RenderBackendError

T = TypeVar("T")


@dataclass(frozen=True)
class Frame:
    """One encoded camera frame.

    Attributes:
        jpeg: the JPEG bytes; step: the env's control step shown.
        input_seq: sequence number of the latest human input applied before it was rendered.
        source: who made the last step (``policy``, ``human``, ``recovery``, or ``""`` when none).
        stamp: ``time.monotonic()`` when it was encoded.
    """

    jpeg: bytes
    step: int
    input_seq: int
    source: str
    stamp: float


def encode_jpeg(rgb: np.ndarray, quality: int = 80) -> bytes:
    """JPEG bytes of a uint8 ``[H, W, 3]`` image."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb)).save(buf, format="JPEG", quality=int(quality))
    return buf.getvalue()


class FrameRenderer:
    """Renders a task env's cameras at ``size`` x ``size`` with its own MuJoCo renderer (the env's may
    be rendering the policy's ``rgb`` observation at another size). Use from one thread only.

    Shadows and reflections are off by default: with OSMesa they are most of the render time (at
    256x256 on the 2-core development machine about 5 ms without them, 2-4x that with them), and the
    20 Hz budget needs it.
    """

    def __init__(
        self, base: Any, size: int = 256, quality: int = 80, shadows: bool = False, reflections: bool = False
    ) -> None:
        self.base, self.size, self.quality = base, int(size), int(quality)
        self.shadows, self.reflections = bool(shadows), bool(reflections)
        self._renderer: mujoco.Renderer | None = None

    def render(self, camera: str) -> np.ndarray:
        """The RGB image of ``camera`` now."""
        if self._renderer is None:
            try:
                self._renderer = mujoco.Renderer(self.base.model, self.size, self.size)
            except Exception as exc:  # mujoco.FatalError, ImportError: no usable OpenGL
                gl = os.environ.get(GL_ENV) or "unset (GLFW, which needs a display)"
                raise RenderBackendError(f"cannot render: MUJOCO_GL={gl} ({exc}); {FIX}") from exc
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = self.reflections
        self._renderer.update_scene(self.base.data, camera=camera)
        return self._renderer.render()

    def jpeg(self, camera: str) -> bytes:
        """The JPEG of ``camera`` now."""
        return encode_jpeg(self.render(camera), self.quality)

    def close(self) -> None:
        """Release the GL context (from the thread that rendered)."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


class Latest(Generic[T]):
    """The latest value published by one thread, awaited by many (frames, session state)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._value: T | None = None
        self._seq = 0
        self.closed = False

    def publish(self, value: T) -> int:
        """Replace the value and wake every waiter; returns its sequence number."""
        with self._cond:
            self._value, self._seq = value, self._seq + 1
            self._cond.notify_all()
            return self._seq

    def get(self) -> tuple[int, T | None]:
        """``(sequence number, value)`` now (``(0, None)`` before the first publish)."""
        with self._cond:
            return self._seq, self._value

    def wait_newer(self, seq: int, timeout: float) -> tuple[int, T | None]:
        """Block until a value newer than ``seq`` is published (or ``timeout`` s, or :meth:`close`);
        returns the latest ``(sequence number, value)``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._seq <= seq and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._seq, self._value

    def close(self) -> None:
        """Wake every waiter for good (server shutdown)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
