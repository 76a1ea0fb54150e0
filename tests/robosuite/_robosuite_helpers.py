"""Shared by the robosuite tests: skip unless the rewind[robosuite] extra is importable."""

from __future__ import annotations

import numpy as np
import pytest

from rewind.envs.robosuite.compat import RobosuiteUnavailable, require_robosuite

try:
    require_robosuite()
    MISSING: str | None = None
except RobosuiteUnavailable as exc:  # the base virtualenv: these tests run in .venv-robosuite
    MISSING = str(exc)

needs_robosuite = pytest.mark.skipif(
    MISSING is not None, reason=f"needs the rewind[robosuite] extra (bash .ci/robosuite_venv.sh): {MISSING}"
)


def obs_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Bit-identical observation dicts."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
