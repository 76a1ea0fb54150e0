"""Fixtures of the env tests."""

from __future__ import annotations

import pytest

from rewind.envs.registry import TASKS


@pytest.fixture(params=sorted(TASKS))
def task(request) -> str:
    """Each registered task's short name (tests skip a task whose module does not exist yet)."""
    return request.param
