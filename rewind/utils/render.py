"""Headless OpenGL for MuJoCo: a rendering backend that works, chosen before ``mujoco`` is imported.

MuJoCo reads ``MUJOCO_GL`` once, when ``mujoco`` is imported. Unset, it uses GLFW, which needs a
display: headless, the first render dies with ``mujoco.FatalError``. A value MuJoCo does not know
makes ``import mujoco`` raise, and ``osmesa`` without libOSMesa fails there too. So the commands that
render (``rewind-teleop``, ``rewind-eval``) call :func:`select_headless_gl` before anything imports
``mujoco``, and :func:`ensure_headless_gl` where they need a GL context::

    MUJOCO_GL unset   probe EGL, then OSMesa (each in a subprocess that renders a tiny model);
                      the first that works is set for this process and its children
    MUJOCO_GL set     kept, once its library is found (a bogus value or a missing library is
                      reported in one line that names the fix)

``python -m rewind.utils.render`` prints the backend it would use (exit 2 and the fix when none).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable

from rewind.config import ConfigError

log = logging.getLogger(__name__)

GL_ENV = "MUJOCO_GL"
#: Headless backends tried, in order, when ``MUJOCO_GL`` is unset.
HEADLESS_BACKENDS = ("egl", "osmesa")
#: The shared library each backend loads (``ctypes.util.find_library`` name).
BACKEND_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa", "glx": "GL"}
#: Values MuJoCo accepts on Linux (``mujoco/rendering/classic/gl_context.py``).
VALID_VALUES = (
    "egl",
    "osmesa",
    "glfw",
    "glx",
    "enable",
    "enabled",
    "on",
    "true",
    "1",
    "disable",
    "disabled",
    "off",
    "false",
    "0",
)
FIX = (
    "set MUJOCO_GL=egl (needs libegl1) or MUJOCO_GL=osmesa (needs libosmesa6: "
    "sudo apt-get install libosmesa6)"
)
PROBE_TIMEOUT_S = 60.0
_PROBE = """
import mujoco
xml = '<mujoco><worldbody><light pos="0 0 1"/><geom size=".1"/></worldbody></mujoco>'
m = mujoco.MjModel.from_xml_string(xml)
d = mujoco.MjData(m)
mujoco.mj_forward(m, d)
r = mujoco.Renderer(m, 16, 16)
r.update_scene(d)
assert r.render().shape == (16, 16, 3)
r.close()
"""

_selected: str | None = None
_failure: str | None = None


class RenderBackendError(ConfigError):
    """No OpenGL backend MuJoCo can render with (reported in one line that names the fix)."""


def probe_backend(backend: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` when MuJoCo renders a tiny model with ``MUJOCO_GL=backend`` (in a subprocess, so a
    crash or a bad driver cannot take this process down); otherwise why not, in one line."""
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
    env[GL_ENV] = backend
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:.0f} s"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"exit status {proc.returncode}"


def check_gl_setting(value: str) -> None:
    """Raise :class:`RenderBackendError` for a ``MUJOCO_GL`` value MuJoCo rejects, or whose library
    is not installed (both would fail at ``import mujoco``, with a traceback)."""
    name = value.strip().lower()
    if name not in VALID_VALUES:
        raise RenderBackendError(
            f"MUJOCO_GL={value} is not a MuJoCo rendering backend (valid on Linux: egl, osmesa, glfw); "
            f"{FIX}, or unset MUJOCO_GL to pick a working one"
        )
    lib = BACKEND_LIBRARIES.get(name)
    if lib is not None and ctypes.util.find_library(lib) is None:
        raise RenderBackendError(f"MUJOCO_GL={value} but lib{lib} is not installed; {FIX}")


def _preload_triton() -> None:
    """With OSMesa, triton must load before libOSMesa (both carry LLVM; see ``rewind/__init__.py``)."""
    if "mujoco" not in sys.modules:
        with contextlib.suppress(ImportError):
            import triton  # noqa: F401


def select_headless_gl(probe: Callable[[str], str | None] = probe_backend) -> str | None:
    """Choose the rendering backend before ``mujoco`` is imported; returns ``MUJOCO_GL`` after it.

    A set value is checked (:func:`check_gl_setting`, which raises) and kept. Unset, the first of
    :data:`HEADLESS_BACKENDS` that ``probe`` finds working is set in ``os.environ``; when none works
    nothing is set and :func:`ensure_headless_gl` raises later, so commands that never render still
    run. Probes once per process.
    """
    global _selected, _failure
    value = os.environ.get(GL_ENV, "")
    if value.strip():
        check_gl_setting(value)
        return value
    if _selected is not None or _failure is not None:
        return _selected
    if "mujoco" in sys.modules:  # too late to choose: it uses GLFW, which needs a display
        if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
            _selected = "glfw"
        else:
            _failure = "MUJOCO_GL was unset when mujoco was imported, and there is no display"
        return _selected
    reasons = []
    for backend in HEADLESS_BACKENDS:
        why = probe(backend)
        if why is None:
            if backend == "osmesa":
                _preload_triton()
            os.environ[GL_ENV] = _selected = backend
            log.debug("MUJOCO_GL was unset: using %s", backend)
            return backend
        reasons.append(f"{backend}: {why}")
    _failure = "; ".join(reasons)
    return None


def ensure_headless_gl() -> str:
    """The rendering backend in use; call it before creating a GL context (``mujoco.Renderer``).

    Raises:
        RenderBackendError: none works (one line: what was tried and how to fix it).
    """
    value = select_headless_gl()
    if value:
        return value
    raise RenderBackendError(f"no OpenGL backend for MuJoCo rendering ({_failure}); {FIX}")


def main() -> None:
    """``python -m rewind.utils.render``: print the backend, or the fix (exit status 2)."""
    try:
        print(ensure_headless_gl())  # noqa: T201 (the command's output)
    except RenderBackendError as exc:
        sys.stderr.write(f"rewind render: error: {exc}\n")
        raise SystemExit(2) from None


def guard_command(prog: str) -> None:
    """For a command's module, before it imports ``mujoco``: :func:`select_headless_gl`, a bad
    ``MUJOCO_GL`` reported as ``prog: error: ...`` with exit status 2."""
    try:
        select_headless_gl()
    except RenderBackendError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
