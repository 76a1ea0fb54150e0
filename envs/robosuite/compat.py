"""Import robosuite once, behind the version pins of the ``rewind[robosuite]`` extra.

robosuite 1.5.2's controllers break on mujoco >= 3.10 and its ``mink==0.0.5`` requirement forces
numpy < 2, so the extra lives in its own virtualenv (``bash .ci/robosuite_venv.sh``). Every error
here names the pin and how to get it.
"""

from __future__ import annotations

import importlib.metadata
import re
from types import ModuleType

ROBOSUITE_PIN = "robosuite==1.5.2"
MUJOCO_PIN = "mujoco>=3.2,<3.10"
INSTALL_HINT = (
    "build the extra's own virtualenv with `bash .ci/robosuite_venv.sh` (or `pip install 'rewind[robosuite]'` "
    "into a fresh one; docs/robosuite.md)"
)


class RobosuiteUnavailable(ImportError):
    """robosuite is not installed, or its version (or mujoco's) is outside the extra's pins."""


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"3.9.0rc1"`` -> ``(3, 9, 0)``."""
    parts = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in parts.group(0).split(".")) if parts else ()


def check_versions(robosuite_version: str, mujoco_version: str) -> None:
    """Raise :class:`RobosuiteUnavailable` naming the pin unless both versions are inside it."""
    if _release(robosuite_version)[:3] != (1, 5, 2):
        raise RobosuiteUnavailable(
            f"robosuite {robosuite_version} is installed; rewind's robosuite envs need {ROBOSUITE_PIN} "
            f"(the rewind[robosuite] extra); {INSTALL_HINT}"
        )
    if not (3, 2) <= _release(mujoco_version)[:2] < (3, 10):
        raise RobosuiteUnavailable(
            f"mujoco {mujoco_version} is installed; {ROBOSUITE_PIN} needs {MUJOCO_PIN} (its controllers break "
            f"on mujoco >= 3.10); {INSTALL_HINT}"
        )


def check_installed() -> None:
    """Raise :class:`RobosuiteUnavailable` naming the extra unless robosuite and mujoco are installed
    inside the pins (reads package metadata only: imports nothing)."""
    try:
        version = importlib.metadata.version("robosuite")
    except importlib.metadata.PackageNotFoundError:
        raise RobosuiteUnavailable(
            f"robosuite is not installed: rewind's robosuite envs need the optional extra rewind[robosuite] "
            f"({ROBOSUITE_PIN}, {MUJOCO_PIN}, numpy<2) in its own virtualenv; {INSTALL_HINT}"
        ) from None
    check_versions(version, importlib.metadata.version("mujoco"))


def require_robosuite() -> ModuleType:
    """Import and return robosuite after checking the pins (raises :class:`RobosuiteUnavailable`)."""
    check_installed()
    import robosuite  # noqa: PLC0415 - imported on use: the base install has no robosuite

    return robosuite
